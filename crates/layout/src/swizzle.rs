//! XOR swizzles, composed (swizzled) layouts, and the standard shared-memory swizzle modes.
//!
//! `Swizzle<B,M,S>` maps an offset x to `x ^ ((x & yyy_mask) >> S)` where
//! `yyy_mask = (2^B - 1) << (M + max(0,S))`: B bits taken S positions above bit M are XORed
//! into the B bits starting at M (a negative S shifts the other way). It is an involution.
//! A [`ComposedLayout`] applies a swizzle after an offset and a layout,
//! `Sw ∘ offset ∘ L`, which is how CuTe (and TMA/wgmma hardware) describes swizzled shared
//! memory.

use crate::error::{LayoutError, Result};
use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use crate::ops::composition::composition;
use crate::ops::product::tile_to_shape;
use crate::ops::recast::{ratio, recast_layout};
use crate::tiler::Tiler;
use std::fmt;

/// CuTe's `Swizzle<B,M,S>` (printed `Sw<B,M,S>`). Construct with [`Swizzle::new`], which
/// enforces CuTe's `B >= 0`, `M >= 0`, `|S| >= B` (so the XORed bit ranges never overlap and
/// the map stays an involution) and keeps every bit below 63.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Swizzle {
    b: i32,
    m: i32,
    s: i32,
}

impl Swizzle {
    /// Validate and build `Sw<b,m,s>`.
    pub fn new(b: i32, m: i32, s: i32) -> Result<Swizzle> {
        let bad = |reason: &str| LayoutError::Swizzle {
            b,
            m,
            s,
            reason: reason.to_string(),
        };
        if b < 0 || m < 0 {
            return Err(bad("B and M must be >= 0"));
        }
        if s.unsigned_abs() < b.unsigned_abs() {
            return Err(bad("|S| must be >= B (otherwise the XOR ranges overlap)"));
        }
        let top = i64::from(m) + i64::from(s.unsigned_abs()) + i64::from(b);
        if top > 62 {
            return Err(bad("the swizzle touches bits above 62"));
        }
        Ok(Swizzle { b, m, s })
    }

    /// The identity swizzle `Sw<0,0,0>`.
    pub const fn identity() -> Swizzle {
        Swizzle { b: 0, m: 0, s: 0 }
    }

    /// Number of XORed bits.
    pub fn b(&self) -> i32 {
        self.b
    }

    /// Number of low bits kept unchanged (log2 of the unswizzled vector, in elements).
    pub fn m(&self) -> i32 {
        self.m
    }

    /// Shift between the source (yyy) and target (zzz) bits.
    pub fn s(&self) -> i32 {
        self.s
    }

    /// True when the swizzle changes nothing (B = 0).
    pub fn is_identity(&self) -> bool {
        self.b == 0
    }

    fn bit_mask(&self) -> i64 {
        (1i64 << self.b) - 1
    }

    /// The source bits `(2^B-1) << (M + max(0,S))`.
    pub fn yyy_mask(&self) -> i64 {
        self.bit_mask() << (self.m + self.s.max(0))
    }

    /// The target bits `(2^B-1) << (M - min(0,S))`.
    pub fn zzz_mask(&self) -> i64 {
        self.bit_mask() << (self.m - self.s.min(0))
    }

    /// `x ^ ((x & yyy_mask) >> S)` (left shift for negative S).
    pub fn apply(&self, x: i64) -> i64 {
        let y = x & self.yyy_mask();
        let moved = if self.s >= 0 {
            y >> self.s
        } else {
            y << (-self.s)
        };
        x ^ moved
    }

    /// The swizzle for elements `n` times wider (a power of two): `M - log2 n`. Fails when the
    /// swizzle permutes bits inside a new element (M < log2 n and B > 0), which a swizzle over
    /// the wider elements cannot express (CuTe silently drops those bits).
    pub fn upcast(&self, n: i64) -> Result<Swizzle> {
        let k = log2_exact(n)
            .ok_or_else(|| self.recast_err(format!("factor {n} is not a power of two")))?;
        let m = self.m - k;
        if m >= 0 {
            return Swizzle::new(self.b, m, self.s);
        }
        if self.b == 0 {
            return Swizzle::new(0, 0, self.s);
        }
        Err(self.recast_err(format!(
            "it permutes bits {}..{} inside one element {n} times wider",
            self.m,
            self.m + self.b
        )))
    }

