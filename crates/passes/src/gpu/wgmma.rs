//! Gemm on Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a), asked for with `.wgmma()`.
//!
//! Each warpgroup (128 threads) owns 64 accumulator rows and all `N` columns; per 32-byte step
//! of K (k16 of a 16-bit type, k32 of fp8) it issues one `m64nNk16` (`k32`) reading its operands straight from shared memory through
//! descriptors (no ldmatrix), or A from registers. Shared operands are tiles with rows of a
//! multiple of 64 elements, stored by the shared-memory layout pass as 64-column blocks under
//! the 128-byte swizzle — the canonical layout a descriptor with swizzle mode 128B describes,
//! read K-major ([M, K] A, [N, K] B) or MN-major ([K, M] A, [K, N] B: the transpose bits, with
//! the blocks a leading-byte offset apart). A in registers (attention's P) must hold the
//! accumulator layout of an earlier gemm over the same rows, which is the wgmma A fragment.
//! The accumulator of warp `w` of a warpgroup is rows `16w ..` in the mma.sync accumulator
//! layout (`mma::c_layout` with every warp along M), so everything downstream of the gemm is
//! unchanged. fp8 operands (e4m3, e5m2, either mix) must both be K-major shared tiles: PTX has
//! no transpose and no register-A form for them that matches an accumulator's layout.
//!
//! The issue is asynchronous; this lowering waits for it at the end of the op
//! (`wgmma.wait_group 0`), so the shared tiles are free and the accumulator readable after it —
//! except when an enclosing pipeline overlaps it with its next iteration
//! (`GemmSchedule::in_flight`): then it waits for all but the newest groups, and the pipeline
//! drains the rest after its loop.

use tl_ir::{
    DType, DiagKind, Diagnostic, Expr, GemmOp, Intrinsic, Scope, Span, Stmt, StmtKind, WgmmaOp,
};
use tl_target::Target;

use super::gemm::{extents2, index2};
use super::lower::Ctx;
use super::mma::c_layout;
use crate::tile_util::address_of;

/// Elements per row of a 16-bit wgmma operand tile: 128 bytes.
pub const ROW_ELEMS: i64 = 64;

/// Bytes per row of a wgmma operand tile (one 128-byte swizzle row).
const ROW_BYTES: i64 = 128;

/// Bytes of K one wgmma instruction reads: k16 of a 16-bit type, k32 of fp8.
const STEP_BYTES: i64 = 32;

/// The most k steps one `Wgmma` intrinsic may issue back to back (`KernelAttrs::wgmma_batch`
/// asks for up to this): more keep more descriptors live at once, and 4 already pushed a
/// 128-thread GEMM tile into spills.
pub const MAX_STEPS: i64 = 8;

