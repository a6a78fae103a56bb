//! Gemm on AMD's matrix cores: `v_mfma_f32_{16x16|32x32}x{K}_{bf16|f16}` (gfx942, gfx950), f32
//! accumulate, 64-lane waves.
//!
//! The block's waves tile the `M × N` accumulator (`wm` along M, `wn` along N, chosen by the
//! warp policy); each wave owns `mi × ni` atoms. The instruction is issued *swapped*: the
//! instruction's A operand is an atom of our B (N rows) and its B operand an atom of our A (M
//! columns), so the instruction computes the transposed atom Cᵀ. In the accumulator that puts
//! M on the lane (lane `l` holds row `l % 16`) and N on the values (4 consecutive columns per
//! lane): rows spread over lanes exactly as the instruction's own operand layout wants them, so
//! an accumulator (attention's scores) is, converted to 16 bits, the A operand of the next gemm
//! over the same rows — no shuffle, no trip through LDS — and row reductions stay within lanes
//! and a 4-lane butterfly.
//!
//! Operands in LDS are read per lane along K: with K the tile's contiguous dim, 16 consecutive
//! elements per lane and atom are two `ds_read_b128` feeding `k_pack = 2` instructions (the sum
//! over K does not care which lane holds which k, as long as A and B agree); with K strided
//! (an `[K, M]` A, a `[K, N]` B, attention's V), each element is its own 2-byte read.

use tl_ir::{
    Buffer, DType, DiagKind, Diagnostic, Expr, ForKind, Fragment, GemmOp, Intrinsic, MfmaOp,
    MfmaShape, Mode, Region, Scope, Span, Stmt, StmtKind, Var, WarpPolicy,
};
use tl_target::Target;

use super::gemm::{extents2, index2};
use super::lower::Ctx;
use crate::tile_util::{address_of, for_loop, store};

/// Lanes of an AMD wave.
pub const WAVE: i64 = 64;

/// The MFMA shape instruction selection picks for `g` on `target` with `threads` per block,
/// or why none fits. `requested` is the kernel's own choice, checked instead of picking.
pub fn choose(
    g: &GemmOp,
    target: &Target,
    threads: i64,
    requested: Option<MfmaShape>,
) -> Result<MfmaShape, String> {
    let Some(arch) = target.amd() else {
        return Err(format!(
            "MFMA needs gfx942 or gfx950; the target is {target}"
        ));
    };
    let ab = g.a.buffer.dtype();
    if ab != g.b.buffer.dtype() || !matches!(ab, DType::F16 | DType::BF16) {
        return Err(format!(
            "MFMA here takes f16 or bf16 operands of one type (A is {ab}, B is {})",
            g.b.buffer.dtype()
        ));
    }
    if g.c.buffer.dtype() != DType::F32 {
        return Err("MFMA accumulates in f32".into());
    }
    if g.b.buffer.scope() != Scope::Shared {
        return Err("B must be a shared-memory (LDS) tile".into());
    }
    let a_regs = match g.a.buffer.scope() {
        Scope::Shared => false,
        Scope::Fragment => true,
        s => return Err(format!("A must be an LDS tile or a fragment, not {s:?}")),
    };
    if a_regs && g.trans_a {
        return Err("an A fragment must be [M, K], not transposed".into());
    }
    if threads % WAVE != 0 {
        return Err(format!(
            "MFMA runs on whole 64-lane waves; the block has {threads} threads"
        ));
    }
    let (Some((m, n)), Some((ar, ac))) = (extents2(&g.c), extents2(&g.a)) else {
        return Err("MFMA needs constant 2-d tile shapes".into());
    };
    let k = if g.trans_a { ar } else { ac };
    let fits = |s: &MfmaShape| {
        let (sm, sn, sk) = (s.m as i64, s.n as i64, s.k as i64);
        m % sm == 0
            && n % sn == 0
            && k % sk == 0
            // A from registers holds 16-row atoms of an earlier 16x16 gemm.
            && (!a_regs || sm == 16)
    };
    match requested {
        Some(s) => {
            if !arch.has_mfma(s.m, s.n, s.k) {
                let have: Vec<String> = arch
                    .mfma
                    .iter()
                    .map(|x| format!("{}x{}x{}", x.m, x.n, x.k))
                    .collect();
                return Err(format!(
                    "{target} has no {}x{}x{} MFMA; it has {}",
                    s.m,
                    s.n,
                    s.k,
                    have.join(", ")
                ));
            }
            if !fits(&s) {
                return Err(format!(
                    "the {}x{}x{} MFMA needs M a multiple of {}, N of {} and K of {} (M = {m}, N = {n}, K = {k}){}",
                    s.m,
                    s.n,
                    s.k,
                    s.m,
                    s.n,
                    s.k,
                    if a_regs { "; an A fragment needs 16x16 atoms" } else { "" }
                ));
            }
            Ok(s)
        }
        None => arch
            .mfma
            .iter()
            // 16x16 atoms first (the finest split over waves, and the layout P·V can read
            // from registers), the deepest K the tile allows.
            .map(|x| MfmaShape {
                m: x.m,
                n: x.n,
                k: x.k,
            })
            .filter(|s| s.m == 16)
            .find(fits)
            .ok_or_else(|| {
                format!(
                    "MFMA needs M and N multiples of 16 and K of 16 (M = {m}, N = {n}, K = {k})"
                )
            }),
    }
}

