//! Every example's generated CUDA compiles with NVRTC for sm_80 and sm_90a, with no register
//! spills; the resource usage is printed. Runs without a GPU (only the compiler is needed:
//! `scripts/install-cuda-tools.sh` fetches it, and CI sets TILELANG_REQUIRE_NVRTC so a missing
//! toolchain fails instead of skipping).

mod common;

use common::example_kernels;
use tilelang::Target;

#[test]
fn examples_compile_for_sm80_and_sm90a_without_spills() {
    if tl_nvrtc::testing::nvrtc_or_skip("examples_compile_for_sm80_and_sm90a_without_spills")
        .is_none()
    {
        return;
    }
    let mut failures = vec![];
    for k in example_kernels() {
        for target in [Target::SM80, Target::SM90] {
            for (variant, src) in [
                ("aligned", k.emit(target)),
                ("general", k.emit_general(target)),
            ] {
                let src = match src {
                    Ok(s) => s,
                    Err(e) => {
                        failures.push(format!("{} ({variant}) for {target}: {e}", k.name()));
                        continue;
                    }
                };
                match tl_nvrtc::check(&src, &target.arch()) {
                    Ok(r) => println!("{} ({variant}) {r}", k.name()),
                    Err(e) => failures.push(format!("{} ({variant}) for {target}: {e}", k.name())),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
