//! Helpers for tests that compile CUDA: skip loudly where NVRTC is not installed, fail where it
//! must be.
//!
//! CI runs `scripts/install-cuda-tools.sh`, which exports `TILELANG_REQUIRE_NVRTC=1` along
//! with the library paths; with that set, a missing NVRTC fails the test instead of skipping
//! it, so a broken install cannot turn the compile checks into silent no-ops.

use crate::{Nvrtc, NvrtcError};

/// Is NVRTC required (`TILELANG_REQUIRE_NVRTC` set to anything but `0`/empty)?
pub fn nvrtc_required() -> bool {
    std::env::var("TILELANG_REQUIRE_NVRTC").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The process-wide NVRTC for a test, or `None` after printing `SKIPPED <test>: <why>` to
/// stderr. Panics (failing the test) when NVRTC is required but missing.
pub fn nvrtc_or_skip(test: &str) -> Option<&'static Nvrtc> {
    match Nvrtc::global() {
        Ok(n) => Some(n),
        Err(e) => {
            skip_or_fail(test, &e);
            None
        }
    }
}

/// Report an unavailable tool the way [`nvrtc_or_skip`] does.
pub fn skip_or_fail(test: &str, why: &NvrtcError) {
    if nvrtc_required() {
        panic!(
            "{test}: TILELANG_REQUIRE_NVRTC is set but the CUDA toolchain is unavailable: {why}"
        );
    }
    eprintln!("SKIPPED {test}: the CUDA toolchain is unavailable ({why})");
}

/// Is cuobjdump required too? (The installer provides it with NVRTC.)
pub fn cuobjdump_required() -> bool {
    nvrtc_required()
}
