//! Choosing the swizzled shared-memory layout of a row-major tile, as CuTe/TileLang do.

use crate::error::{cmul, LayoutError, Result};
use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use crate::swizzle::{check_elem_bytes, ComposedLayout, NvSwizzle};

/// A shared-memory layout together with the swizzle mode it uses, so that TMA descriptors
/// ([`NvSwizzle::tensor_map_code`]) and wgmma descriptors ([`NvSwizzle::wgmma_layout_type`])
/// can be read off the same decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmemLayout {
    /// The swizzle mode chosen.
    pub mode: NvSwizzle,
    /// `(row, col) -> element offset` in shared memory (a rank-2 layout over `(rows, cols)`).
    pub layout: ComposedLayout,
}

/// The swizzled layout for a row-major `rows x cols` tile of `elem_bytes`-byte elements
/// (K-major operand tiles): the widest of 128B/64B/32B whose width divides the row's bytes
/// (the row must be at least that wide), with 8 rows per swizzle atom. The atom
/// `Sw<b,m,3> o 0 o (8, W/e):(W/e, 1)` is tiled over the tile down the rows first, then across
/// (CuTe's `tile_to_shape` with the GMMA K-major atoms; TileLang's full/half/quarter-bank
/// swizzle layouts give the same offsets). When no swizzle fits (row narrower than 32 bytes
/// or not a multiple of it, or rows not a multiple of 8) the plain row-major layout is
/// returned with [`NvSwizzle::None`].
pub fn smem_swizzle_layout(rows: i64, cols: i64, elem_bytes: i64) -> Result<SmemLayout> {
    check_elem_bytes(elem_bytes)?;
    if rows < 1 || cols < 1 {
        return Err(LayoutError::Unsupported(format!(
            "tile shape ({rows},{cols}) must be positive"
        )));
    }
    let row_bytes = cmul(cols, elem_bytes, "the row width in bytes")?;
    let mode = [NvSwizzle::B128, NvSwizzle::B64, NvSwizzle::B32]
        .into_iter()
        .find(|m| rows % 8 == 0 && row_bytes >= m.bytes() && row_bytes % m.bytes() == 0)
        .unwrap_or(NvSwizzle::None);
    let swizzle = mode.swizzle_for_elem_bytes(elem_bytes)?;
    let tile = IntTuple::flat(&[rows, cols]);
    let layout = if mode == NvSwizzle::None {
        ComposedLayout::new(swizzle, 0, Layout::row_major(tile)?)
    } else {
        let w = mode.bytes() / elem_bytes;
        let atom = Layout::from_flat(&[8, w], &[w, 1])?;
        ComposedLayout::new(swizzle, 0, atom).tile_to_shape(&tile, None)?
    };
    Ok(SmemLayout { mode, layout })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn offset(l: &SmemLayout, r: i64, c: i64, rows: i64) -> i64 {
        l.layout.call(r + rows * c)
    }

    #[test]
    fn choices() {
        let s = smem_swizzle_layout(128, 64, 2).unwrap();
        assert_eq!(s.mode, NvSwizzle::B128);
        assert_eq!(
            s.layout.to_string(),
            "Sw<3,3,3> o 0 o ((8,16),(64,1)):((64,512),(1,0))"
        );
        let s = smem_swizzle_layout(64, 32, 2).unwrap();
        assert_eq!(s.mode, NvSwizzle::B64);
        assert_eq!(
            s.layout.to_string(),
            "Sw<2,3,3> o 0 o ((8,8),(32,1)):((32,256),(1,0))"
        );
        assert_eq!(smem_swizzle_layout(64, 16, 2).unwrap().mode, NvSwizzle::B32);
        assert_eq!(smem_swizzle_layout(64, 8, 2).unwrap().mode, NvSwizzle::None);
        assert_eq!(
            smem_swizzle_layout(64, 8, 2).unwrap().layout.to_string(),
            "Sw<0,3,3> o 0 o (64,8):(8,1)"
        );
        // 96 bytes: not a multiple of 128 or 64, but of 32.
        assert_eq!(smem_swizzle_layout(64, 48, 2).unwrap().mode, NvSwizzle::B32);
        // 256-byte rows use 128B with two atoms across.
        let s = smem_swizzle_layout(16, 128, 2).unwrap();
        assert_eq!(s.mode, NvSwizzle::B128);
        assert_eq!(
            s.layout.to_string(),
            "Sw<3,3,3> o 0 o ((8,2),(64,2)):((64,512),(1,1024))"
        );
        assert_eq!(
            smem_swizzle_layout(12, 64, 2).unwrap().mode,
            NvSwizzle::None
        );
        assert_eq!(
            smem_swizzle_layout(64, 32, 4).unwrap().mode,
            NvSwizzle::B128
        );
        assert!(smem_swizzle_layout(64, 32, 3).is_err());
        assert!(smem_swizzle_layout(0, 32, 2).is_err());
    }

    #[test]
    fn bijective_and_xor_pattern() {
        for (rows, cols, e) in [
            (128, 64, 2),
            (64, 32, 2),
            (32, 16, 2),
            (16, 128, 2),
            (64, 32, 4),
            (32, 128, 1),
        ] {
            let s = smem_swizzle_layout(rows, cols, e).unwrap();
            let w = s.mode.bytes() / e; // elements per swizzle row
            let v: BTreeSet<i64> = (0..rows * cols).map(|i| s.layout.call(i)).collect();
            assert_eq!(v.len() as i64, rows * cols);
            assert_eq!(*v.iter().next_back().unwrap(), rows * cols - 1);
            let chunk = 16 / e; // elements per 16-byte chunk
            let period = s.mode.bytes() / 16; // chunks per swizzle row
                                              // Inside a swizzle row, 16-byte chunk k of row r lands at chunk k ^ y where y is
                                              // the top log2(period) bits of r % 8 (the yyy bits of Sw<b,4,3> on bytes).
            let shift = 3 - period.trailing_zeros() as i64;
            for r in 0..rows {
                for c in 0..cols {
                    let o = offset(&s, r, c, rows);
                    let within = c % w;
                    assert_eq!(o % chunk, within % chunk);
                    let want = (within / chunk) ^ ((r % 8) >> shift);
                    assert_eq!((o % w) / chunk, want, "{rows}x{cols}x{e} ({r},{c})");
                }
            }
        }
    }
}
