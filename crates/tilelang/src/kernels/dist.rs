//! Multi-rank kernels built from the distributed tile primitives (`k.symmetric`, `put_block`,
//! signals and waits), each checked against a single-device reference.

use crate::dsl::SignalOp;
use crate::ir::CmpOp;
use crate::prelude::*;

/// All-gather: every rank's `X` (`[N]`) lands in row `rank` of every rank's symmetric `OUT`
/// (`[R, N]`, `R` the number of ranks). Block `p` pushes this rank's shard to rank `p`, then one
/// thread signals rank `p` by setting its `FLAGS[rank]` to `epoch`, and waits until rank `p`'s
/// shard has arrived here (`FLAGS[p] ≥ epoch`): when the kernel ends, this rank's `OUT` is
/// complete. `epoch` grows by one per call, so the flags never need a reset.
///
/// Arguments: `X`, `OUT`, `FLAGS` (`[R]` i32, symmetric, zero before the first call), `epoch`,
/// then the scalars every distributed kernel ends with: `rank`, `num_ranks`, `heap_stride`.
pub fn all_gather(dtype: DType, threads: u32) -> Kernel {
    Kernel::build("all_gather", |k| {
        let (r, n) = (k.dim("R"), k.dim("N"));
        let x = k.input("X", [&n], dtype);
        let out = k.symmetric("OUT", [&r, &n], dtype);
        let flags = k.symmetric("FLAGS", [&r], I32);
        let d = k.distributed();
        let epoch = k.scalar("epoch", I32);
        k.launch([d.num_ranks.clone()], threads, |t, [p]| {
            t.put_block(
                x.at([0]),
                out.at([d.rank.clone(), Expr::int(0)]),
                &n,
                p.clone(),
            );
            t.sync_threads();
            let tid = t.thread_idx();
            t.if_(tid.eq_(0), |t| {
                t.signal(
                    flags.at([d.rank.clone()]),
                    p.clone(),
                    epoch.clone(),
                    SignalOp::Set,
                );
                t.wait(flags.at([p.clone()]), CmpOp::Ge, epoch.clone());
            });
            t.sync_threads();
        });
    })
}