    /// The swizzle for elements `n` times narrower (a power of two): `M + log2 n`.
    pub fn downcast(&self, n: i64) -> Result<Swizzle> {
        let k = log2_exact(n)
            .ok_or_else(|| self.recast_err(format!("factor {n} is not a power of two")))?;
        Swizzle::new(self.b, self.m + k, self.s)
    }

    /// Swizzle for `new_bits`-wide elements given one for `old_bits`-wide elements.
    pub fn recast(&self, old_bits: i64, new_bits: i64) -> Result<Swizzle> {
        let (num, den) = ratio(old_bits, new_bits)?;
        self.upcast(num)?.downcast(den)
    }

    fn recast_err(&self, reason: String) -> LayoutError {
        LayoutError::Recast {
            layout: self.to_string(),
            reason,
        }
    }

    /// NVIDIA 32-byte swizzle on byte offsets: `Sw<1,4,3>`.
    pub fn nv32b() -> Swizzle {
        NvSwizzle::B32.byte_swizzle()
    }

    /// NVIDIA 64-byte swizzle on byte offsets: `Sw<2,4,3>`.
    pub fn nv64b() -> Swizzle {
        NvSwizzle::B64.byte_swizzle()
    }

    /// NVIDIA 128-byte swizzle on byte offsets: `Sw<3,4,3>` (16-byte chunk c of row r goes to
    /// `c ^ (r % 8)`, repeating every 1024 bytes).
    pub fn nv128b() -> Swizzle {
        NvSwizzle::B128.byte_swizzle()
    }

    /// 32-byte swizzle on element offsets, e.g. `Sw<1,3,3>` for 2-byte elements.
    pub fn nv32b_for_elem_bytes(elem_bytes: i64) -> Result<Swizzle> {
        NvSwizzle::B32.swizzle_for_elem_bytes(elem_bytes)
    }

    /// 64-byte swizzle on element offsets, e.g. `Sw<2,3,3>` for 2-byte elements.
    pub fn nv64b_for_elem_bytes(elem_bytes: i64) -> Result<Swizzle> {
        NvSwizzle::B64.swizzle_for_elem_bytes(elem_bytes)
    }

    /// 128-byte swizzle on element offsets, e.g. `Sw<3,3,3>` for 2-byte elements.
    pub fn nv128b_for_elem_bytes(elem_bytes: i64) -> Result<Swizzle> {
        NvSwizzle::B128.swizzle_for_elem_bytes(elem_bytes)
    }
}

fn log2_exact(n: i64) -> Option<i32> {
    if n >= 1 && n & (n - 1) == 0 {
        Some(n.trailing_zeros() as i32)
    } else {
        None
    }
}

impl fmt::Display for Swizzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sw<{},{},{}>", self.b, self.m, self.s)
    }
}

/// `swizzle ∘ offset ∘ layout`: `f(i) = swizzle(offset + layout(i))`, printed as CuTe does:
/// `Sw<3,4,3> o 0 o (8,64):(64,1)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ComposedLayout {
    /// Applied last, to the offset index.
    pub swizzle: Swizzle,
    /// Added to the layout's value before swizzling.
    pub offset: i64,
    /// Applied first, to the coordinate.
    pub layout: Layout,
}

impl ComposedLayout {
    /// Build `swizzle ∘ offset ∘ layout`.
    pub fn new(swizzle: Swizzle, offset: i64, layout: Layout) -> ComposedLayout {
        ComposedLayout {
            swizzle,
            offset,
            layout,
        }
    }

    /// Evaluate at linear index `i` (saturating outside the domain, see [`Layout::call`]).
    pub fn call(&self, i: i64) -> i64 {
        self.swizzle
            .apply(self.offset.saturating_add(self.layout.call(i)))
    }

    /// Size of the domain (the inner layout's size).
    pub fn size(&self) -> i64 {
        self.layout.size()
    }

    /// `(Sw ∘ o ∘ L) ∘ B = Sw ∘ o ∘ (L ∘ B)`.
    pub fn compose(&self, tiler: impl Into<Tiler>) -> Result<ComposedLayout> {
        Ok(ComposedLayout::new(
            self.swizzle,
            self.offset,
            composition(&self.layout, tiler)?,
        ))
    }