/// Why this gemm cannot use wgmma on `target` with `threads` per block, or `None` if it can.
pub fn unsupported_because(g: &GemmOp, target: &Target, threads: i64) -> Option<String> {
    if !target.has_wgmma() {
        return Some(format!("wgmma needs sm_90a; the target is {target}"));
    }
    let (ab, bt) = (g.a.buffer.dtype(), g.b.buffer.dtype());
    let fp8 = ab.is_fp8() && bt.is_fp8();
    if !fp8 && (ab != bt || !matches!(ab, DType::F16 | DType::BF16)) {
        return Some(format!(
            "wgmma takes f16 or bf16 operands of one type, or fp8 ones (e4m3, e5m2) (A is {ab}, B is {bt})"
        ));
    }
    if g.c.buffer.dtype() != DType::F32 {
        return Some("wgmma accumulates in f32".into());
    }
    if g.b.buffer.scope() != Scope::Shared {
        return Some("B must be a shared-memory tile".into());
    }
    if fp8 && (g.a.buffer.scope() != Scope::Shared || g.trans_a || !g.trans_b) {
        return Some(
            "fp8 wgmma reads both operands K-major from shared memory: A as a shared [M, K] tile and B as a shared [N, K] tile with transpose_b".into(),
        );
    }
    let row_elems = ROW_BYTES / ab.bytes() as i64;
    let k_step = STEP_BYTES / ab.bytes() as i64;
    let a_regs = match g.a.buffer.scope() {
        Scope::Shared => false,
        Scope::Fragment => true,
        s => return Some(format!("A must be a shared tile or a fragment, not {s:?}")),
    };
    if a_regs && g.trans_a {
        return Some("an A fragment must be [M, K], not transposed".into());
    }
    // K-major operands (A as [M, K], B as [N, K] with transpose_b): 32-byte k slices of
    // 128-byte column blocks. MN-major ones (A as [K, M] with transpose_a, B as [K, N], as
    // attention's V; 16-bit only): 16-row k slices of 64-column blocks.
    let mut tiles = vec![("B", &g.b, g.trans_b)];
    if !a_regs {
        tiles.push(("A", &g.a, !g.trans_a));
    }
    for (name, r, k_major) in tiles {
        // Wider tiles are stored as 64-column blocks (`smem_swizzle_layout`), each block the
        // canonical layout; a 32-byte k slice never straddles two.
        let cols = r.buffer.const_shape().and_then(|s| s.last().copied());
        if !cols.is_some_and(|c| c > 0 && c % row_elems == 0) {
            return Some(format!(
                "the {name} tile `{}` must have rows of a multiple of {row_elems} elements (128 bytes)",
                r.buffer.name()
            ));
        }
        // A K-major sub-tile starts on a multiple of 8 rows (the descriptor's 8-row groups)
        // and of a k step. An MN-major one starts on a multiple of 64 columns, at any row —
        // even one known only at run time: its rows are k, one 128-byte swizzle row each, and
        // the hardware swizzles by the address bits, so a start 1-7 rows into an 8-row group
        // reads the stored tile as it is (`mn_major_row_start`; gpu-notes run 40).
        let rank = r.rank();
        let col_step = if k_major { k_step } else { ROW_ELEMS };
        let rows_ok = !k_major || r.offsets[rank - 2].as_int().is_some_and(|o| o % 8 == 0);
        let aligned = rank >= 2
            && rows_ok
            && r.offsets[rank - 1]
                .as_int()
                .is_some_and(|o| o % col_step == 0);
        if !aligned {
            let rows = if k_major {
                "multiples of 8 rows and"
            } else {
                "any row and constant multiples of"
            };
            return Some(format!(
                "the {name} region of `{}` must start at {rows} {col_step} columns",
                r.buffer.name()
            ));
        }
    }
    if !g.trans_b {
        let n = extents2(&g.b).map(|(_, n)| n).unwrap_or(0);
        if n % ROW_ELEMS != 0 {
            return Some(format!(
                "an MN-major B ([K, N]) needs N a multiple of {ROW_ELEMS} (N = {n}); store B as [N, K] and use transpose_b"
            ));
        }
    }
    let (Some((m, n)), Some((ar, ac))) = (extents2(&g.c), extents2(&g.a)) else {
        return Some("wgmma needs constant tile shapes".into());
    };
    let k = if g.trans_a { ar } else { ac };
    if threads % 128 != 0 || m != 64 * (threads / 128) {
        return Some(format!(
            "each warpgroup (128 threads) owns 64 rows: a {m}-row accumulator needs {} threads, the block has {threads}",
            (m / 64).max(1) * 128
        ));
    }
    if n % 8 != 0 || n > 256 || k % k_step != 0 {
        return Some(format!(
            "wgmma needs N a multiple of 8 up to 256 and K a multiple of {k_step} (N = {n}, K = {k})"
        ));
    }
    None
}

