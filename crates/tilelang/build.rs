//! A fingerprint of the compiler's own sources (`TILELANG_BUILD_ID`): the disk cache can then
//! link a kernel's tile IR straight to its compiled code, skipping lowering and code generation
//! on a hit, without ever serving code an older compiler made. Every crate that turns tile IR
//! into device code is hashed (sources and device headers); outside this workspace (a packaged
//! crate) the package version stands in.

use std::path::{Path, PathBuf};

/// The crates whose code decides what a kernel compiles to.
const COMPILER_CRATES: &[&str] = &[
    "layout", "ir", "target", "passes", "codegen", "runtime", "nvrtc", "amdgpu", "tilelang",
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let crates = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut files = vec![];
    for name in COMPILER_CRATES {
        for sub in ["src", "include"] {
            let dir = crates.join(name).join(sub);
            if dir.is_dir() {
                println!("cargo:rerun-if-changed={}", dir.display());
                collect(&dir, &mut files);
            }
        }
    }
    files.sort();
    let id = if files.is_empty() {
        format!(
            "pkg-{}",
            std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
        )
    } else {
        // FNV-1a over every file's path (relative) and bytes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for f in &files {
            let rel = f.strip_prefix(&crates).unwrap_or(f);
            eat(rel.to_string_lossy().as_bytes());
            eat(&[0]);
            eat(&std::fs::read(f).unwrap_or_default());
            eat(&[0]);
        }
        format!("{h:016x}")
    };
    println!("cargo:rustc-env=TILELANG_BUILD_ID={id}");
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("rs" | "h" | "c" | "cu")
        ) {
            out.push(p);
        }
    }
}
