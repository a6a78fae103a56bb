//! AMD's direct-to-LDS buffer loads: waits count outstanding loads (`s_waitcnt vmcnt`), not
//! groups, so every thread issues the same loads every iteration. Past the loop's end the
//! copies are guarded instead of skipped: they land zeros in the stage being refilled, which
//! nothing reads again.
//!
//! The refill goes out *before* the wait for this iteration's tiles, so the wait leaves it in
//! flight (`vmcnt` of the loads ahead, never 0 in the loop, even with two stages — which is all
//! a 256×256×64 tile's 128 KiB leaves room for): barrier (everyone is done with the stage
//! about to be refilled), refill, wait for this iteration's loads, barrier (they are visible),
//! compute.

use tl_ir::{Expr, Span, Stmt, StmtKind, TileOp};

use super::{Issue, Steady};

pub struct BufferLds;

impl Issue for BufferLds {
    fn issue(&self, copies: Stmt, valid: Expr, _span: Span) -> Stmt {
        copies.map_post(&mut |x| match x.kind {
            StmtKind::Op(TileOp::Copy(mut c)) => {
                c.guard = Some(match c.guard.take() {
                    Some(g) => g.and(valid.clone()),
                    None => valid.clone(),
                });
                Stmt::new(StmtKind::Op(TileOp::Copy(c)), x.span)
            }
            kind => Stmt::new(kind, x.span),
        })
    }

    /// LLVM tracks a direct-to-LDS load per LDS object: with all stages in one array, a read
    /// of the current stage waits for the load refilling the other (`vmcnt(0)` before the
    /// first `ds_read`); with an array per stage, addressed statically, it does not.
    fn split_stages(&self) -> bool {
        true
    }

    fn steady(&self, it: Steady) -> Vec<Stmt> {
        vec![
            it.barrier.clone(),
            it.fetch,
            it.commit,
            (it.wait)(it.ahead_by),
            it.fence,
            it.barrier,
            it.consume,
        ]
    }
}