    /// Tile the inner layout up to `target` (see [`tile_to_shape`]); the swizzle is unchanged,
    /// which is right when the block spans whole swizzle periods (as the smem atoms do).
    pub fn tile_to_shape(
        &self,
        target: &IntTuple,
        order: Option<&IntTuple>,
    ) -> Result<ComposedLayout> {
        Ok(ComposedLayout::new(
            self.swizzle,
            self.offset,
            tile_to_shape(&self.layout, target, order)?,
        ))
    }

    /// Recast swizzle, offset and layout from `old_bits` to `new_bits` elements.
    pub fn recast(&self, old_bits: i64, new_bits: i64) -> Result<ComposedLayout> {
        let (num, den) = ratio(old_bits, new_bits)?;
        if self.offset % num != 0 {
            return Err(LayoutError::Recast {
                layout: self.to_string(),
                reason: format!("offset {} is not a multiple of {num}", self.offset),
            });
        }
        let offset = (self.offset / num)
            .checked_mul(den)
            .ok_or_else(|| LayoutError::Overflow {
                what: "recast offset".into(),
            })?;
        Ok(ComposedLayout::new(
            self.swizzle.recast(old_bits, new_bits)?,
            offset,
            recast_layout(&self.layout, old_bits, new_bits)?,
        ))
    }
}

impl fmt::Display for ComposedLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} o {} o {}", self.swizzle, self.offset, self.layout)
    }
}

/// The NVIDIA shared-memory swizzle modes shared by TMA and wgmma.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NvSwizzle {
    /// No swizzle (wgmma "interleave").
    None,
    /// 32-byte swizzle, `Sw<1,4,3>` on bytes.
    B32,
    /// 64-byte swizzle, `Sw<2,4,3>` on bytes.
    B64,
    /// 128-byte swizzle, `Sw<3,4,3>` on bytes.
    B128,
}

impl NvSwizzle {
    /// Width of the swizzled row in bytes (16 for no swizzle: one unswizzled chunk).
    pub fn bytes(self) -> i64 {
        match self {
            NvSwizzle::None => 16,
            NvSwizzle::B32 => 32,
            NvSwizzle::B64 => 64,
            NvSwizzle::B128 => 128,
        }
    }

    /// `CUtensorMapSwizzle`: NONE=0, 32B=1, 64B=2, 128B=3.
    pub fn tensor_map_code(self) -> u32 {
        match self {
            NvSwizzle::None => 0,
            NvSwizzle::B32 => 1,
            NvSwizzle::B64 => 2,
            NvSwizzle::B128 => 3,
        }
    }

    /// The sm_90 wgmma shared-memory descriptor's `layout_type` (bits 62-63):
    /// 0 = interleave (none), 1 = 128B, 2 = 64B, 3 = 32B. Note the order differs from TMA's.
    pub fn wgmma_layout_type(self) -> u32 {
        match self {
            NvSwizzle::None => 0,
            NvSwizzle::B128 => 1,
            NvSwizzle::B64 => 2,
            NvSwizzle::B32 => 3,
        }
    }

    /// Inverse of [`NvSwizzle::tensor_map_code`].
    pub fn from_tensor_map_code(code: u32) -> Option<NvSwizzle> {
        [
            NvSwizzle::None,
            NvSwizzle::B32,
            NvSwizzle::B64,
            NvSwizzle::B128,
        ]
        .into_iter()
        .find(|m| m.tensor_map_code() == code)
    }

    /// Inverse of [`NvSwizzle::wgmma_layout_type`].
    pub fn from_wgmma_layout_type(code: u32) -> Option<NvSwizzle> {
        [
            NvSwizzle::None,
            NvSwizzle::B32,
            NvSwizzle::B64,
            NvSwizzle::B128,
        ]
        .into_iter()
        .find(|m| m.wgmma_layout_type() == code)
    }

    /// The swizzle on byte offsets: `Sw<log2(bytes/16),4,3>` (`Sw<0,4,3>` for none).
    pub fn byte_swizzle(self) -> Swizzle {
        let b = match self {
            NvSwizzle::None => 0,
            NvSwizzle::B32 => 1,
            NvSwizzle::B64 => 2,
            NvSwizzle::B128 => 3,
        };
        Swizzle { b, m: 4, s: 3 }
    }

    /// The swizzle on element offsets for elements of `elem_bytes` (a power of two <= 16).
    pub fn swizzle_for_elem_bytes(self, elem_bytes: i64) -> Result<Swizzle> {
        check_elem_bytes(elem_bytes)?;
        self.byte_swizzle().upcast(elem_bytes)
    }
}

