//! Programmatic dependent launch (sm_90): a kernel that waits for the grid before it
//! (`griddepcontrol.wait`) may be launched while that grid still runs, so its launch, block
//! start and prologue (barrier setup, tensor-map prefetch) overlap the earlier kernel's last
//! blocks; the runtime launches such kernels with programmatic stream serialization. The
//! gain is the gap between two kernels of a stream: about 1.3–1.5 µs on an H200 (gpu-notes
//! run 34b), which is 4–6% of a 25 µs split-K GEMM and its sum kernel.
//!
//! This stage puts `griddepcontrol.launch_dependents` first in the kernel (every block lets
//! the next kernel start as early as it can: that kernel's blocks only take what this grid
//! leaves free, and wait for this grid to finish before touching memory) and
//! `griddepcontrol.wait` before the first top-level statement that may touch global memory,
//! executed by every thread. What comes before the wait touches only registers and shared
//! memory; anything unknown (a raw function call, an intrinsic not listed below) counts as
//! touching global memory. The simulator reports a global access before a thread's wait.

use tl_ir::{Diagnostics, Expr, ExprKind, Intrinsic, Kernel, Scope, Stmt, StmtKind};
use tl_target::Target;

pub fn run(mut k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    if !target.has_grid_dependency_control() {
        return Ok(k);
    }
    let span = k.body.span;
    let eval = |op| crate::tile_util::eval(op, vec![], span);
    let mut body = match std::mem::replace(&mut k.body.kind, StmtKind::Seq(vec![])) {
        StmtKind::Seq(v) => v,
        other => vec![Stmt::new(other, span)],
    };
    let first_global = body.iter().position(touches_global).unwrap_or(body.len());
    body.insert(first_global, eval(Intrinsic::GridDependencyWait));
    body.insert(0, eval(Intrinsic::LaunchDependents));
    k.body.kind = StmtKind::Seq(body);
    Ok(k)
}

/// Whether `s` may read or write global memory (conservatively).
fn touches_global(s: &Stmt) -> bool {
    let mut found = false;
    s.walk(&mut |st| {
        if let StmtKind::Store { buffer, .. } = &st.kind {
            found |= buffer.scope() == Scope::Global;
        }
        if matches!(st.kind, StmtKind::Op(_)) {
            found = true;
        }
        for e in st.exprs() {
            e.visit(&mut |x| found |= expr_touches_global(x));
        }
    });
    found
}

fn expr_touches_global(e: &Expr) -> bool {
    match e.kind() {
        ExprKind::Load(b, _) => b.scope() == Scope::Global,
        ExprKind::Call(op, _) => !local_only(op),
        _ => false,
    }
}

/// Intrinsics that touch only registers, shared memory and barriers (their `AddressOf`
/// arguments are checked as loads of their own).
fn local_only(op: &Intrinsic) -> bool {
    matches!(
        op,
        Intrinsic::ThreadIdx
            | Intrinsic::WaveIdx
            | Intrinsic::AddressOf
            | Intrinsic::SyncThreads
            | Intrinsic::SyncWarp
            | Intrinsic::NamedBarrier { .. }
            | Intrinsic::NamedBarrierArrive { .. }
            | Intrinsic::SetMaxNReg { .. }
            | Intrinsic::ShflXor { .. }
            | Intrinsic::ShflDown { .. }
            | Intrinsic::ShflIdx { .. }
            | Intrinsic::FenceProxyAsync
            | Intrinsic::MbarrierInit { .. }
            | Intrinsic::FenceMbarrierInit
            | Intrinsic::MbarrierArrive
            | Intrinsic::MbarrierWait
            | Intrinsic::ClusterCtaRank
            | Intrinsic::ClusterSync
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tl_ir::{Buffer, DType, Span};

    fn eval(op: Intrinsic) -> Stmt {
        crate::tile_util::eval(op, vec![], Span::UNKNOWN)
    }

    fn store(b: &Buffer) -> Stmt {
        Stmt::new(
            StmtKind::Store {
                buffer: b.clone(),
                indices: vec![Expr::int(0)],
                value: Expr::float(1.0),
            },
            Span::UNKNOWN,
        )
    }

    fn buf(name: &str, scope: Scope) -> Buffer {
        Buffer::new(name, vec![Expr::int(4)], DType::F32, scope, Span::UNKNOWN)
    }

    /// A lowered kernel's shape: shared setup, a barrier, then a global store.
    fn kernel() -> Kernel {
        let s = buf("S", Scope::Shared);
        let g = buf("G", Scope::Global);
        Kernel {
            name: "k".into(),
            dims: vec![],
            params: vec![],
            grid: vec![Expr::int(1)],
            block_vars: vec![],
            threads: 32,
            attrs: Default::default(),
            body: Stmt::new(
                StmtKind::Seq(vec![
                    Stmt::new(StmtKind::Alloc(s.clone()), Span::UNKNOWN),
                    store(&s),
                    eval(Intrinsic::SyncThreads),
                    store(&g),
                    eval(Intrinsic::SyncThreads),
                    store(&g),
                ]),
                Span::UNKNOWN,
            ),
        }
    }

    fn ops(k: &Kernel) -> Vec<String> {
        match &k.body.kind {
            StmtKind::Seq(v) => v.iter().map(|s| s.to_string()).collect(),
            _ => vec![k.body.to_string()],
        }
    }

    #[test]
    fn the_wait_comes_before_the_first_global_access() {
        let k = run(kernel(), &Target::SM90).expect("runs");
        let top = ops(&k);
        assert_eq!(top.len(), 8, "{top:#?}");
        assert!(top[0].contains("launch_dependents"), "{top:#?}");
        // Alloc, shared store, barrier; then the wait, right before the first global store.
        assert!(top[4].contains("grid_dependency_wait"), "{top:#?}");
        assert!(top[5].contains('G'), "{top:#?}");
        let waits = top.iter().filter(|s| s.contains("grid_dependency_wait"));
        assert_eq!(waits.count(), 1);
    }

    #[test]
    fn only_targets_with_grid_dependency_control_wait() {
        for t in [Target::SM80, Target::GFX942, Target::Cpu] {
            let k = run(kernel(), &t).expect("runs");
            assert_eq!(ops(&k), ops(&kernel()), "{t}");
        }
    }

    #[test]
    fn unknown_calls_count_as_global_access() {
        let raw = eval(Intrinsic::Extern {
            name: "my_fn".into(),
            pure: false,
        });
        assert!(touches_global(&raw));
        assert!(!touches_global(&eval(Intrinsic::SyncThreads)));
        assert!(!touches_global(&store(&buf("S", Scope::Shared))));
        assert!(touches_global(&store(&buf("G", Scope::Global))));
        // A load of global memory inside a shared store.
        let g = buf("G", Scope::Global);
        let s = buf("S", Scope::Shared);
        let copy = Stmt::new(
            StmtKind::Store {
                buffer: s,
                indices: vec![Expr::int(0)],
                value: Expr::load(&g, vec![Expr::int(1)]),
            },
            Span::UNKNOWN,
        );
        assert!(touches_global(&copy));
    }
}
