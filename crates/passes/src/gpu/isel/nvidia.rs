//! NVIDIA: `wgmma` on sm_90a where the tile, types and threads allow it, else
//! `mma.sync.m16n8k16` where they allow that (sm_80+), else FMAs. A kernel with several
//! wgmma gemms (attention) issues their k16 steps in pairs (`KernelAttrs::wgmma_batch`),
//! unless it chose a batch itself.

use tl_ir::{DiagKind, Diagnostic, GemmInstruction, GemmOp, Kernel, Span, StmtKind, TileOp};
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
            None if wgmma::unsupported_because(g, &self.target, self.threads).is_none() => {
                Ok(GemmInstruction::Wgmma)
            }
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

    /// Pairs of k16 steps per `asm` statement in kernels with several wgmma gemms: a quarter
    /// less NVRTC time for attention at the same speed on an H100 (run 6f), where a GEMM's
    /// mainloop lost 2-12% with pairs.
    fn finish(&self, k: &mut Kernel) {
        if k.attrs.wgmma_batch.is_some() {
            return;
        }
        let mut wgmmas = 0;
        k.body.walk(&mut |s| {
            if let StmtKind::Op(TileOp::Gemm(g)) = &s.kind {
                wgmmas += usize::from(g.instruction == Some(GemmInstruction::Wgmma));
            }
        });
        if wgmmas >= 2 {
            k.attrs.wgmma_batch = Some(2);
        }
    }
}