pub(crate) fn check_elem_bytes(elem_bytes: i64) -> Result<()> {
    if !(1..=16).contains(&elem_bytes) || log2_exact(elem_bytes).is_none() {
        return Err(LayoutError::Unsupported(format!(
            "element size {elem_bytes} bytes: expected a power of two from 1 to 16"
        )));
    }
    Ok(())
}

/// AMD LDS swizzle for `ds_read_b128` on rows of `row_bytes`: the 16-byte chunk c of row r
/// goes to `c ^ (r % (row_bytes/16))`. As a swizzle on byte offsets that is
/// `Sw<k,4,k>` with `2^k = row_bytes/16` chunks per row; returned per element of
/// `elem_bytes`. `row_bytes/16` must be a power of two.
pub fn amd_ds_read_b128_swizzle(row_bytes: i64, elem_bytes: i64) -> Result<Swizzle> {
    check_elem_bytes(elem_bytes)?;
    let chunks = if row_bytes % 16 == 0 {
        row_bytes / 16
    } else {
        0
    };
    let k = log2_exact(chunks).ok_or_else(|| {
        LayoutError::Unsupported(format!(
            "ds_read_b128 swizzle needs rows of a power-of-two number of 16-byte chunks, got \
             {row_bytes} bytes"
        ))
    })?;
    Swizzle::new(k, 4, k)?.upcast(elem_bytes)
}

