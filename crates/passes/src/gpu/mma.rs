//! Gemm on tensor cores with `mma.sync.m16n8k16` (sm_80+, f16/bf16 operands, f32 accumulate).
//!
//! The block's warps tile the `M × N` accumulator (`wm` warps along M, `wn` along N, chosen by
//! the warp policy); each warp owns `mi × ni` atoms of 16 × 8. Per 16-wide step of K, a warp
//! loads its A tiles with `ldmatrix.x4` (`.trans` when A is stored K-major), its B tiles two
//! n8 atoms at a time with `ldmatrix.x4` (`.trans` when B is stored K × N), and issues
//! `mi · ni` mma's. A may also come from registers (the P of attention's P·V) when it holds the
//! accumulator layout of an earlier gemm with the same rows, which is exactly the A operand
//! layout of the next one.

use tl_ir::{
    DType, DiagKind, Diagnostic, Expr, ForKind, Fragment, GemmOp, Intrinsic, Mode, Region, Scope,
    Span, Stmt, StmtKind, Var, WarpPolicy,
};
use tl_target::Target;

use super::gemm::{extents2, index2};
use super::lower::Ctx;
use crate::tile_util::{address_of, for_loop, store};

/// Can this gemm use `mma.sync.m16n8k16`?
pub fn applicable(g: &GemmOp, target: &Target) -> bool {
    let ab = g.a.buffer.dtype();
    target.has_mma_sync()
        && ab == g.b.buffer.dtype()
        && matches!(ab, DType::F16 | DType::BF16)
        && g.c.buffer.dtype() == DType::F32
        && g.b.buffer.scope() == Scope::Shared
        && matches!(g.a.buffer.scope(), Scope::Shared | Scope::Fragment)
        && match (extents2(&g.a), extents2(&g.c)) {
            (Some((ar, ac)), Some((m, n))) => {
                let k = if g.trans_a { ar } else { ac };
                m % 16 == 0 && n % 8 == 0 && k % 16 == 0
            }
            _ => false,
        }
}

/// `(wm, wn)` warps along M and N for `policy`, or a message saying what would work.
pub fn partition(m: i64, n: i64, warps: i64, policy: WarpPolicy) -> Result<(i64, i64), String> {
    partition_atoms(m, n, warps, (16, 8), 32, policy)
}

/// `(wm, wn)` warps (of `warp_threads` threads) along M and N for `policy`, each warp owning a
/// multiple of `atom = (rows, cols)`, or a message saying what would work.
pub fn partition_atoms(
    m: i64,
    n: i64,
    warps: i64,
    atom: (i64, i64),
    warp_threads: i64,
    policy: WarpPolicy,
) -> Result<(i64, i64), String> {
    let (ar, ac) = atom;
    let ok = |wm: i64, wn: i64| wm * wn == warps && m % (ar * wm) == 0 && n % (ac * wn) == 0;
    let mut cands: Vec<(i64, i64)> = (1..=warps)
        .filter(|wm| warps % wm == 0)
        .map(|wm| (wm, warps / wm))
        .collect();
    match policy {
        WarpPolicy::FullRow => cands.retain(|&(wm, _)| wm == warps),
        WarpPolicy::FullCol => cands.retain(|&(_, wn)| wn == warps),
        WarpPolicy::Square | WarpPolicy::Auto => {
            // Warp tiles as square as possible (least operand traffic per multiply).
            cands.sort_by_key(|&(wm, wn)| ((m / wm) - (n / wn)).abs());
        }
    }
    if let Some(&(wm, wn)) = cands.iter().find(|&&(wm, wn)| ok(wm, wn)) {
        return Ok((wm, wn));
    }
    let mut works = vec![];
    for w in [1, 2, 4, 8, 16] {
        for wm in (1..=w).filter(|x| w % x == 0) {
            let wn = w / wm;
            if m % (ar * wm) == 0 && n % (ac * wn) == 0 {
                let fits = match policy {
                    WarpPolicy::FullRow => wn == 1,
                    WarpPolicy::FullCol => wm == 1,
                    _ => true,
                };
                if fits {
                    works.push(format!("{} threads", warp_threads * w));
                    break;
                }
            }
        }
    }
    Err(format!(
        "a {m}x{n} accumulator cannot be split over {warps} {} with policy {policy:?} (each {} needs a multiple of {ar} rows and {ac} columns){}",
        if warp_threads == 64 { "waves" } else { "warps" },
        if warp_threads == 64 { "wave" } else { "warp" },
        if works.is_empty() {
            String::new()
        } else {
            format!("; {} would work", works.join(" or "))
        }
    ))
}

