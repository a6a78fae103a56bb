//! Copies by Hopper's tensor-memory accelerator (TMA): one thread asks for a whole tile, the
//! hardware fetches it (its address arithmetic, bounds — out-of-range elements land as zeros —
//! and the shared-memory swizzle included) and completes the bytes on an mbarrier that the
//! consumers wait on. The pipeline pass decides which copies go this way
//! ([`TmaTile::of`]) and issues them from one thread; lowering turns each into one
//! `TmaLoad` per swizzle panel.
//!
//! A tile the tensor cores read is stored in panels of `swizzle / elem` columns
//! (`tl_layout::smem_swizzle_layout`: 8-row atoms of one 128-, 64- or 32-byte row, tiled down
//! the rows, then across the columns), which is exactly what a TMA box of `rows × panel` with
//! that swizzle writes; a wider tile takes one box per panel.

use tl_ir::{Buffer, DType, Expr, Intrinsic, Region, Span, Stmt};
use tl_layout::{smem_swizzle_layout, ComposedLayout, NvSwizzle};
use tl_target::Target;

use super::lower::Ctx;
use crate::tile_util::{address_of, eval, nonunit_dims};

/// The most elements a TMA box spans in one dim.
const MAX_BOX: i64 = 256;

/// How a copy of a global tile into a shared tile goes by TMA.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaTile {
    /// The global tensor's dim the tile's rows run along (the columns run along its last).
    pub row_dim: usize,
    pub rows: i64,
    pub cols: i64,
    /// Columns per box (a swizzle panel, or the whole row without a swizzle).
    pub panel: i64,
    /// The swizzle in bytes (0, 32, 64, 128).
    pub swizzle: u32,
    /// Bytes the tile's boxes complete on the barrier (zeros past the tensor's edge included).
    pub bytes: i64,
}

impl TmaTile {
    /// The TMA plan for copying `src` (global) into `dst` (a whole shared tile with layout
    /// `layout`), when the hardware can do it: a 2-d tile whose columns run along the tensor's
    /// contiguous dim, the tensor's rows a multiple of 16 bytes apart (`row_bytes_aligned`:
    /// proved by the caller from the sizes the kernel variant assumes), boxes of at most 256
    /// per dim, and a shared layout that is one of the tensor-core swizzles (or plain
    /// row-major).
    pub fn of(
        src: &Region,
        dst: &Region,
        layout: Option<&ComposedLayout>,
        target: &Target,
        row_bytes_aligned: bool,
    ) -> Option<TmaTile> {
        let (sb, db) = (&src.buffer, &dst.buffer);
        if !target.has_tma()
            || sb.scope() != tl_ir::Scope::Global
            || db.scope() != tl_ir::Scope::Shared
            || sb.dtype() != db.dtype()
            || !row_bytes_aligned
            || sb.rank() > 5
        {
            return None;
        }
        let eb = sb.dtype().bytes() as i64;
        let dims = nonunit_dims(src);
        let (row_dim, col_dim) = match *dims.as_slice() {
            [r, c] => (r, c),
            // One row (a tile of per-row scales, say): the box's rows run along the dim
            // before the last, one deep.
            [c] if c >= 1 => (c - 1, c),
            _ => return None,
        };
        if col_dim + 1 != sb.rank() {
            return None;
        }
        let shape = db.const_shape()?;
        let rank = shape.len();
        if rank < 2 {
            return None;
        }
        let (rows, cols) = (shape[rank - 2], shape[rank - 1]);
        // The whole tile (of one pipeline stage: leading dims pick it).
        let whole = (0..rank - 2).all(|d| dst.extents[d].as_int() == Some(1))
            && (rank - 2..rank).all(|d| dst.offsets[d].as_int() == Some(0))
            && dst.extents[rank - 2].as_int() == Some(rows)
            && dst.extents[rank - 1].as_int() == Some(cols);
        if !whole
            || src.extents[row_dim].as_int() != Some(rows)
            || src.extents[col_dim].as_int() != Some(cols)
            || rows > MAX_BOX
        {
            return None;
        }
        let (swizzle, panel) = match layout {
            None => (0, cols),
            Some(l) => {
                let expected = smem_swizzle_layout(rows, cols, eb).ok()?;
                if expected.layout != *l {
                    return None;
                }
                match expected.mode {
                    NvSwizzle::None => (0, cols),
                    m => (m.bytes() as u32, m.bytes() / eb),
                }
            }
        };
        // Each stage of a staged tile starts where the previous one ends: whole 128-byte units
        // keep every stage as aligned as the buffer (codegen aligns a tile of 128 bytes or
        // more to 128).
        if panel > MAX_BOX
            || (panel * eb) % 16 != 0
            || cols % panel != 0
            || (rows * cols * eb) % 128 != 0
        {
            return None;
        }
        Some(TmaTile {
            row_dim,
            rows,
            cols,
            panel,
            swizzle,
            bytes: rows * cols * eb,
        })
    }
}

