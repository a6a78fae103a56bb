//! Gemm on CUDA cores (the SIMT path every target has): each thread owns a small block of the
//! accumulator and runs the k loop with fused multiply-adds, reading A and B from shared
//! memory. A fragment operand A (the `P·V` of attention) is first staged through shared
//! memory, since its rows are spread over other threads.

use tl_ir::{
    DType, Diagnostic, Expr, ForKind, Fragment, GemmInstruction, GemmOp, Mode, Region, Scope, Span,
    Stmt, Var,
};

use super::lower::Ctx;
use crate::tile_util::{for_loop, store};

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

fn pick(extent: i64, candidates: &[i64]) -> i64 {
    candidates
        .iter()
        .copied()
        .find(|c| extent % c == 0)
        .unwrap_or(1)
}

/// Each thread holds a `vm × vn` block (up to 4 × 4) of the `m × n` accumulator. The threads
/// along m are chosen from m alone, so two accumulators with the same rows (the S = QKᵀ and
/// O = PV of attention) spread their rows identically and row vectors fit both; the remaining
/// threads go along n. What is left of the tile
/// repeats in the value index, and threads beyond the tile are replicas.
pub fn simt_accumulator_layout(m: i64, n: i64, threads: i64) -> Fragment {
    let vn = pick(n, &[4, 2]);
    let vm = pick(m, &[4, 2]);
    let tm = gcd(threads, m / vm);
    let tn = gcd(threads / tm, n / vn);
    let rep = threads / (tn * tm);
    let rn = n / (vn * tn);
    let rm = m / (vm * tm);
    // Rows take the low thread bits, so the row a thread holds depends on m alone.
    let mut thread_modes = vec![Mode::along(tm, 0, vm), Mode::along(tn, 1, vn)];
    if rep > 1 {
        thread_modes.push(Mode::replica(rep));
    }
    Fragment {
        shape: vec![m, n],
        thread_modes,
        value_modes: vec![
            Mode::along(vn, 1, 1),
            Mode::along(vm, 0, 1),
            Mode::along(rn, 1, vn * tn),
            Mode::along(rm, 0, vm * tm),
        ],
    }
}

/// Buffer indices of element `(a, b)` of a 2-d tile (its two non-unit dims, or its last two).
pub fn index2(r: &Region, a: Expr, b: Expr) -> Vec<Expr> {
    let nonunit: Vec<usize> = (0..r.rank())
        .filter(|&d| r.extents[d].as_int() != Some(1))
        .collect();
    let (d0, d1) = if nonunit.len() == 2 {
        (nonunit[0], nonunit[1])
    } else {
        (r.rank().saturating_sub(2), r.rank().saturating_sub(1))
    };
    let mut idx = r.offsets.clone();
    if r.rank() >= 2 {
        idx[d0] = idx[d0].clone() + a;
        idx[d1] = idx[d1].clone() + b;
    } else if r.rank() == 1 {
        idx[0] = idx[0].clone() + b;
    }
    idx
}

/// The two extents of a 2-d tile, as `index2` sees it.
pub fn extents2(r: &Region) -> Option<(i64, i64)> {
    let e = r.const_extents()?;
    let nonunit: Vec<i64> = e.iter().copied().filter(|&x| x != 1).collect();
    if nonunit.len() == 2 {
        Some((nonunit[0], nonunit[1]))
    } else if e.len() >= 2 {
        Some((e[e.len() - 2], e[e.len() - 1]))
    } else {
        None
    }
}

impl Ctx<'_> {
    pub fn lower_gemm(&mut self, g: &GemmOp, span: Span) -> Result<Stmt, Diagnostic> {
        match g.instruction {
            Some(GemmInstruction::Wgmma) => return self.lower_gemm_wgmma(g, span),
            Some(GemmInstruction::MmaSync) => return self.lower_gemm_mma(g, span),
            Some(GemmInstruction::Simt) => {}
            Some(GemmInstruction::Mfma(shape)) => return self.lower_gemm_mfma(g, shape, span),
            None => {
                return Err(Diagnostic::internal(
                    "a gemm reached lowering without an instruction (instruction selection did not run)",
                ))
            }
        }
        let c_buf = &g.c.buffer;
        let f = self.fragment_of(c_buf, span)?;
        let acc = self.local_of(c_buf, span)?;
        let (m, n) = extents2(&g.c)
            .ok_or_else(|| self.unsupported(span, "a gemm accumulator that is not a 2-d tile"))?;
        let (ar, ac) = extents2(&g.a)
            .ok_or_else(|| self.unsupported(span, "a gemm operand A that is not a 2-d tile"))?;
        let k = if g.trans_a { ar } else { ac };
        let _ = (m, n);
        let mut out = vec![];
        // An A operand in registers goes through shared memory first.
        let a_region = if g.a.buffer.scope() == Scope::Fragment {
            let shape = g.a.buffer.const_shape().unwrap_or_default();
            let scratch = self.scratch_shared(
                "gemm_a",
                shape.iter().map(|&x| Expr::int(x)).collect(),
                g.a.buffer.dtype(),
                span,
            );
            let stage = self.lower_copy(&g.a, &Region::full(&scratch), span, false)?;
            out.push(stage);
            out.push(self.sync(span));
            Region::new(
                &scratch,
                g.a.offsets.iter().map(|_| Expr::int(0)).collect(),
                g.a.extents.clone(),
            )
        } else {
            g.a.clone()
        };
        let acc_t = c_buf.dtype();
        let zero = Expr::int_of(0, acc_t);
        let v = Var::new("v", DType::I32);
        if g.clear_accum {
            out.push(for_loop(
                &v,
                f.local_size(),
                ForKind::Unrolled,
                store(&acc, vec![v.expr()], zero, span),
                span,
            ));
        }
        let kv = Var::new("kk", DType::I32);
        let coords = f.coords(&self.tid, &v.expr());
        let (r, c) = (coords[0].clone(), coords[1].clone());
        let a_idx = if g.trans_a {
            index2(&a_region, kv.expr(), r.clone())
        } else {
            index2(&a_region, r.clone(), kv.expr())
        };
        let b_idx = if g.trans_b {
            index2(&g.b, c.clone(), kv.expr())
        } else {
            index2(&g.b, kv.expr(), c.clone())
        };
        let prod = Expr::load(&a_region.buffer, a_idx).cast(acc_t)
            * Expr::load(&g.b.buffer, b_idx).cast(acc_t);
        let upd = store(
            &acc,
            vec![v.expr()],
            Expr::load(&acc, vec![v.expr()]) + prod,
            span,
        );
        let inner = for_loop(&v, f.local_size(), ForKind::Unrolled, upd, span);
        out.push(for_loop(&kv, k, ForKind::Serial, inner, span));
        if g.a.buffer.scope() == Scope::Fragment {
            // The scratch is rewritten by the next gemm: nobody may still be reading it.
            out.push(self.sync(span));
        }
        Ok(Stmt::seq(out, span))
    }
}
