//! The `insert_waits` stage on AMD (thread-level IR): the pipeline's group waits become
//! `s_waitcnt vmcnt` counts, and block barriers become LDS barriers.
//!
//! The pipeline speaks in commit groups (`CpAsyncCommit`, `CpAsyncWait{n}`: all but the newest
//! `n` groups have landed). The hardware counts outstanding vector-memory operations instead,
//! retiring them in order. `vmcnt(c)` retires all but the newest `c`, so it gives the group
//! wait when the newest `n` groups hold at least `c` loads: with every group issuing at least
//! `G` buffer loads per thread, `c = n·G`. `G` is the fewest loads any group is guaranteed
//! to issue (loads under a condition count for nothing, those in unrolled loops once per
//! trip); other memory operations issued in between only make the wait stronger. `vmcnt`
//! holds 6 bits: counts above 63 are capped, which again only waits longer.
//!
//! `__syncthreads` would also wait for every outstanding load (`vmcnt(0)`), which would drain
//! the pipeline at each barrier: the lowering's barriers order LDS accesses (that is all the
//! barrier stage tracks), so they become `BarrierLds` (`s_waitcnt lgkmcnt(0); s_barrier`).
//! The simulator checks that no barrier was relied on for global memory.

use tl_ir::{Diagnostics, ExprKind, ForKind, Intrinsic, Kernel, Stmt, StmtKind};
use tl_target::Target;

use crate::tile_util::{eval, is_call};

/// The largest count `s_waitcnt vmcnt` encodes on gfx9.
pub const VMCNT_MAX: u32 = 63;

/// The `insert_waits` stage (AMD targets; others pass through).
pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    if !target.is_hip() {
        return Ok(k);
    }
    let mut groups = vec![];
    collect_groups(&k.body, &mut groups);
    let per_group = groups.iter().copied().min().unwrap_or(0);
    let body = k.body.map_post(&mut |s| {
        let span = s.span;
        if is_call(&s, |op| *op == Intrinsic::CpAsyncCommit) {
            return Stmt::empty();
        }
        if let StmtKind::Eval(e) = &s.kind {
            if let ExprKind::Call(op, _) = e.kind() {
                match op {
                    Intrinsic::CpAsyncWait { n } => {
                        let c = (u64::from(*n) * per_group).min(u64::from(VMCNT_MAX)) as u32;
                        return eval(Intrinsic::WaitVmcnt { n: c }, vec![], span);
                    }
                    Intrinsic::SyncThreads => return eval(Intrinsic::BarrierLds, vec![], span),
                    _ => {}
                }
            }
        }
        s
    });
    Ok(k.with_body(body))
}

/// The guaranteed buffer loads of every commit group: in each sequence, those issued since the
/// previous commit of that sequence (or its start).
fn collect_groups(s: &Stmt, out: &mut Vec<u64>) {
    match &s.kind {
        StmtKind::Seq(v) => {
            let mut cur = 0u64;
            for x in v {
                if is_call(x, |op| *op == Intrinsic::CpAsyncCommit) {
                    out.push(cur);
                    cur = 0;
                } else {
                    cur += guaranteed_loads(x);
                    collect_groups(x, out);
                }
            }
        }
        StmtKind::If { then_, else_, .. } => {
            collect_groups(then_, out);
            if let Some(e) = else_ {
                collect_groups(e, out);
            }
        }
        StmtKind::For(l) => collect_groups(&l.body, out),
        _ => {}
    }
}

/// Buffer loads a statement issues on every path, outside any commit it contains.
fn guaranteed_loads(s: &Stmt) -> u64 {
    match &s.kind {
        StmtKind::Eval(_) if is_call(s, |op| matches!(op, Intrinsic::BufferLoadLds { .. })) => 1,
        StmtKind::Seq(v) => {
            if v.iter()
                .any(|x| is_call(x, |op| *op == Intrinsic::CpAsyncCommit))
            {
                // Its loads belong to its own groups.
                return 0;
            }
            v.iter().map(guaranteed_loads).sum()
        }
        StmtKind::If {
            then_,
            else_: Some(e),
            ..
        } => guaranteed_loads(then_).min(guaranteed_loads(e)),
        StmtKind::For(l) => match (l.kind == ForKind::Parallel, l.extent.as_int()) {
            (false, Some(n)) if n > 0 => n as u64 * guaranteed_loads(&l.body),
            _ => 0,
        },
        _ => 0,
    }
}