/// The ds_read_b128 chunk permutation written out: `chunk ^ (row % (row_bytes/16))`.
/// (Rows narrower than 16 bytes are left alone.)
pub fn amd_ds_read_b128_chunk(row: i64, chunk: i64, row_bytes: i64) -> i64 {
    let chunks = row_bytes / 16;
    if chunks < 1 {
        return chunk;
    }
    chunk ^ row.rem_euclid(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_layout;
    use proptest::prelude::*;

    #[test]
    fn validation() {
        assert!(Swizzle::new(3, 4, 3).is_ok());
        assert!(Swizzle::new(3, 4, -3).is_ok());
        assert!(Swizzle::new(3, 4, 2).is_err());
        assert!(Swizzle::new(1, 4, 0).is_err());
        assert!(Swizzle::new(0, 4, 0).is_ok());
        assert!(Swizzle::new(-1, 4, 3).is_err());
        assert!(Swizzle::new(10, 40, 20).is_err());
    }

    #[test]
    fn masks_and_apply() {
        let s = Swizzle::new(3, 4, 3).unwrap();
        assert_eq!(s.yyy_mask(), 0b111_0000000);
        assert_eq!(s.zzz_mask(), 0b111_0000);
        // Byte offset of chunk c in row r of a 128-byte-wide tile.
        for r in 0..16 {
            for c in 0..8 {
                assert_eq!(
                    s.apply(r * 128 + c * 16 + 5),
                    r * 128 + ((c ^ (r % 8)) * 16) + 5
                );
            }
        }
        let neg = Swizzle::new(2, 1, -3).unwrap();
        assert_eq!(neg.yyy_mask(), 0b110);
        assert_eq!(neg.zzz_mask(), 0b11_0000);
        assert_eq!(neg.apply(0b10), 0b1_0010);
    }

    #[test]
    fn standard_swizzles() {
        assert_eq!(Swizzle::nv128b().to_string(), "Sw<3,4,3>");
        assert_eq!(Swizzle::nv64b().to_string(), "Sw<2,4,3>");
        assert_eq!(Swizzle::nv32b().to_string(), "Sw<1,4,3>");
        assert_eq!(
            Swizzle::nv128b_for_elem_bytes(2).unwrap().to_string(),
            "Sw<3,3,3>"
        );
        assert_eq!(
            Swizzle::nv64b_for_elem_bytes(2).unwrap().to_string(),
            "Sw<2,3,3>"
        );
        assert_eq!(
            Swizzle::nv32b_for_elem_bytes(2).unwrap().to_string(),
            "Sw<1,3,3>"
        );
        assert_eq!(
            Swizzle::nv128b_for_elem_bytes(4).unwrap().to_string(),
            "Sw<3,2,3>"
        );
        assert_eq!(
            Swizzle::nv128b_for_elem_bytes(16).unwrap().to_string(),
            "Sw<3,0,3>"
        );
        assert!(Swizzle::nv128b_for_elem_bytes(3).is_err());
        assert!(Swizzle::nv128b_for_elem_bytes(32).is_err());
    }

    #[test]
    fn encodings() {
        use NvSwizzle::*;
        let tma: Vec<u32> = [None, B32, B64, B128]
            .iter()
            .map(|m| m.tensor_map_code())
            .collect();
        assert_eq!(tma, vec![0, 1, 2, 3]);
        let wg: Vec<u32> = [None, B32, B64, B128]
            .iter()
            .map(|m| m.wgmma_layout_type())
            .collect();
        assert_eq!(wg, vec![0, 3, 2, 1]);
        for m in [None, B32, B64, B128] {
            assert_eq!(
                NvSwizzle::from_tensor_map_code(m.tensor_map_code()),
                Some(m)
            );
            assert_eq!(
                NvSwizzle::from_wgmma_layout_type(m.wgmma_layout_type()),
                Some(m)
            );
        }
        assert_eq!(NvSwizzle::from_tensor_map_code(4), Option::None);
    }

    #[test]
    fn amd_lds() {
        // 128-byte rows (64 halves): 8 chunks, chunk ^ (row % 8) == Sw<3,4,3> on bytes.
        let s = amd_ds_read_b128_swizzle(128, 1).unwrap();
        assert_eq!(s.to_string(), "Sw<3,4,3>");
        assert_eq!(
            amd_ds_read_b128_swizzle(128, 2).unwrap().to_string(),
            "Sw<3,3,3>"
        );
        assert_eq!(
            amd_ds_read_b128_swizzle(64, 2).unwrap().to_string(),
            "Sw<2,3,2>"
        );
        for row_bytes in [16, 32, 64, 128, 256] {
            let s = amd_ds_read_b128_swizzle(row_bytes, 1).unwrap();
            for r in 0..20 {
                for c in 0..row_bytes / 16 {
                    let want = r * row_bytes + amd_ds_read_b128_chunk(r, c, row_bytes) * 16 + 3;
                    assert_eq!(
                        s.apply(r * row_bytes + c * 16 + 3),
                        want,
                        "{row_bytes} {r} {c}"
                    );
                }
            }
        }
        assert!(amd_ds_read_b128_swizzle(48, 2).is_err());
        assert_eq!(amd_ds_read_b128_chunk(3, 1, 8), 1);
    }

    #[test]
    fn composed() {
        let c = ComposedLayout::new(
            Swizzle::nv128b_for_elem_bytes(2).unwrap(),
            0,
            parse_layout("(8,64):(64,1)").unwrap(),
        );
        assert_eq!(c.to_string(), "Sw<3,3,3> o 0 o (8,64):(64,1)");
        // Element (r, col) of the 8x64 half tile.
        for r in 0..8 {
            for col in 0..64 {
                let want = r * 64 + (((col / 8) ^ r) * 8) + col % 8;
                assert_eq!(c.call(r + 8 * col), want);
            }
        }
        let bytes = c.recast(16, 8).unwrap();
        assert_eq!(bytes.to_string(), "Sw<3,4,3> o 0 o (8,128):(128,1)");
        assert_eq!(bytes.recast(8, 16).unwrap(), c);
        assert!(c.recast(16, 256).is_err());
        let t = c.compose(parse_layout("(8,8):(1,8)").unwrap()).unwrap();
        assert_eq!(t.to_string(), "Sw<3,3,3> o 0 o (8,8):(64,1)");
    }

    proptest! {
        #[test]
        fn swizzles_are_involutions(b in 0i32..4, m in 0i32..4, s in -6i32..7, x in 0i64..100_000) {
            if let Ok(sw) = Swizzle::new(b, m, s) {
                prop_assert_eq!(sw.apply(sw.apply(x)), x);
            }
        }

        #[test]
        fn swizzle_recast_round_trips(b in 0i32..4, m in 0i32..5, k in 0u32..4) {
            let sw = Swizzle::new(b, m, 3.max(b)).unwrap();
            let n = 1i64 << k;
            prop_assume!(b > 0 || m >= k as i32);
            let down = sw.downcast(n).unwrap();
            prop_assert_eq!(down.upcast(n).unwrap(), sw);
            if let Ok(up) = sw.upcast(n) {
                prop_assert_eq!(up.downcast(n).unwrap(), sw);
            }
        }
    }
}
