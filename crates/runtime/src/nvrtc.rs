//! NVRTC through the `tl_nvrtc` crate: the options every kernel the runtime builds is compiled
//! with, and the strings that identify the toolchain in cache keys.

pub use tl_nvrtc::{Compiled, NvrtcError};

/// The compile options of every kernel: `tl_nvrtc`'s defaults (C++17, ptxas's resource report,
/// which the runtime keeps for [`crate::ResourceUsage`]) plus `-lineinfo`, which leaves the
/// SASS unchanged and lets profilers map it back to source lines.
pub fn options() -> tl_nvrtc::CompileOptions {
    tl_nvrtc::CompileOptions {
        line_info: true,
        ..Default::default()
    }
}

/// `nvrtc 13.0` — the version of the NVRTC that would compile.
pub fn version() -> Result<String, NvrtcError> {
    let (major, minor) = tl_nvrtc::version()?;
    Ok(format!("nvrtc {major}.{minor}"))
}

/// Everything about the toolchain that changes the cubin for `arch`: NVRTC's version and the
/// full command line. A cache key for generated source must include it.
pub fn toolchain_id(arch: &str) -> Result<String, NvrtcError> {
    Ok(format!(
        "{} {}",
        version()?,
        options().flags(arch).join(" ")
    ))
}

/// `nvjitlink 13.0 -arch=sm_90a -Xptxas=-v …` — what assembles PTX sources for `arch`, with
/// its options; a cache key for generated PTX must include it (with [`toolchain_id`]).
pub fn jitlink_id(arch: &str) -> Result<String, NvrtcError> {
    let link = tl_nvrtc::JitLink::global()?;
    let (major, minor) = link.version();
    Ok(format!(
        "nvjitlink {major}.{minor} {}",
        link.flags(arch).join(" ")
    ))
}

/// Compile `source` for `arch` with [`options`].
pub fn compile(source: &str, arch: &str) -> Result<Compiled, NvrtcError> {
    tl_nvrtc::compile(source, arch, &options())
}

/// Whether NVRTC can be loaded here.
pub fn available() -> bool {
    tl_nvrtc::Nvrtc::global().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolchain_id_names_version_and_flags() {
        match toolchain_id("sm_90a") {
            Ok(id) => {
                assert!(id.starts_with("nvrtc "), "{id}");
                assert!(id.contains("--gpu-architecture=sm_90a") && id.contains("-lineinfo"));
                assert_ne!(id, toolchain_id("sm_80").unwrap());
            }
            Err(e) => {
                tl_nvrtc::testing::skip_or_fail("toolchain_id_names_version_and_flags", &e);
                assert!(!available());
            }
        }
    }
}