/// The accumulator layout of an MFMA gemm with `wm × wn` waves (swapped issue, see the module
/// doc): lane `l` holds row `l % am` and, per atom, columns `4·(l / am) + …`; then the wave's
/// N atoms, then its M atoms — atom `(mi, ni)` holds values `acc·(ni + NI·mi) ..` with `acc`
/// values per atom.
pub fn c_layout(m: i64, n: i64, wm: i64, wn: i64, shape: MfmaShape) -> Fragment {
    let (am, an) = (shape.m as i64, shape.n as i64);
    let (mi, ni) = (m / wm / am, n / wn / an);
    let groups = WAVE / am;
    let mut value_modes = vec![Mode::along(4, 1, 1)];
    if am == 32 {
        // 32x32: rows 8·(v / 4) + 4·(l / 32) + v % 4 of the instruction's D, our columns.
        value_modes.push(Mode::along(4, 1, 8));
    }
    value_modes.push(Mode::along(ni, 1, an));
    value_modes.push(Mode::along(mi, 0, am));
    Fragment {
        shape: vec![m, n],
        thread_modes: vec![
            Mode::along(am, 0, 1),
            Mode::along(groups, 1, 4),
            Mode::along(wm, 0, m / wm),
            Mode::along(wn, 1, n / wn),
        ],
        value_modes,
    }
}

/// `(wm, wn)` waves along M and N for `policy` with `am × an` atoms, or a message saying what
/// would work.
pub fn partition(
    m: i64,
    n: i64,
    waves: i64,
    shape: MfmaShape,
    policy: WarpPolicy,
) -> Result<(i64, i64), String> {
    let (am, an) = (shape.m as i64, shape.n as i64);
    if matches!(policy, WarpPolicy::Auto | WarpPolicy::Square) {
        // Wave tiles as square as possible; between equally square ones, more waves along M
        // (fewer M atoms per wave: the operand a step keeps in registers is the smaller).
        let mut cands: Vec<(i64, i64)> = (1..=waves)
            .filter(|wm| waves % wm == 0)
            .map(|wm| (wm, waves / wm))
            .filter(|&(wm, wn)| m % (am * wm) == 0 && n % (an * wn) == 0)
            .collect();
        cands.sort_by_key(|&(wm, wn)| ((m / wm - n / wn).abs(), std::cmp::Reverse(wm)));
        if let Some(&best) = cands.first() {
            return Ok(best);
        }
    }
    super::mma::partition_atoms(m, n, waves, (am, an), WAVE, policy)
}

