//! Replacing buffers everywhere they appear (allocation, loads, stores, regions), for passes
//! that re-home a buffer: a fragment becoming per-thread registers, a shared tile gaining
//! pipeline stages.

use std::collections::HashMap;

use tl_ir::{Buffer, Expr, ExprKind, Stmt, StmtKind};

pub type BufferMap = HashMap<u64, Buffer>;

pub fn remap_expr(e: &Expr, map: &BufferMap) -> Expr {
    let e2 = e.map_children(&mut |c| remap_expr(c, map));
    if let ExprKind::Load(b, idx) = e2.kind() {
        if let Some(nb) = map.get(&b.id()) {
            return Expr::load(nb, idx.clone());
        }
    }
    e2
}

pub fn remap_stmt(s: &Stmt, map: &BufferMap) -> Stmt {
    if map.is_empty() {
        return s.clone();
    }
    let s = s.map_exprs(&mut |e| remap_expr(e, map));
    s.map_post(&mut |st| {
        let kind = match st.kind {
            StmtKind::Alloc(b) => StmtKind::Alloc(map.get(&b.id()).cloned().unwrap_or(b)),
            StmtKind::Store {
                buffer,
                indices,
                value,
            } => StmtKind::Store {
                buffer: map.get(&buffer.id()).cloned().unwrap_or(buffer),
                indices,
                value,
            },
            StmtKind::AnnotateLayout { buffer, layout } => StmtKind::AnnotateLayout {
                buffer: map.get(&buffer.id()).cloned().unwrap_or(buffer),
                layout,
            },
            StmtKind::Op(mut op) => {
                for r in op.regions_mut() {
                    if let Some(nb) = map.get(&r.buffer.id()) {
                        r.buffer = nb.clone();
                    }
                }
                StmtKind::Op(op)
            }
            k => k,
        };
        Stmt::new(kind, st.span)
    })
}
