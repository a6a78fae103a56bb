//! AMD CDNA3/CDNA4 (gfx942, gfx950): MFMA where the types, tile and waves allow it (16x16
//! atoms, the deepest K the arch has and the tile divides: 16x16x32 on gfx950, 16x16x16 on
//! gfx942), else FMAs. A kernel may ask for a shape (32x32 atoms, say); NVIDIA instructions are
//! a diagnostic.

use tl_ir::{DiagKind, Diagnostic, GemmInstruction, GemmOp, Kernel, Span, StmtKind, TileOp};
use tl_target::Target;

use super::Selector;
use crate::gpu::mfma;

pub struct Amd {
    target: Target,
    threads: i64,
}

impl Amd {
    pub fn new(target: Target, threads: i64) -> Amd {
        Amd { target, threads }
    }
}

impl Selector for Amd {
    fn gemm(&self, g: &GemmOp, span: Span) -> Result<GemmInstruction, Diagnostic> {
        let unsupported = |why: String, help: &str| {
            Diagnostic::new(DiagKind::Unsupported, span, why).help(help.to_string())
        };
        match g.instruction {
            None => Ok(
                match mfma::choose(g, &self.target, self.threads, None) {
                    Ok(s) => GemmInstruction::Mfma(s),
                    Err(_) => GemmInstruction::Simt,
                },
            ),
            Some(GemmInstruction::Simt) => Ok(GemmInstruction::Simt),
            Some(GemmInstruction::Mfma(s)) => mfma::choose(g, &self.target, self.threads, Some(s))
                .map(GemmInstruction::Mfma)
                .map_err(|why| {
                    unsupported(
                        why,
                        "drop the instruction override to let the compiler pick an MFMA shape",
                    )
                }),
            Some(other) => Err(unsupported(
                format!(
                    "{} is an NVIDIA instruction; the target is {} (AMD)",
                    other.name(),
                    self.target
                ),
                "drop the instruction override (the compiler picks MFMA on AMD), or compile for an NVIDIA target",
            )),
        }
    }

    /// GEMM-like kernels (a 2-d grid of blocks running MFMA gemms) remap their blocks so that
    /// neighbours share an XCD's L2.
    fn finish(&self, k: &mut Kernel) {
        let Some(arch) = self.target.amd() else {
            return;
        };
        let mut mfma = false;
        k.body.walk(&mut |s| {
            if let StmtKind::Op(TileOp::Gemm(g)) = &s.kind {
                mfma |= matches!(g.instruction, Some(GemmInstruction::Mfma(_)));
            }
        });
        if mfma && k.grid.len() == 2 && k.attrs.xcd_remap.is_none() {
            k.attrs.xcd_remap = Some(arch.xcds);
        }
    }
}