impl Ctx<'_> {
    pub fn lower_gemm_mfma(
        &mut self,
        g: &GemmOp,
        shape: MfmaShape,
        span: Span,
    ) -> Result<Stmt, Diagnostic> {
        choose(g, &self.target, self.threads, Some(shape))
            .map_err(|why| Diagnostic::new(DiagKind::Unsupported, span, why))?;
        let f = self.fragment_of(&g.c.buffer, span)?;
        let acc = self.local_of(&g.c.buffer, span)?;
        let (m, n) = extents2(&g.c).ok_or_else(|| Diagnostic::internal("mfma on a non-2-d C"))?;
        let (ar, ac) = extents2(&g.a).ok_or_else(|| Diagnostic::internal("mfma on a non-2-d A"))?;
        let k = if g.trans_a { ar } else { ac };
        // The wave partition is read back from the accumulator's layout.
        let wm = f.thread_modes.get(2).map_or(1, |x| x.extent);
        let wn = f.thread_modes.get(3).map_or(1, |x| x.extent);
        if !f.equivalent(&c_layout(m, n, wm, wn, shape)) {
            return Err(Diagnostic::internal(format!(
                "accumulator `{}` does not have an MFMA layout ({})",
                g.c.buffer.name(),
                f.to_cute()
            )));
        }
        let (am, an, sk) = (shape.m as i64, shape.n as i64, shape.k as i64);
        let (mi_n, ni_n) = (m / wm / am, n / wn / an);
        let ab = g.a.buffer.dtype();
        let op = MfmaOp {
            m: shape.m,
            n: shape.n,
            k: shape.k,
            ab,
        };
        let e = op.operand_elems() as i64;
        let acc_per_atom = op.acc_elems() as i64;
        let lane = self.tid.floormod(WAVE);
        let wave = Expr::call(Intrinsic::WaveIdx, vec![], DType::I32);
        let row0 = wave.floormod(wm) * (m / wm);
        let col0 = wave.floordiv(wm).floormod(wn) * (n / wn);
        let lr = lane.floormod(am);
        let lg = lane.floordiv(am);
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
        // A from registers: the accumulator layout of an earlier 16x16 gemm over the same
        // rows (attention's P), converted to this gemm's operand type.
        let a_regs = if g.a.buffer.scope() == Scope::Fragment {
            let fa = self.fragment_of(&g.a.buffer, span)?;
            let want = c_layout(m, k, wm, 1, shape);
            if g.a.buffer.dtype() != ab || wn != 1 || !fa.equivalent(&want) {
                return Err(Diagnostic::new(
                    DiagKind::LayoutConflict,
                    span,
                    format!(
                        "gemm reads A from fragment `{}` ({}), which is not laid out as an MFMA operand for these waves ({})",
                        g.a.buffer.name(),
                        fa.to_cute(),
                        want.to_cute()
                    ),
                )
                .help("produce A with a gemm over the same rows (warp policy FullRow), or copy it to shared memory"));
            }
            Some(self.local_of(&g.a.buffer, span)?)
        } else {
            None
        };
        let kpack = if a_regs.is_none() && k % (2 * sk) == 0 {
            2
        } else {
            1
        };
        let kc = sk * kpack;
        let per_lane = e * kpack;
        let chunks = k / kc;
        // The logical k of slot `slot` of this lane in chunk `s`: a base for the lane and the
        // chunk, plus an offset per slot.
        let kbase = |s: &Expr| -> Expr {
            match a_regs {
                // Contiguous per lane: slots (j, v) of the k_pack instructions in a row.
                None => s.clone() * kc + lg.clone() * per_lane,
                // As P holds it: 4 consecutive keys per 16-key atom, atoms side by side.
                Some(_) => s.clone() * kc + lg.clone() * 4,
            }
        };
        let koffs: Vec<i64> = (0..per_lane)
            .map(|slot| match a_regs {
                None => slot,
                Some(_) => 16 * (slot / 4) + slot % 4,
            })
            .collect();
        // The longest run of consecutive k each operand's tile stores contiguously (and
        // aligned): the whole row with K the tile's last dim, 8 under a K-interleaved layout
        // (a [K, rows] tile transposed on its way in), 1 otherwise.
        let read_a = self.operand_read(&g.a, g.trans_a, am);
        let read_b = self.operand_read(&g.b, !g.trans_b, an);
        let a_frag = Buffer::new(
            "a_frag",
            vec![Expr::int(mi_n * per_lane)],
            ab,
            Scope::Local,
            span,
        );
        let b_frag = Buffer::new(
            "b_frag",
            vec![Expr::int(ni_n * per_lane)],
            ab,
            Scope::Local,
            span,
        );
        if a_regs.is_none() {
            out.push(Stmt::new(StmtKind::Alloc(a_frag.clone()), span));
        }
        out.push(Stmt::new(StmtKind::Alloc(b_frag.clone()), span));
        let step = |s: &Expr| -> Stmt {
            let mut body = vec![];
            if a_regs.is_none() {
                for mi in 0..mi_n {
                    let row = row0.clone() + am * mi + lr.clone();
                    body.extend(read_operand(
                        &g.a,
                        g.trans_a,
                        &row,
                        &kbase(s),
                        &koffs,
                        read_a,
                        &lane,
                        &a_frag,
                        mi * per_lane,
                        span,
                    ));
                }
            }
            for ni in 0..ni_n {
                let row = col0.clone() + an * ni + lr.clone();
                body.extend(read_operand(
                    &g.b,
                    !g.trans_b,
                    &row,
                    &kbase(s),
                    &koffs,
                    read_b,
                    &lane,
                    &b_frag,
                    ni * per_lane,
                    span,
                ));
            }
            // One side stays in registers for the whole step, the other is streamed atom by
            // atom in the outer loop (the schedule stage's rounds): a side read element by
            // element (K strided in its tile) is streamed, else the side with fewer atoms
            // stays.
            let a_gathered = a_regs.is_none() && read_a.gathered();
            let b_gathered = read_b.gathered();
            let m_resident = match (a_gathered, b_gathered) {
                (true, false) => false,
                (false, true) => true,
                _ => mi_n <= ni_n,
            };
            let cells: Vec<(i64, i64)> = if m_resident {
                (0..ni_n)
                    .flat_map(|ni| (0..mi_n).map(move |mi| (mi, ni)))
                    .collect()
            } else {
                (0..mi_n)
                    .flat_map(|mi| (0..ni_n).map(move |ni| (mi, ni)))
                    .collect()
            };
            for (mi, ni) in cells {
                {
                    let d = address_of(&acc, vec![Expr::int(acc_per_atom * (ni + ni_n * mi))]);
                    for j in 0..kpack {
                        let src_a = address_of(&b_frag, vec![Expr::int(ni * per_lane + j * e)]);
                        let src_b = match &a_regs {
                            None => address_of(&a_frag, vec![Expr::int(mi * per_lane + j * e)]),
                            // Atoms of P's 16 keys: chunk s starts at atom (K/16)·s of row mi.
                            Some(regs) => {
                                address_of(regs, vec![(s.clone() * (sk / 16) + (k / 16) * mi) * 4])
                            }
                        };
                        body.push(Stmt::new(
                            StmtKind::Eval(Expr::call(
                                Intrinsic::Mfma(op),
                                vec![d.clone(), src_a, src_b, d.clone()],
                                DType::Bool,
                            )),
                            span,
                        ));
                    }
                }
            }
            Stmt::seq(body, span)
        };
        if chunks <= 8 {
            for s in 0..chunks {
                out.push(step(&Expr::int(s)));
            }
        } else {
            let s = Var::new("kc", DType::I32);
            out.push(for_loop(&s, chunks, ForKind::Serial, step(&s.expr()), span));
        }
        Ok(Stmt::seq(out, span))
    }
}