/// The register arrays a wgmma gemm works on while its groups are in flight (the accumulator,
/// and A when it is a fragment), as the operands of a wait that pins them: the address of each
/// one's first element, added to `pins` unless already there.
pub fn add_register_pins(pins: &mut Vec<Expr>, g: &GemmOp) {
    let mut arrays = vec![&g.c.buffer];
    if g.a.buffer.scope() == Scope::Fragment {
        arrays.push(&g.a.buffer);
    }
    for b in arrays {
        let first = address_of(b, vec![Expr::int(0); b.rank()]);
        if !pins.contains(&first) {
            pins.push(first);
        }
    }
}

/// [`unsupported_because`] as the diagnostic both layout inference and lowering report.
pub fn check(g: &GemmOp, target: &Target, threads: i64, span: Span) -> Result<(), Diagnostic> {
    match unsupported_because(g, target, threads) {
        None => Ok(()),
        Some(why) => Err(Diagnostic::new(DiagKind::Unsupported, span, why).help(
            "drop `.wgmma()` (the instruction override) to let the compiler choose the instruction",
        )),
    }
}

impl Ctx<'_> {
    pub fn lower_gemm_wgmma(&mut self, g: &GemmOp, span: Span) -> Result<Stmt, Diagnostic> {
        check(g, &self.target, self.threads, span)?;
        let acc = self.local_of(&g.c.buffer, span)?;
        let (m, n) = extents2(&g.c).ok_or_else(|| Diagnostic::internal("wgmma on a non-2-d C"))?;
        let (ar, ac) =
            extents2(&g.a).ok_or_else(|| Diagnostic::internal("wgmma on a non-2-d A"))?;
        let k = if g.trans_a { ar } else { ac };
        let ab = g.a.buffer.dtype();
        let warps = self.threads / 32;
        // A in registers must hold, per warp, the mma.sync A fragment of the warp's 16 rows:
        // the accumulator layout of an earlier gemm over the same rows.
        let a_regs = if g.a.buffer.scope() == Scope::Fragment {
            let fa = self.fragment_of(&g.a.buffer, span)?;
            let want = c_layout(m, k, warps, 1);
            if !fa.equivalent(&want) {
                return Err(Diagnostic::new(
                    DiagKind::LayoutConflict,
                    span,
                    format!(
                        "wgmma reads A from fragment `{}` ({}), which is not the warpgroup A operand layout ({})",
                        g.a.buffer.name(),
                        fa.to_cute(),
                        want.to_cute()
                    ),
                )
                .help("produce A with a gemm over the same rows (a wgmma accumulator), or copy it to shared memory"));
            }
            Some(self.local_of(&g.a.buffer, span)?)
        } else {
            None
        };
        let b_mn_major = !g.trans_b;
        // MN-major B: the distance between its 64-column blocks (a whole column block of the
        // stored tile, one stage of it when staged).
        let b_lbo = if b_mn_major {
            let rows =
                g.b.buffer
                    .const_shape()
                    .and_then(|s| s.len().checked_sub(2).map(|i| s[i]))
                    .ok_or_else(|| Diagnostic::internal("wgmma on a B of unknown shape"))?;
            rows * ROW_ELEMS * ab.bytes() as i64
        } else {
            16
        };
        let row0 = self.tid.floordiv(128) * 64;
        let k_step = STEP_BYTES / ab.bytes() as i64;
        // The A and B slices of k step `s`.
        let a_at = |s: i64| -> Expr {
            let k0 = Expr::int(k_step * s);
            match &a_regs {
                // The accumulator layout of [m, k] with one m16 atom per warp: k16 step `s` is
                // atoms 2s and 2s + 1, 8 values from 8·s.
                Some(regs) => address_of(regs, vec![Expr::int(8 * s)]),
                // MN-major A ([K, M]): the warpgroup's 64 rows are one 64-column block.
                None if g.trans_a => address_of(
                    &g.a.buffer,
                    mn_major_row_start(index2(&g.a, k0, row0.clone())),
                ),
                None => address_of(&g.a.buffer, index2(&g.a, row0.clone(), k0)),
            }
        };
        let b_at = |s: i64| -> Expr {
            let k0 = Expr::int(k_step * s);
            let idx = if b_mn_major {
                mn_major_row_start(index2(&g.b, k0, Expr::int(0)))
            } else {
                index2(&g.b, Expr::int(0), k0)
            };
            address_of(&g.b.buffer, idx)
        };
        // The k steps go out in runs of up to `wgmma_batch` per intrinsic (one `asm` statement
        // in CUDA, binding the accumulator registers once per run instead of once per step).
        let steps = k / k_step;
        let mut issue = vec![];
        let batch = i64::from(self.wgmma_batch).clamp(1, MAX_STEPS);
        for first in (0..steps).step_by(batch as usize) {
            let count = (steps - first).min(batch);
            let scale_d = i64::from(!(g.clear_accum && first == 0));
            let mut args = vec![
                address_of(&acc, vec![Expr::int(0)]),
                a_at(first),
                b_at(first),
                Expr::int(scale_d),
                Expr::int(b_lbo),
            ];
            for s in first + 1..first + count {
                args.push(a_at(s));
                args.push(b_at(s));
            }
            let call = Expr::call(
                Intrinsic::Wgmma(WgmmaOp {
                    n: n as u32,
                    ab,
                    b: g.b.buffer.dtype(),
                    a_regs: a_regs.is_some(),
                    a_mn_major: g.trans_a,
                    b_mn_major,
                    steps: count as u32,
                }),
                args,
                DType::Bool,
            );
            issue.push(Stmt::new(StmtKind::Eval(call), span));
        }
        // The registers the asynchronous wgmmas use stay in place from the fence to the wait.
        let mut regs = vec![address_of(&acc, vec![Expr::int(0)])];
        if let Some(a) = &a_regs {
            regs.push(address_of(a, vec![Expr::int(0)]));
        }
        // wgmma reads shared memory through the async proxy: every thread fences its own
        // earlier writes (plain stores or landed cp.async), then a barrier hands them to the
        // warpgroups — unless the enclosing pipeline already did both for these tiles.
        let fenced = g.schedule.operands_fenced;
        let mut out = vec![];
        if !fenced {
            out.push(self.eval(Intrinsic::FenceProxyAsync, vec![], span));
            out.push(self.sync(span));
        }
        out.extend([
            self.eval(Intrinsic::WgmmaFence, regs.clone(), span),
            Stmt::seq(issue, span),
            self.eval(Intrinsic::WgmmaCommit, vec![], span),
        ]);
        // The kernel's own `wg_wait` wins over the schedule; -1 leaves every group pending
        // for a later `wait_wgmma`.
        let wait = match g.wg_wait {
            None => Some(g.schedule.in_flight),
            Some(n) => u32::try_from(n).ok(),
        };
        if let Some(n) = wait {
            out.push(self.eval(Intrinsic::WgmmaWait { n, pinned: false }, regs, span));
        }
        Ok(Stmt::seq(out, span))
    }
}

/// The element whose address starts an MN-major operand slice at row `idx[rank - 2]` of a
/// 64-column block at `idx[rank - 1]`. A descriptor's start is a plain shared address, and
/// the slice's first row begins 128 bytes a row into the stored tile; under the 128-byte
/// swizzle that address holds the element of 16-byte chunk `row % 8` (chunk c of row r sits in
/// slot `c ^ (r % 8)`), so the start is the element at column `8·(row % 8)` of the row. Rows
/// on a multiple of 8 (every slice but a shifted one) keep column 0 and their index as it was.
fn mn_major_row_start(mut idx: Vec<Expr>) -> Vec<Expr> {
    let rank = idx.len();
    if rank < 2 {
        return idx;
    }
    let row = idx[rank - 2].clone();
    let phase = match row.as_int() {
        Some(r) => Expr::int(r.rem_euclid(8)),
        None => row.floormod(8),
    };
    if phase.as_int() != Some(0) {
        idx[rank - 1] = idx[rank - 1].clone() + phase * 8;
    }
    idx
}
