//! SASS listings from a cubin with `cuobjdump -sass` (from the nvidia-cuda-cuobjdump wheel), so
//! tests can check that a kernel really uses tensor cores (HMMA/HGMMA), async copies (LDGSTS)
//! or ldmatrix (LDSM) rather than trusting the source.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::NvrtcError;
use crate::library::find_tool;

/// The cuobjdump the checks use: `$TILELANG_CUOBJDUMP`, the installer's tools dirs, a CUDA
/// install, then `PATH`.
pub fn cuobjdump() -> Result<PathBuf, NvrtcError> {
    find_tool("cuobjdump", "TILELANG_CUOBJDUMP")
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The SASS of a cubin, as `cuobjdump -sass` prints it.
pub fn sass(cubin: &[u8]) -> Result<String, NvrtcError> {
    let tool = cuobjdump()?;
    let file = std::env::temp_dir().join(format!(
        "tilelang-{}-{}.cubin",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let io = |e: std::io::Error| NvrtcError::Tool {
        tool: "cuobjdump",
        message: format!("{}: {e}", file.display()),
    };
    std::fs::write(&file, cubin).map_err(io)?;
    let mut cmd = Command::new(&tool);
    cmd.arg("-sass").arg(&file);
    // cuobjdump disassembles by running nvdisasm, looked up on PATH or NVDISASM_PATH; the
    // wheels put it next to cuobjdump, which is on neither.
    if std::env::var_os("NVDISASM_PATH").is_none() {
        if let Some(dir) = tool.parent().filter(|d| d.join("nvdisasm").is_file()) {
            cmd.env("NVDISASM_PATH", dir);
        }
    }
    let out = cmd.output();
    let _ = std::fs::remove_file(&file);
    let out = out.map_err(|e| NvrtcError::Tool {
        tool: "cuobjdump",
        message: format!("cannot run {}: {e}", tool.display()),
    })?;
    if !out.status.success() {
        return Err(NvrtcError::Tool {
            tool: "cuobjdump",
            message: format!(
                "{} exited with {}: {}",
                tool.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Count each full opcode (`HMMA.16816.F32.BF16`, `LDGSTS.E.BYPASS.128`) of a listing.
/// Instruction lines look like `/*0040*/  @!P0 LDG.E R4, desc[UR4][R6.64] ;`.
pub fn sass_opcodes(sass: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for line in sass.lines() {
        let l = line.trim_start();
        let Some(rest) = l.strip_prefix("/*") else {
            continue;
        };
        let Some(end) = rest.find("*/") else {
            continue;
        };
        // The address comment is hex digits; encoding-only lines have nothing after it.
        if !rest[..end].chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let mut toks = rest[end + 2..].split_whitespace();
        let mut op = toks.next();
        if op.is_some_and(|t| t.starts_with('@')) {
            op = toks.next();
        }
        if let Some(op) = op {
            let op = op.trim_end_matches(';');
            if !op.is_empty() && !op.starts_with("/*") {
                *m.entry(op.to_string()).or_insert(0) += 1;
            }
        }
    }
    m
}

/// Does the listing contain an instruction whose opcode is `prefix` or starts with
/// `prefix.` (so `HMMA` matches `HMMA.16816.F32.BF16`, `LDSM` does not match `LDSMX`)?
pub fn has_instruction(sass: &str, prefix: &str) -> bool {
    sass_opcodes(sass)
        .keys()
        .any(|k| k == prefix || k.starts_with(&format!("{prefix}.")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "
\tcode for sm_90a
\t\tFunction : k
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
                                                                           /* 0x000fe20000000800 */
        /*0010*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;   /* 0x0000000c0804723c */
        /*0020*/              @!P0 LDGSTS.E.BYPASS.128 [R2], desc[UR4][R6.64] ;
        /*0030*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0040*/                   EXIT ;
";

    #[test]
    fn counts_opcodes() {
        let m = sass_opcodes(LISTING);
        assert_eq!(m.get("HMMA.16816.F32.BF16"), Some(&2));
        assert_eq!(m.get("LDGSTS.E.BYPASS.128"), Some(&1));
        assert_eq!(m.get("EXIT"), Some(&1));
        assert_eq!(m.len(), 4);
        assert!(has_instruction(LISTING, "HMMA"));
        assert!(has_instruction(LISTING, "LDGSTS"));
        assert!(!has_instruction(LISTING, "HGMMA"));
        assert!(!has_instruction(LISTING, "LDG"));
    }
}