/// How an MFMA operand's k elements are read from its shared tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OperandRead {
    /// Runs of up to this many consecutive k are contiguous in the tile (the whole row when K
    /// is the tile's last dim, 8 under a K-interleaved layout, 1 otherwise: element by
    /// element).
    Runs(i64),
    /// K strided in the tile, read 4 k at a time with gfx950's transposing LDS read.
    Transposed,
}

impl OperandRead {
    /// Read in narrow pieces (so better streamed than kept for a whole step).
    fn gathered(self) -> bool {
        matches!(self, OperandRead::Runs(r) if r < 4)
    }
}

/// Read one operand atom's slots for this lane into `dst[off ..]`: `row` is the lane's M (or
/// N) index, slot `i`'s K index `kbase + koffs[i]`. With `Runs(run)`, slots whose K indices run
/// on consecutively (up to `run` and 8 elements: 16 bytes) are one read. `Transposed` reads 4
/// consecutive k per `ds_read_b64_tr_b16`: in each 16-lane group (16 consecutive rows, one k
/// range) lane `l` names the 8 bytes at k `kq + (l % 16) / 4`, rows `4·(l % 4) ..` of the
/// group, and receives its own row's 4 k.
#[allow(clippy::too_many_arguments)]
fn read_operand(
    r: &Region,
    k_first: bool,
    row: &Expr,
    kbase: &Expr,
    koffs: &[i64],
    how: OperandRead,
    lane: &Expr,
    dst: &Buffer,
    off: i64,
    span: Span,
) -> Vec<Stmt> {
    let idx = |k: Expr, row: Expr| {
        if k_first {
            index2(r, k, row)
        } else {
            index2(r, row, k)
        }
    };
    let mut out = vec![];
    let run = match how {
        OperandRead::Runs(run) => run,
        OperandRead::Transposed => 1,
    };
    let mut i = 0;
    while i < koffs.len() {
        let consecutive = |w: usize| {
            i + w <= koffs.len()
                && koffs[i] % w as i64 == 0
                && (1..w).all(|j| koffs[i + j] == koffs[i] + j as i64)
        };
        if how == OperandRead::Transposed && consecutive(4) {
            let l16 = lane.floormod(16);
            let group_row = row.clone() - l16.clone() + l16.floormod(4) * 4;
            let k = kbase.clone() + koffs[i] + l16.floordiv(4);
            out.push(Stmt::new(
                StmtKind::Eval(Expr::call(
                    Intrinsic::LdsReadTr16,
                    vec![
                        address_of(dst, vec![Expr::int(off + i as i64)]),
                        address_of(&r.buffer, idx(k, group_row)),
                    ],
                    DType::Bool,
                )),
                span,
            ));
            i += 4;
            continue;
        }
        // The widest power-of-two run from slot i that stays consecutive and aligned.
        let len = [8usize, 4, 2]
            .into_iter()
            .find(|&w| w as i64 <= run && consecutive(w))
            .unwrap_or(1);
        out.push(Stmt::new(
            StmtKind::Eval(Expr::call(
                Intrinsic::VecCopy { lanes: len as u32 },
                vec![
                    address_of(dst, vec![Expr::int(off + i as i64)]),
                    address_of(&r.buffer, idx(kbase.clone() + koffs[i], row.clone())),
                ],
                DType::Bool,
            )),
            span,
        ));
        i += len;
    }
    out
}

