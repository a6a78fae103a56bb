//! The `insert_barriers` stage: a block barrier wherever one thread's shared-memory accesses
//! may meet another's — before a tile op, parallel loop nest or block-level store whose shared
//! reads or writes conflict with those since the last barrier, and at the end of a loop body
//! whose accesses conflict with the start of the next iteration.
//!
//! Tile ops are units here (a gemm reads its operands, a copy writes its destination); barriers
//! a lowering needs inside one op (staging through scratch, cross-warp reductions) are that
//! lowering's own. Asynchronous copies belong to their pipeline, whose waits and barriers order
//! them; an explicit barrier in the program counts as one.

use std::collections::HashSet;

use tl_ir::{Diagnostics, ExprKind, ForKind, Intrinsic, Kernel, Scope, Stmt, StmtKind, TileOp};
use tl_target::Target;

use crate::tile_util::{is_call, sync};

/// Shared buffers accessed since the last barrier, and before the first one of the region
/// being walked (for loop-carried hazards).
#[derive(Clone, Default, Debug)]
pub struct Hazards {
    pub reads: HashSet<u64>,
    pub writes: HashSet<u64>,
    pub seen_barrier: bool,
    pub first_reads: HashSet<u64>,
    pub first_writes: HashSet<u64>,
}

impl Hazards {
    fn conflicts(&self, r: &HashSet<u64>, w: &HashSet<u64>) -> bool {
        r.iter().any(|b| self.writes.contains(b))
            || w.iter()
                .any(|b| self.writes.contains(b) || self.reads.contains(b))
    }
    fn record(&mut self, r: &HashSet<u64>, w: &HashSet<u64>) {
        self.reads.extend(r);
        self.writes.extend(w);
        if !self.seen_barrier {
            self.first_reads.extend(r);
            self.first_writes.extend(w);
        }
    }
    fn barrier(&mut self) {
        self.reads.clear();
        self.writes.clear();
        self.seen_barrier = true;
    }
    fn merge(&mut self, o: &Hazards) {
        self.reads.extend(&o.reads);
        self.writes.extend(&o.writes);
        self.first_reads.extend(&o.first_reads);
        self.first_writes.extend(&o.first_writes);
        self.seen_barrier |= o.seen_barrier;
    }
}

/// The shared buffers a tile-level statement reads and writes.
pub fn shared_access(s: &Stmt) -> (HashSet<u64>, HashSet<u64>) {
    let mut r = HashSet::new();
    let mut w = HashSet::new();
    s.walk(&mut |st| {
        match &st.kind {
            StmtKind::Store { buffer, .. } if buffer.scope() == Scope::Shared => {
                w.insert(buffer.id());
            }
            StmtKind::Op(op) => {
                let (reads, writes) = op.regions();
                for x in reads {
                    if x.buffer.scope() == Scope::Shared {
                        r.insert(x.buffer.id());
                    }
                }
                for x in writes {
                    if x.buffer.scope() == Scope::Shared {
                        w.insert(x.buffer.id());
                    }
                }
            }
            _ => {}
        }
        for e in st.exprs() {
            e.visit(&mut |x| {
                if let ExprKind::Load(b, _) = x.kind() {
                    if b.scope() == Scope::Shared {
                        r.insert(b.id());
                    }
                }
                // An intrinsic writing shared memory through an address (a shifted copy's
                // destination, a shared atomic).
                if let Some(b) = tl_ir::stmt::written_through_address(x) {
                    if b.scope() == Scope::Shared {
                        w.insert(b.id());
                    }
                }
            });
        }
    });
    (r, w)
}

/// The `insert_barriers` stage.
pub fn run(k: Kernel, _target: &Target) -> Result<Kernel, Diagnostics> {
    let mut hz = Hazards::default();
    let body = insert(&k.body, &mut hz);
    Ok(k.with_body(body))
}

/// A statement the walk treats as one access: a barrier before it if it conflicts.
fn unit(s: &Stmt, hz: &mut Hazards) -> Stmt {
    let (r, w) = shared_access(s);
    let mut out = vec![];
    if hz.conflicts(&r, &w) {
        out.push(sync(s.span));
        hz.barrier();
    }
    out.push(s.clone());
    hz.record(&r, &w);
    Stmt::seq(out, s.span)
}

fn insert(s: &Stmt, hz: &mut Hazards) -> Stmt {
    let span = s.span;
    match &s.kind {
        StmtKind::Seq(v) => Stmt::seq(v.iter().map(|x| insert(x, hz)).collect(), span),
        StmtKind::If { cond, then_, else_ } => {
            let mut h1 = hz.clone();
            let t = insert(then_, &mut h1);
            let e = else_.as_ref().map(|e| {
                let mut h2 = hz.clone();
                let x = insert(e, &mut h2);
                h1.merge(&h2);
                Box::new(x)
            });
            hz.merge(&h1);
            Stmt::new(
                StmtKind::If {
                    cond: cond.clone(),
                    then_: Box::new(t),
                    else_: e,
                },
                span,
            )
        }
        StmtKind::For(l) if l.kind == ForKind::Parallel => unit(s, hz),
        StmtKind::For(l) => {
            let entry = hz.clone();
            let mut inner = Hazards {
                reads: hz.reads.clone(),
                writes: hz.writes.clone(),
                ..Default::default()
            };
            let mut body = insert(&l.body, &mut inner);
            // A hazard from the end of one iteration to the start of the next.
            if inner.conflicts(&inner.first_reads.clone(), &inner.first_writes.clone()) {
                body = Stmt::seq(vec![body, sync(span)], span);
                inner.barrier();
            }
            *hz = entry;
            hz.merge(&Hazards {
                reads: inner.reads,
                writes: inner.writes,
                ..Default::default()
            });
            if inner.seen_barrier {
                hz.seen_barrier = true;
            }
            let mut l2 = (**l).clone();
            l2.body = body;
            Stmt::new(StmtKind::For(Box::new(l2)), span)
        }
        StmtKind::Store { .. } => unit(s, hz),
        StmtKind::Op(TileOp::Copy(c)) if c.asynchronous => s.clone(),
        StmtKind::Op(_) => unit(s, hz),
        StmtKind::Eval(_) if is_call(s, |op| *op == Intrinsic::SyncThreads) => {
            hz.barrier();
            s.clone()
        }
        _ => s.clone(),
    }
}