impl TmaTile {
    /// The boxes of a copy between the global tile `global` and the shared tile `shared`:
    /// the box extents (one per tensor dim) and, per swizzle panel, the shared address of the
    /// panel's first element and the box's coordinates (outermost first, i32).
    pub fn boxes(&self, global: &Region, shared: &Region) -> (Vec<u32>, Vec<(Expr, Vec<Expr>)>) {
        let rank = global.buffer.rank();
        let srank = shared.buffer.rank();
        let mut box_dims = vec![1u32; rank];
        box_dims[self.row_dim] = self.rows as u32;
        box_dims[rank - 1] = self.panel as u32;
        let panels = (0..self.cols / self.panel)
            .map(|p| {
                // The panel's first element: (row 0, column p·panel) of the tile.
                let mut sidx: Vec<Expr> = shared.offsets.clone();
                sidx[srank - 1] = sidx[srank - 1].clone() + p * self.panel;
                let coords = (0..rank)
                    .map(|d| {
                        let c = if d == rank - 1 {
                            global.offsets[d].clone() + p * self.panel
                        } else {
                            global.offsets[d].clone()
                        };
                        c.cast(DType::I32)
                    })
                    .collect();
                (address_of(&shared.buffer, sidx), coords)
            })
            .collect();
        (box_dims, panels)
    }
}

impl Ctx<'_> {
    /// A copy the pipeline marked for TMA: one `TmaLoad` per panel of the destination tile,
    /// completing on `barrier` (the pipeline issues it from one thread).
    pub fn lower_tma_copy(
        &mut self,
        src: &Region,
        dst: &Region,
        barrier: &Expr,
        span: Span,
    ) -> Option<Stmt> {
        let layout = self.layouts.smem.get(&dst.buffer.id()).map(|(_, l)| l);
        // The pipeline checked the rows (or that the runtime stages the tensor pitched).
        let t = TmaTile::of(src, dst, layout, &self.target, true)?;
        let (mut box_dims, mut panels) = t.boxes(src, dst);
        let tensor = address_of(&src.buffer, vec![Expr::int(0); src.buffer.rank()]);
        // A tile every block of the cluster loads alike: each loads `rows / size` of its rows
        // (whole 8-row swizzle atoms) and multicasts them to all.
        let multicast = self.cluster.as_ref().and_then(|(size, varying)| {
            let size = i64::from(*size);
            let shared = !src
                .offsets
                .iter()
                .any(|e| e.any(&mut |x| x.as_var().is_some_and(|v| varying.contains(&v.id()))));
            let slice = t.rows / size;
            (shared && t.rows % size == 0 && slice % 8 == 0).then_some((size, slice))
        });
        if let Some((size, slice)) = multicast {
            let rank = Expr::call(Intrinsic::ClusterCtaRank, vec![], DType::I32);
            box_dims[t.row_dim] = slice as u32;
            let srank = dst.buffer.rank();
            for (shared, coords) in &mut panels {
                coords[t.row_dim] = coords[t.row_dim].clone() + rank.clone() * slice;
                // The panel's row `rank·slice`: its rows are contiguous (whole 8-row atoms).
                if let Some((buf, mut idx)) = addressed_element(shared) {
                    idx[srank - 2] = idx[srank - 2].clone() + rank.clone() * slice;
                    *shared = address_of(&buf, idx);
                }
                coords.push(Expr::int((1 << size) - 1));
            }
        }
        let mut out = vec![];
        for (shared, coords) in panels {
            let mut args = vec![shared, tensor.clone(), barrier.clone()];
            args.extend(coords);
            out.push(eval(
                Intrinsic::TmaLoad {
                    box_dims: box_dims.clone(),
                    swizzle: t.swizzle,
                    multicast: multicast.is_some(),
                },
                args,
                span,
            ));
        }
        Some(Stmt::seq(out, span))
    }
}

/// Does the global tile `src` start 16 bytes into its tensor's rows (its column offset a
/// provable multiple of 16 bytes)? TMA starts a box nowhere else: a box 2 bytes off stopped
/// the kernel with an illegal instruction on an H200 (gpu-notes run 25a), and the simulator
/// reports it. Other tiles load by cp.async.
pub fn starts_on_16_bytes(src: &Region, an: &tl_ir::Analyzer) -> bool {
    let eb = src.buffer.dtype().bytes() as i64;
    let Some(col) = src.offsets.last() else {
        return false;
    };
    if eb == 0 || 16 % eb != 0 {
        return false;
    }
    an.simplify(&col.floormod(16 / eb)).as_int() == Some(0)
}

/// Is every row of `tensor` (its contiguous dim) a multiple of 16 bytes long, so that all its
/// strides are (TMA's requirement)?
pub fn row_bytes_aligned(tensor: &Buffer, an: &tl_ir::Analyzer) -> bool {
    let eb = tensor.dtype().bytes() as i64;
    let Some(last) = tensor.shape().last() else {
        return false;
    };
    if 16 % eb != 0 {
        return false;
    }
    let m = 16 / eb;
    match last.as_int() {
        Some(n) => n % m == 0,
        None => an.simplify(&last.floormod(m)).as_int() == Some(0),
    }
}

/// The element an `address_of` expression takes the address of.
fn addressed_element(e: &Expr) -> Option<(Buffer, Vec<Expr>)> {
    match e.kind() {
        tl_ir::ExprKind::Call(Intrinsic::AddressOf, args) => match args.first()?.kind() {
            tl_ir::ExprKind::Load(b, idx) => Some((b.clone(), idx.clone())),
            _ => None,
        },
        _ => None,
    }
}
