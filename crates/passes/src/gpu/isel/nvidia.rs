//! NVIDIA: `mma.sync.m16n8k16` where the tile and types allow it (sm_80+), else FMAs;
//! `wgmma` (sm_90a) where the kernel asks for it.

use tl_ir::{DiagKind, Diagnostic, GemmInstruction, GemmOp, Span};
use tl_target::Target;

use super::Selector;
use crate::gpu::{mma, wgmma};

pub struct Nvidia {
    target: Target,
    threads: i64,
}

impl Nvidia {
    pub fn new(target: Target, threads: i64) -> Nvidia {
        Nvidia { target, threads }
    }

    fn mma_ok(&self, g: &GemmOp) -> bool {
        mma::applicable(g, &self.target) && self.threads >= 32
    }
}

impl Selector for Nvidia {
    fn gemm(&self, g: &GemmOp, span: Span) -> Result<GemmInstruction, Diagnostic> {
        match g.instruction {
            None if self.mma_ok(g) => Ok(GemmInstruction::MmaSync),
            None | Some(GemmInstruction::Simt) => Ok(GemmInstruction::Simt),
            Some(GemmInstruction::MmaSync) if self.mma_ok(g) => Ok(GemmInstruction::MmaSync),
            Some(GemmInstruction::MmaSync) => Err(Diagnostic::new(
                DiagKind::Unsupported,
                span,
                format!(
                    "mma.sync cannot run this gemm on {}: it takes f16 or bf16 operands (B in shared memory, A in shared memory or registers), an f32 accumulator, M a multiple of 16, N of 8 and K of 16, and at least 32 threads",
                    self.target
                ),
            )
            .help("drop the instruction override to let the compiler choose")),
            Some(GemmInstruction::Wgmma) => {
                wgmma::check(g, &self.target, self.threads, span)?;
                Ok(GemmInstruction::Wgmma)
            }
            Some(other @ GemmInstruction::Mfma(_)) => Err(Diagnostic::new(
                DiagKind::Unsupported,
                span,
                format!("{} is an AMD instruction; the target is {}", other.name(), self.target),
            )
            .help("drop the instruction override, or compile for gfx942 or gfx950")),
        }
    }
}
