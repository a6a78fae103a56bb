//! A persistent kernel: launch a fixed number of blocks (`attrs.persistent_blocks`, about one
//! per multiprocessor) and let each loop over the logical grid's blocks, `tile = p, p + P, …`.
//! The logical block indices are recomputed from the tile number each round — with the panel
//! rasterization of `use_swizzle` when the kernel asks for it — and each round ends with
//! `cp.async.wait_group 0` and a barrier, since the next round's copies refill shared memory
//! that this round may still be reading (codegen's shared-memory plan relies on it).

use tl_ir::ops::{ceildiv, min};
use tl_ir::{
    BinOp, DType, Diagnostic, Diagnostics, Expr, For, ForKind, Intrinsic, Kernel, Stmt, StmtKind,
    Var,
};
use tl_target::Target;

/// The grid a persistent kernel launches with, from its tile IR alone (its persistent block
/// count resolved): what [`run`] makes of the logical grid, for a launch that skips lowering
/// (`tilelang::link`). `None` where the kernel is not persistent, or where lowering decides
/// more than the tile IR says (clusters: whether they stay depends on the pipeline's warp
/// specialization).
pub fn launch_grid(k: &Kernel) -> Option<Vec<Expr>> {
    let blocks = k.attrs.persistent_blocks.filter(|&b| b > 0)?;
    if k.attrs.cluster.is_some_and(|c| c.size > 1) || crate::cluster::synchronizes_cluster(&k.body)
    {
        return None;
    }
    let dt = DType::I32;
    let g: Vec<Expr> = k.grid.iter().map(|e| e.cast(dt)).collect();
    Some(vec![rounds_grid(
        tiles(&g)?,
        Expr::int_of(blocks as i64, dt),
        Expr::int_of(1, dt),
    )])
}

/// The tiles of a grid: the product of its dims (`None` for no dims).
fn tiles(grid: &[Expr]) -> Option<Expr> {
    let (first, rest) = grid.split_first()?;
    Some(rest.iter().fold(first.clone(), |acc, e| acc * e.clone()))
}

/// The launched blocks: one per cluster unit (`p` of them, each of `size` blocks), no more
/// units than the logical grid has tiles.
fn rounds_grid(total: Expr, p: Expr, size: Expr) -> Expr {
    min(total, p) * size
}