/// The accumulator layout: lane = t (4, along n by 2) + g (8, along m by 1); warps along m,
/// then along n; values: the atom's 2 columns, its 2 row halves, then the warp's n8 atoms,
/// then its m16 atoms — so atom (mi, ni) holds values `4·(ni + NI·mi) .. +4`.
pub fn c_layout(m: i64, n: i64, wm: i64, wn: i64) -> Fragment {
    let (mi, ni) = (m / wm / 16, n / wn / 8);
    Fragment {
        shape: vec![m, n],
        thread_modes: vec![
            Mode::along(4, 1, 2),
            Mode::along(8, 0, 1),
            Mode::along(wm, 0, m / wm),
            Mode::along(wn, 1, n / wn),
        ],
        value_modes: vec![
            Mode::along(2, 1, 1),
            Mode::along(2, 0, 8),
            Mode::along(ni, 1, 8),
            Mode::along(mi, 0, 16),
        ],
    }
}

impl Ctx<'_> {
    pub fn lower_gemm_mma(&mut self, g: &GemmOp, span: Span) -> Result<Stmt, Diagnostic> {
        let f = self.fragment_of(&g.c.buffer, span)?;
        let acc = self.local_of(&g.c.buffer, span)?;
        let (m, n) =
            extents2(&g.c).ok_or_else(|| Diagnostic::internal("mma gemm on a non-2-d C"))?;
        let (ar, ac) =
            extents2(&g.a).ok_or_else(|| Diagnostic::internal("mma gemm on a non-2-d A"))?;
        let k = if g.trans_a { ar } else { ac };
        // The warp partition is read back from the accumulator's layout.
        let wm = f.thread_modes.get(2).map(|x| x.extent).unwrap_or(1);
        let wn = f.thread_modes.get(3).map(|x| x.extent).unwrap_or(1);
        if !f.equivalent(&c_layout(m, n, wm, wn)) {
            return Err(Diagnostic::internal(format!(
                "accumulator `{}` does not have a tensor-core layout ({})",
                g.c.buffer.name(),
                f.to_cute()
            )));
        }
        let (mi_n, ni_n) = (m / wm / 16, n / wn / 8);
        let ab = g.a.buffer.dtype();
        let lane = self.tid.floormod(32);
        let warp = self.tid.floordiv(32);
        let row0 = warp.floormod(wm) * (m / wm);
        let col0 = warp.floordiv(wm).floormod(wn) * (n / wn);
        let j = lane.floordiv(8);
        let r = lane.floormod(8);
        let mut out = vec![];
        if g.clear_accum {
            let v = Var::new("v", DType::I32);
            out.push(for_loop(
                &v,
                f.local_size(),
                ForKind::Unrolled,
                store(&acc, vec![v.expr()], Expr::int_of(0, DType::F32), span),
                span,
            ));
        }
        // A from registers: its layout must be the accumulator layout of the same rows.
        let a_regs = if g.a.buffer.scope() == Scope::Fragment {
            let fa = self.fragment_of(&g.a.buffer, span)?;
            if g.trans_a || !fa.equivalent(&c_layout(m, k, wm, 1)) || wn != 1 {
                return Err(Diagnostic::new(
                    DiagKind::LayoutConflict,
                    span,
                    format!(
                        "gemm reads A from fragment `{}` ({}), which is not laid out as a tensor-core A operand for these warps ({})",
                        g.a.buffer.name(),
                        fa.to_cute(),
                        c_layout(m, k, wm, 1).to_cute()
                    ),
                )
                .help("produce A with a gemm over the same rows (warp policy FullRow), or copy it to shared memory"));
            }
            Some(self.local_of(&g.a.buffer, span)?)
        } else {
            None
        };
        let a_frag =
            tl_ir::Buffer::new("a_frag", vec![Expr::int(mi_n * 8)], ab, Scope::Local, span);
        let b_frag = tl_ir::Buffer::new(
            "b_frag",
            vec![Expr::int(ni_n.max(2) * 4)],
            ab,
            Scope::Local,
            span,
        );
        if a_regs.is_none() {
            out.push(Stmt::new(StmtKind::Alloc(a_frag.clone()), span));
        }
        out.push(Stmt::new(StmtKind::Alloc(b_frag.clone()), span));
        let ks = Var::new("ks", DType::I32);
        let k0 = ks.expr() * 16;
        let mut step = vec![];
        let ldm = |num: u32, trans: bool, smem: Expr, dst: Expr| -> Stmt {
            Stmt::new(
                StmtKind::Eval(Expr::call(
                    Intrinsic::Ldmatrix { num, trans },
                    vec![smem, dst],
                    DType::Bool,
                )),
                span,
            )
        };
        if a_regs.is_none() {
            for mi in 0..mi_n {
                let idx = if g.trans_a {
                    // Stored [K, M]: 8x8 blocks of (k, m), transposed on the way in.
                    let kk = k0.clone() + r.clone() + j.floordiv(2) * 8;
                    let mm = row0.clone() + 16 * mi + j.floormod(2) * 8;
                    index2(&g.a, kk, mm)
                } else {
                    let mm = row0.clone() + 16 * mi + r.clone() + j.floormod(2) * 8;
                    let kk = k0.clone() + j.floordiv(2) * 8;
                    index2(&g.a, mm, kk)
                };
                step.push(ldm(
                    4,
                    g.trans_a,
                    address_of(&g.a.buffer, idx),
                    address_of(&a_frag, vec![Expr::int(8 * mi)]),
                ));
            }
        }
        // B is loaded one ldmatrix (two n8 atoms) at a time, right before the mmas that use it:
        // the whole row of B fragments live at once would cost 2·ni registers, which is what
        // pushes the 32-rows-per-warp attention tiles over the register file.
        let mut nj = 0;
        while nj < ni_n {
            let pair = nj + 1 < ni_n;
            let num = if pair { 4 } else { 2 };
            // Lanes 16..31 of an x2 repeat the addresses of 0..15 (any valid address will do).
            let jj = if pair { j.clone() } else { j.floormod(2) };
            let idx = if g.trans_b {
                // Stored [N, K]: rows are n, k contiguous.
                let nn = col0.clone() + 8 * nj + r.clone() + jj.floordiv(2) * 8;
                let kk = k0.clone() + jj.floormod(2) * 8;
                index2(&g.b, nn, kk)
            } else {
                let kk = k0.clone() + r.clone() + jj.floormod(2) * 8;
                let nn = col0.clone() + 8 * nj + jj.floordiv(2) * 8;
                index2(&g.b, kk, nn)
            };
            step.push(ldm(
                num,
                !g.trans_b,
                address_of(&g.b.buffer, idx),
                address_of(&b_frag, vec![Expr::int(4 * nj)]),
            ));
            for ni in nj..(nj + 2).min(ni_n) {
                for mi in 0..mi_n {
                    let d = address_of(&acc, vec![Expr::int(4 * (ni + ni_n * mi))]);
                    let a = match &a_regs {
                        // Accumulator layout of [m, k]: atom (mi, 2ks) starts at 4·(2ks + (k/8)·mi).
                        Some(regs) => address_of(regs, vec![ks.expr() * 8 + 4 * (k / 8) * mi]),
                        None => address_of(&a_frag, vec![Expr::int(8 * mi)]),
                    };
                    let b = address_of(&b_frag, vec![Expr::int(4 * ni)]);
                    step.push(Stmt::new(
                        StmtKind::Eval(Expr::call(
                            Intrinsic::MmaSync { ab },
                            vec![d.clone(), a, b, d],
                            DType::Bool,
                        )),
                        span,
                    ));
                }
            }
            nj += 2;
        }
        let kind = if k / 16 <= 8 {
            ForKind::Unrolled
        } else {
            ForKind::Serial
        };
        out.push(for_loop(&ks, k / 16, kind, Stmt::seq(step, span), span));
        Ok(Stmt::seq(out, span))
    }
}

/// Shared tiles the tensor cores read get the swizzled layout the algebra picks for them.
pub fn operand_smem_layout(r: &Region) -> Option<tl_layout::ComposedLayout> {
    let shape = r.buffer.const_shape()?;
    if shape.len() < 2 {
        return None;
    }
    let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let sl = tl_layout::smem_swizzle_layout(rows, cols, r.buffer.dtype().bytes() as i64).ok()?;
    (sl.mode != tl_layout::NvSwizzle::None).then_some(sl.layout)
}