/// The K-interleaved layout of a `[K, rows]` operand tile: groups of 8 consecutive k of one
/// row are 16 contiguous bytes (what a lane reads for an MFMA), groups of rows one after
/// another: `(k, x) ↦ k % 8 + 8·x + 8·rows·(k / 8)`. Such a tile is filled by a copy that
/// transposes in registers (`kcopy`). On top, the 16-byte chunks are XOR-swizzled by the
/// chunk index's next three bits (`Sw<3,3,3>`, when the tile is a multiple of 512
/// elements), so that the transposing copy's 8-byte writes, whose lanes step 8 rows apart,
/// fall in different banks; a lane's 16 bytes stay together.
pub fn k_interleaved_layout(k: i64, rows: i64) -> Option<tl_layout::ComposedLayout> {
    if k % K_GROUP != 0 || k <= 0 || rows <= 0 {
        return None;
    }
    let l = tl_layout::parse_layout(&format!(
        "(({K_GROUP},{}),{rows}):((1,{}),{K_GROUP})",
        k / K_GROUP,
        K_GROUP * rows
    ))
    .ok()?;
    let sw = if (k * rows) % 512 == 0 {
        tl_layout::Swizzle::new(3, 3, 3).ok()?
    } else {
        tl_layout::Swizzle::new(0, 0, 0).ok()?
    };
    Some(tl_layout::ComposedLayout::new(sw, 0, l))
}

/// The K-interleaved layout for a shared operand tile stored `[K, rows]`, when it applies:
/// 16-bit elements (8 of them are one 16-byte read) and K a multiple of 8.
pub fn k_interleaved_operand_layout(r: &Region) -> Option<tl_layout::ComposedLayout> {
    if r.buffer.dtype().bytes() != 2 {
        return None;
    }
    let shape = r.buffer.const_shape()?;
    let rank = shape.len();
    if rank < 2 {
        return None;
    }
    k_interleaved_layout(shape[rank - 2], shape[rank - 1])
}

/// The k elements a K-interleaved tile keeps together.
pub const K_GROUP: i64 = 8;

/// Whether a shared tile's layout is [`k_interleaved_layout`]: the contiguous k run it keeps.
pub fn k_interleaved_run(l: &tl_layout::ComposedLayout, shape: &[i64]) -> Option<i64> {
    let rank = shape.len();
    if rank < 2 {
        return None;
    }
    let want = k_interleaved_layout(shape[rank - 2], shape[rank - 1])?;
    (*l == want).then_some(K_GROUP)
}