pub fn run(k: Kernel, _target: &Target) -> Result<Kernel, Diagnostics> {
    // Clusters serve the specialized pipeline's multicast (`lower::cluster_varying`), which
    // only a persistent, warp-specialized kernel has, and kernels whose blocks synchronize
    // across the cluster themselves (`cluster_sync`): elsewhere they are dropped.
    let mut k = k;
    // Such a kernel is not persistent (`cluster::check` refuses that): it keeps its clusters.
    if crate::cluster::synchronizes_cluster(&k.body) {
        return Ok(k);
    }
    let cluster = k
        .attrs
        .cluster
        .filter(|c| c.size > 1 && k.attrs.warp_specialized.is_some());
    k.attrs.cluster = None;
    let Some(blocks) = k.attrs.persistent_blocks else {
        return Ok(k);
    };
    if blocks == 0 {
        return Err(Diagnostic::internal(
            "persistent_blocks 0 (one block per multiprocessor) reached lowering unresolved; \
             the driver replaces it with the device's multiprocessor count",
        )
        .into());
    }
    let span = k.body.span;
    let dt = DType::I32;
    let g_full: Vec<Expr> = k.grid.iter().map(|e| e.cast(dt)).collect();
    // Clustered: the rounds deal out clusters of tiles — the grid with the clustered dim
    // divided by the cluster's size — and each block of a cluster takes its own index along
    // that dim (the tail cluster's extra blocks repeat the last one's tile: the same values,
    // stored twice).
    let size = cluster.map_or(1, |c| c.size.max(1));
    let blocks = (blocks / size).max(1) * size;
    let g: Vec<Expr> = match cluster {
        Some(c) if c.dim < g_full.len() => {
            let mut g = g_full.clone();
            g[c.dim] = ceildiv(g[c.dim].clone(), Expr::int_of(size as i64, dt));
            g
        }
        _ => g_full.clone(),
    };
    let Some(total) = tiles(&g) else {
        return Err(Diagnostic::internal("a persistent kernel with no grid dims").into());
    };
    let p = Expr::int_of((blocks / size) as i64, dt);
    let pb = Var::new("pblock", dt);
    let round = Var::new("round", dt);
    let tile = Var::new("tile", dt);
    let t = tile.expr();
    let sz = Expr::int_of(size as i64, dt);
    // The cluster's index among the launched ones, and this block's rank in it.
    let (unit, crank) = if size > 1 {
        (
            Expr::binary(BinOp::Div, pb.expr(), sz.clone()),
            Expr::binary(BinOp::Mod, pb.expr(), sz.clone()),
        )
    } else {
        (pb.expr(), Expr::int_of(0, dt))
    };
    // Logical block indices of this round's tile: x fastest, as the hardware numbers a grid.
    let logical: Vec<Expr> = match (k.attrs.swizzle_panel, g.len()) {
        (Some(panel), 2) if panel > 1 => {
            tl_ir::ops::panel_block_indices(t.clone(), g[0].clone(), g[1].clone(), panel).to_vec()
        }
        // A 3-d grid: (x, y) in panels within each z, as for a launched grid.
        (Some(panel), 3) if panel > 1 => {
            let plane = g[0].clone() * g[1].clone();
            let within = Expr::binary(BinOp::Mod, t.clone(), plane.clone());
            let mut v =
                tl_ir::ops::panel_block_indices(within, g[0].clone(), g[1].clone(), panel).to_vec();
            v.push(Expr::binary(BinOp::Div, t.clone(), plane));
            v
        }
        _ => {
            let mut out = vec![];
            let mut rest = t.clone();
            for (i, gi) in g.iter().enumerate() {
                if i + 1 == g.len() {
                    out.push(rest.clone());
                } else {
                    out.push(Expr::binary(BinOp::Mod, rest.clone(), gi.clone()));
                    rest = Expr::binary(BinOp::Div, rest, gi.clone());
                }
            }
            out
        }
    };
    let mut round_body = vec![Stmt::new(
        StmtKind::Let {
            var: tile.clone(),
            value: unit.clone() + round.expr() * p.clone(),
        },
        span,
    )];
    for (d, (v, e)) in k.block_vars.iter().zip(logical).enumerate() {
        let e = match cluster {
            Some(c) if c.dim == d && size > 1 => min(
                e * sz.clone() + crank.clone(),
                g_full[d].clone() - Expr::int_of(1, dt),
            ),
            _ => e,
        };
        round_body.push(Stmt::new(
            StmtKind::Let {
                var: v.clone(),
                value: e.cast(v.dtype()),
            },
            span,
        ));
    }
    round_body.push(k.body.clone());
    let mut cp_async = false;
    k.body.walk(&mut |s| {
        if let StmtKind::Eval(e) = &s.kind {
            cp_async |= matches!(
                e.kind(),
                tl_ir::ExprKind::Call(Intrinsic::CpAsync { .. }, _)
            );
        }
    });
    // Side-effect calls as lowering builds them (`gpu::lower::Ctx::eval`).
    let call = |op: Intrinsic| Stmt::new(StmtKind::Eval(Expr::call(op, vec![], DType::Bool)), span);
    // Nothing is in flight here in a well-formed body, so the wait is free; with the barrier
    // it lets the shared-memory plan overlap buffers of the end and the start of a round.
    if cp_async {
        round_body.push(call(Intrinsic::CpAsyncWait { n: 0 }));
    }
    round_body.push(call(Intrinsic::SyncThreads));
    let rounds = Stmt::new(
        StmtKind::For(Box::new(For {
            var: round,
            min: Expr::int_of(0, dt),
            extent: ceildiv(total.clone() - unit, p.clone()),
            kind: ForKind::Serial,
            body: Stmt::seq(round_body, span),
        })),
        span,
    );
    let mut out = k.with_body(rounds);
    out.grid = vec![rounds_grid(total, p, sz)];
    out.block_vars = vec![pb];
    out.attrs.swizzle_panel = None;
    // The launch's clusters run along its (one) grid dim.
    out.attrs.cluster = cluster.map(|c| tl_ir::ClusterAttr {
        dim: 0,
        size: c.size,
    });
    Ok(out)
}