impl Ctx<'_> {
    /// How a gemm operand tile's k elements are read (`k_first`: stored `[K, rows]`;
    /// `atom_rows`: the MFMA atom's rows of this operand).
    fn operand_read(&self, r: &Region, k_first: bool, atom_rows: i64) -> OperandRead {
        if r.buffer.scope() != Scope::Shared {
            return OperandRead::Runs(1);
        }
        if !k_first {
            return OperandRead::Runs(8);
        }
        let shape = r.buffer.const_shape().unwrap_or_default();
        let layout = self.layouts.smem.get(&r.buffer.id()).map(|(_, l)| l);
        if let Some(run) = layout.and_then(|l| k_interleaved_run(l, &shape)) {
            return OperandRead::Runs(run);
        }
        // gfx950 reads a K-strided tile transposed, 4 k of one row per lane: 16-bit elements,
        // rows in groups of 16 lanes, and 4 consecutive rows contiguous and 8-byte aligned.
        let rank = shape.len();
        let rows_ok = rank >= 2 && shape[rank - 1] % 4 == 0;
        let keeps = match layout {
            Some(l) if rank >= 2 => super::smem::keeps_runs(l, shape[rank - 2], shape[rank - 1], 4),
            _ => true,
        };
        let tr = self.target.amd().is_some_and(|a| a.lds_transpose_reads);
        if tr && r.buffer.dtype().bytes() == 2 && atom_rows % 16 == 0 && rows_ok && keeps {
            OperandRead::Transposed
        } else {
            OperandRead::Runs(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The K-interleaved layout is a bijection onto the tile's offsets, keeps each lane's 8 k
    /// of one row in one aligned 16-byte run (what a `ds_read_b128` needs), keeps the copy's
    /// runs of 4 k aligned (8-byte writes), and does not keep runs along the row dim (so
    /// no vector access may go that way: `smem::keeps_runs` says so).
    #[test]
    fn k_interleaved_layout_keeps_k_runs_and_is_a_bijection() {
        for (k, rows) in [(64, 256), (32, 128), (64, 64), (16, 16), (8, 24)] {
            let l = k_interleaved_layout(k, rows).expect("layout");
            let n = k * rows;
            let mut seen = vec![false; n as usize];
            for x in 0..rows {
                for kk in 0..k {
                    let o = l.call(kk + k * x);
                    assert!((0..n).contains(&o), "{k}x{rows}: ({kk}, {x}) -> {o}");
                    assert!(!seen[o as usize], "{k}x{rows}: offset {o} twice");
                    seen[o as usize] = true;
                }
                for g in 0..k / K_GROUP {
                    let first = l.call(g * K_GROUP + k * x);
                    assert_eq!(first % K_GROUP, 0, "{k}x{rows}: group {g} of row {x}");
                    for j in 1..K_GROUP {
                        assert_eq!(l.call(g * K_GROUP + j + k * x), first + j);
                    }
                }
            }
            // Viewed as a [K, rows] tile: runs along rows are not contiguous.
            assert!(!crate::gpu::smem::keeps_runs(&l, k, rows, 2));
            assert!(crate::gpu::smem::keeps_runs(&l, k, rows, 1));
            // Swizzled exactly when the tile is a whole number of 512-element blocks.
            assert_eq!(!l.swizzle.is_identity(), n % 512 == 0, "{k}x{rows}");
        }
        assert!(
            k_interleaved_layout(12, 64).is_none(),
            "K not a multiple of 8"
        );
    }

    /// The swizzle spreads the transposing copy's 8-byte writes: for one register column
    /// `j`, 8 threads with consecutive row groups (rows `8·g + j`) write 16-byte chunks at 8
    /// distinct positions modulo 128 bytes (without it, all at the same one).
    #[test]
    fn k_interleaved_swizzle_spreads_row_group_writes() {
        let (k, rows) = (64, 256);
        let l = k_interleaved_layout(k, rows).expect("layout");
        for j in 0..8 {
            let chunks: std::collections::BTreeSet<i64> = (0..8)
                .map(|xg| (l.call(k * (8 * xg + j)) * 2 / 16) % 8)
                .collect();
            assert_eq!(chunks.len(), 8, "column {j}: {chunks:?}");
        }
    }

    #[test]
    fn nvidia_swizzled_operand_tiles_keep_16_byte_runs() {
        for (rows, cols) in [(64, 64), (128, 32), (256, 64)] {
            let l = tl_layout::smem_swizzle_layout(rows, cols, 2).expect("layout");
            assert!(crate::gpu::smem::keeps_runs(&l.layout, rows, cols, 8));
        }
    }
}
