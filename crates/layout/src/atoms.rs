//! Thread-value (TV) layouts of tensor-core and ldmatrix atoms.
//!
//! A TV layout maps `(thread, value)` to the linear index `m + M*n` of an element of the atom's
//! `M x N` tile (column-major, as CuTe does). The layouts are CuTe's (`mma_traits_sm80.hpp`,
//! `mma_traits_sm90_gmma.hpp`, `copy_traits_sm75.hpp`) and the AMD MFMA register layouts from
//! the CDNA3/CDNA4 ISA; each is tested against the lane formulas in `layout-algebra.md`.
//!
//! Conventions (CuTe's): the A operand tile is `M x K`, B is `N x K`, C/D is `M x N`.
//! ldmatrix atoms are expressed in 16-bit elements (CuTe's bit layouts upcast by 16): the tile
//! is `8 x 8k` with m the element inside a 16-byte row and n the row (matrix j owns rows
//! `8j..8j+7`), so `m + 8n` is the row-major offset in the stacked 8x8 matrices.

use crate::error::{LayoutError, Result};
use crate::layout::Layout;
use crate::parse::parse_layout;

/// A named thread-value layout over an `M x N` tile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TvAtom {
    /// Lookup name, e.g. `mma_m16n8k16_a`.
    pub name: String,
    /// Extent of the tile's first (fastest) dimension.
    pub m: i64,
    /// Extent of the tile's second dimension.
    pub n: i64,
    /// What the two tile dimensions are, e.g. `("m", "k")` for an A operand.
    pub dims: (&'static str, &'static str),
    /// Threads taking part (32 for a warp, 128 for a warpgroup, 64 for an AMD wave).
    pub threads: i64,
    /// Values per thread.
    pub values: i64,
    /// `(thread, value) -> m + M*n`: for copy atoms, where each thread's registers land.
    pub tv: Layout,
    /// Copy atoms only: `(thread, value) -> m + M*n` of the source each thread addresses
    /// (threads that pass no address map with stride 0).
    pub src_tv: Option<Layout>,
}

impl TvAtom {
    fn new(
        name: &str,
        (m, n): (i64, i64),
        dims: (&'static str, &'static str),
        tv: &str,
        src: Option<&str>,
    ) -> Result<TvAtom> {
        let parse = |s: &str| {
            parse_layout(s).map_err(|e| LayoutError::Unsupported(format!("atom {name}: {e}")))
        };
        let tv = parse(tv)?;
        let src_tv = src.map(parse).transpose()?;
        let (threads, values) = match (tv.mode(0), tv.mode(1)) {
            (Some(t), Some(v)) if tv.rank() == 2 => (t.size(), v.size()),
            _ => {
                return Err(LayoutError::Unsupported(format!(
                    "atom {name}: TV layout is not rank 2"
                )))
            }
        };
        Ok(TvAtom {
            name: name.to_string(),
            m,
            n,
            dims,
            threads,
            values,
            tv,
            src_tv,
        })
    }

    /// The tile coordinate `(m, n)` that `(thread, value)` holds.
    pub fn element(&self, thread: i64, value: i64) -> Option<(i64, i64)> {
        if !(0..self.threads).contains(&thread) || !(0..self.values).contains(&value) {
            return None;
        }
        let idx = self.tv.call(thread + self.threads * value);
        Some((idx % self.m, idx / self.m))
    }
}

/// mma.sync m16n8k16 (f16/bf16 in, f16/f32 accumulate) A operand, 16x16 (M x K), 8 values.
pub fn mma_m16n8k16_a() -> TvAtom {
    atom(
        "mma_m16n8k16_a",
        (16, 16),
        ("m", "k"),
        "((4,8),(2,2,2)):((32,1),(16,8,128))",
        None,
    )
}

/// mma.sync m16n8k16 B operand, 8x16 (N x K), 4 values.
pub fn mma_m16n8k16_b() -> TvAtom {
    atom(
        "mma_m16n8k16_b",
        (8, 16),
        ("n", "k"),
        "((4,8),(2,2)):((16,1),(8,64))",
        None,
    )
}

/// mma.sync m16n8k16 C/D accumulator, 16x8 (M x N), 4 values.
pub fn mma_m16n8k16_c() -> TvAtom {
    atom(
        "mma_m16n8k16_c",
        (16, 8),
        ("m", "n"),
        "((4,8),(2,2)):((32,1),(16,8))",
        None,
    )
}

/// `ldmatrix.sync.aligned.m8n8.x{1,2,4}.b16`, optionally `.trans` (CuTe's SM75_U32x{1,2,4}_LDSM_N
/// and SM75_U16x{2,4,8}_LDSM_T), in 16-bit elements. `count` is 1, 2 or 4.
pub fn ldmatrix(count: i64, trans: bool) -> Result<TvAtom> {
    let src = match count {
        1 => "((8,4),8):((8,0),1)",
        2 => "((16,2),8):((8,0),1)",
        4 => "(32,8):(8,1)",
        _ => {
            return Err(LayoutError::Unsupported(format!(
                "ldmatrix .x{count}: expected x1, x2 or x4"
            )))
        }
    };
    let dst = match (count, trans) {
        (1, false) => "(32,2):(2,1)",
        (2, false) => "(32,(2,2)):(2,(1,64))",
        (4, false) => "(32,(2,4)):(2,(1,64))",
        (1, true) => "((4,8),2):((16,1),8)",
        (2, true) => "((4,8),(2,2)):((16,1),(8,64))",
        _ => "((4,8),(2,4)):((16,1),(8,64))",
    };
    let name = format!("ldmatrix_x{count}{}", if trans { "_trans" } else { "" });
    TvAtom::new(&name, (8, 8 * count), ("col", "row"), dst, Some(src))
}

fn check_wgmma_n(n: i64) -> Result<()> {
    if n % 8 != 0 || !(8..=256).contains(&n) {
        return Err(LayoutError::Unsupported(format!(
            "wgmma m64n{n}k16: N must be a multiple of 8 from 8 to 256"
        )));
    }
    Ok(())
}

/// wgmma m64nNk16 accumulator, 64 x N over a 128-thread warpgroup, N/2 values per thread.
pub fn wgmma_m64nnk16_c(n: i64) -> Result<TvAtom> {
    check_wgmma_n(n)?;
    let tv = format!("((4,8,4),(2,2,{})):((128,1,16),(64,8,512))", n / 8);
    TvAtom::new(
        &format!("wgmma_m64n{n}k16_c"),
        (64, n),
        ("m", "n"),
        &tv,
        None,
    )
}

/// wgmma m64nNk16 A operand from registers (16-bit types), 64 x 16 (M x K), 8 values.
/// Independent of N; `n` only names it.
pub fn wgmma_m64nnk16_a(n: i64) -> Result<TvAtom> {
    check_wgmma_n(n)?;
    let tv = "((4,8,4),(2,2,2)):((128,1,16),(64,8,512))";
    TvAtom::new(
        &format!("wgmma_m64n{n}k16_a"),
        (64, 16),
        ("m", "k"),
        tv,
        None,
    )
}

/// AMD `v_mfma_f32_16x16x16f16` (wave64) A operand, 16x16 (M x K): lane l, value i holds
/// `m = l%16, k = 4(l/16)+i`.
pub fn mfma_16x16x16f16_a() -> TvAtom {
    atom(
        "mfma_16x16x16f16_a",
        (16, 16),
        ("m", "k"),
        "((16,4),4):((1,64),16)",
        None,
    )
}

/// `v_mfma_f32_16x16x16f16` B operand, 16x16 (N x K): `n = l%16, k = 4(l/16)+i`.
pub fn mfma_16x16x16f16_b() -> TvAtom {
    atom(
        "mfma_16x16x16f16_b",
        (16, 16),
        ("n", "k"),
        "((16,4),4):((1,64),16)",
        None,
    )
}

/// `v_mfma_f32_16x16x16f16` C/D, 16x16 (M x N): `n = l%16, m = 4(l/16)+i`.
pub fn mfma_16x16x16f16_c() -> TvAtom {
    atom(
        "mfma_16x16x16f16_c",
        (16, 16),
        ("m", "n"),
        "((16,4),4):((16,4),1)",
        None,
    )
}

/// AMD `v_mfma_f32_16x16x32_bf16` (gfx950) A operand, 16x32 (M x K): `m = l%16, k = 8(l/16)+i`.
pub fn mfma_16x16x32_bf16_a() -> TvAtom {
    atom(
        "mfma_16x16x32_bf16_a",
        (16, 32),
        ("m", "k"),
        "((16,4),8):((1,128),16)",
        None,
    )
}

/// `v_mfma_f32_16x16x32_bf16` B operand, 16x32 (N x K): `n = l%16, k = 8(l/16)+i`.
pub fn mfma_16x16x32_bf16_b() -> TvAtom {
    atom(
        "mfma_16x16x32_bf16_b",
        (16, 32),
        ("n", "k"),
        "((16,4),8):((1,128),16)",
        None,
    )
}

/// `v_mfma_f32_16x16x32_bf16` C/D, 16x16 (M x N): as for 16x16x16.
pub fn mfma_16x16x32_bf16_c() -> TvAtom {
    atom(
        "mfma_16x16x32_bf16_c",
        (16, 16),
        ("m", "n"),
        "((16,4),4):((16,4),1)",
        None,
    )
}

/// Built-in atoms are literals checked by the tests; a failure here is a bug in this file,
/// reported as an atom with an empty name rather than a panic.
fn atom(
    name: &str,
    mn: (i64, i64),
    dims: (&'static str, &'static str),
    tv: &str,
    src: Option<&str>,
) -> TvAtom {
    TvAtom::new(name, mn, dims, tv, src).unwrap_or_else(|_| TvAtom {
        name: String::new(),
        m: 1,
        n: 1,
        dims,
        threads: 1,
        values: 1,
        tv: Layout::raw(crate::IntTuple::Int(1), crate::IntTuple::Int(0)),
        src_tv: None,
    })
}

/// The names [`atom_by_name`] understands (N in wgmma names may be any multiple of 8 <= 256).
pub const ATOM_NAMES: &[&str] = &[
    "mma_m16n8k16_a",
    "mma_m16n8k16_b",
    "mma_m16n8k16_c",
    "ldmatrix_x1",
    "ldmatrix_x2",
    "ldmatrix_x4",
    "ldmatrix_x1_trans",
    "ldmatrix_x2_trans",
    "ldmatrix_x4_trans",
    "wgmma_m64n<N>k16_a",
    "wgmma_m64n<N>k16_c",
    "mfma_16x16x16f16_a",
    "mfma_16x16x16f16_b",
    "mfma_16x16x16f16_c",
    "mfma_16x16x32_bf16_a",
    "mfma_16x16x32_bf16_b",
    "mfma_16x16x32_bf16_c",
];

/// Look an atom up by name (see [`ATOM_NAMES`]).
pub fn atom_by_name(name: &str) -> Result<TvAtom> {
    let unknown = || LayoutError::UnknownAtom {
        name: name.to_string(),
        expected: ATOM_NAMES.join(", "),
    };
    match name {
        "mma_m16n8k16_a" => return Ok(mma_m16n8k16_a()),
        "mma_m16n8k16_b" => return Ok(mma_m16n8k16_b()),
        "mma_m16n8k16_c" => return Ok(mma_m16n8k16_c()),
        "mfma_16x16x16f16_a" => return Ok(mfma_16x16x16f16_a()),
        "mfma_16x16x16f16_b" => return Ok(mfma_16x16x16f16_b()),
        "mfma_16x16x16f16_c" => return Ok(mfma_16x16x16f16_c()),
        "mfma_16x16x32_bf16_a" => return Ok(mfma_16x16x32_bf16_a()),
        "mfma_16x16x32_bf16_b" => return Ok(mfma_16x16x32_bf16_b()),
        "mfma_16x16x32_bf16_c" => return Ok(mfma_16x16x32_bf16_c()),
        _ => {}
    }
    if let Some(rest) = name.strip_prefix("ldmatrix_x") {
        let (count, trans) = match rest.strip_suffix("_trans") {
            Some(c) => (c, true),
            None => (rest, false),
        };
        return match count {
            "1" | "2" | "4" => ldmatrix(count.parse().map_err(|_| unknown())?, trans),
            _ => Err(unknown()),
        };
    }
    if let Some(rest) = name.strip_prefix("wgmma_m64n") {
        let (n, which) = if let Some(n) = rest.strip_suffix("k16_c") {
            (n, 'c')
        } else if let Some(n) = rest.strip_suffix("k16_a") {
            (n, 'a')
        } else {
            return Err(unknown());
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.len() > 4 {
            return Err(unknown());
        }
        let n: i64 = n.parse().map_err(|_| unknown())?;
        return if which == 'c' {
            wgmma_m64nnk16_c(n)
        } else {
            wgmma_m64nnk16_a(n)
        };
    }
    Err(unknown())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every (thread, value) maps to the formula's element, and the atom covers its tile
    /// exactly once.
    fn check(atom: &TvAtom, f: impl Fn(i64, i64) -> (i64, i64)) {
        assert!(!atom.name.is_empty());
        let mut seen = BTreeSet::new();
        for l in 0..atom.threads {
            for i in 0..atom.values {
                let want = f(l, i);
                assert_eq!(
                    atom.element(l, i),
                    Some(want),
                    "{} lane {l} value {i}",
                    atom.name
                );
                seen.insert(want);
            }
        }
        assert_eq!(
            seen.len() as i64,
            atom.m * atom.n,
            "{} must cover its tile",
            atom.name
        );
        assert_eq!(atom.threads * atom.values, atom.m * atom.n);
    }

    #[test]
    fn mma_m16n8k16_formulas() {
        let (g, t) = (|l: i64| l >> 2, |l: i64| l & 3);
        // A: row = g + 8*((i>>1)&1), col = 2t + (i&1) + 8*(i>>2).
        check(&mma_m16n8k16_a(), |l, i| {
            (g(l) + 8 * ((i >> 1) & 1), 2 * t(l) + (i & 1) + 8 * (i >> 2))
        });
        // B (N x K): k = 2t + (i&1) + 8*(i>>1), n = g.
        check(&mma_m16n8k16_b(), |l, i| {
            (g(l), 2 * t(l) + (i & 1) + 8 * (i >> 1))
        });
        // C: row = g + 8*(i>>1), col = 2t + (i&1).
        check(&mma_m16n8k16_c(), |l, i| {
            (g(l) + 8 * (i >> 1), 2 * t(l) + (i & 1))
        });
    }

    #[test]
    fn wgmma_formulas() {
        for n in (8..=256).step_by(8) {
            let c = wgmma_m64nnk16_c(n).unwrap();
            assert_eq!((c.threads, c.values), (128, n / 2));
            // row = 16w + g + 8*((i>>1)&1), col = 8*(i>>2) + 2t + (i&1).
            check(&c, |l, i| {
                let (w, g, t) = (l / 32, (l % 32) >> 2, l & 3);
                (
                    16 * w + g + 8 * ((i >> 1) & 1),
                    8 * (i >> 2) + 2 * t + (i & 1),
                )
            });
        }
        // Register A (64x16): the m16n8k16 A pattern, one 16-row slab per warp.
        let a = wgmma_m64nnk16_a(64).unwrap();
        check(&a, |l, i| {
            let (w, g, t) = (l / 32, (l % 32) >> 2, l & 3);
            (
                16 * w + g + 8 * ((i >> 1) & 1),
                2 * t + (i & 1) + 8 * (i >> 2),
            )
        });
        assert!(wgmma_m64nnk16_c(12).is_err());
        assert!(wgmma_m64nnk16_c(264).is_err());
        assert!(wgmma_m64nnk16_c(0).is_err());
    }

    #[test]
    fn mfma_formulas() {
        check(&mfma_16x16x16f16_a(), |l, i| (l % 16, 4 * (l / 16) + i));
        check(&mfma_16x16x16f16_b(), |l, i| (l % 16, 4 * (l / 16) + i));
        check(&mfma_16x16x16f16_c(), |l, i| (4 * (l / 16) + i, l % 16));
        check(&mfma_16x16x32_bf16_a(), |l, i| (l % 16, 8 * (l / 16) + i));
        check(&mfma_16x16x32_bf16_b(), |l, i| (l % 16, 8 * (l / 16) + i));
        check(&mfma_16x16x32_bf16_c(), |l, i| (4 * (l / 16) + i, l % 16));
    }

    #[test]
    fn ldmatrix_formulas() {
        for count in [1, 2, 4] {
            // Register j of lane l holds row l/4, columns 2(l%4), 2(l%4)+1 of matrix j:
            // tile (m, n) = (column, 8j + row).
            let a = ldmatrix(count, false).unwrap();
            assert_eq!((a.threads, a.values), (32, 2 * count));
            check(&a, |l, v| (2 * (l % 4) + (v & 1), 8 * (v >> 1) + l / 4));
            // .trans: the same registers hold the transposed matrix: row 2(l%4)+(v&1), col l/4.
            let t = ldmatrix(count, true).unwrap();
            check(&t, |l, v| (l / 4, 8 * (v >> 1) + 2 * (l % 4) + (v & 1)));
            // Source: lanes 8j..8j+7 give the row addresses of matrix j (8 elements each);
            // other lanes' addresses are ignored (stride 0 onto the lanes that count).
            let src = a.src_tv.clone().unwrap();
            assert_eq!(src, t.src_tv.clone().unwrap());
            for l in 0..8 * count {
                for e in 0..8 {
                    assert_eq!(src.call(l + 32 * e), 8 * l + e, "x{count} lane {l}");
                }
            }
        }
        assert!(ldmatrix(3, false).is_err());
    }

    #[test]
    fn ldmatrix_matches_cute_bit_layouts() {
        use crate::ops::coalesce::coalesce_by;
        use crate::ops::recast::upcast;
        use crate::IntTuple;
        // CuTe's layouts are in bits; upcast by 16 and coalesce each mode's sub-modes.
        let cases = [
            ("ldmatrix_x1", "(32,32):(32,1)"),
            ("ldmatrix_x2", "(32,(32,2)):(32,(1,1024))"),
            ("ldmatrix_x4", "(32,(32,4)):(32,(1,1024))"),
            ("ldmatrix_x1_trans", "((4,8),(16,2)):((256,16),(1,128))"),
            (
                "ldmatrix_x2_trans",
                "((4,8),(16,2,2)):((256,16),(1,128,1024))",
            ),
            (
                "ldmatrix_x4_trans",
                "((4,8),(16,2,4)):((256,16),(1,128,1024))",
            ),
        ];
        let profile = IntTuple::from([1, 1]);
        for (name, bits) in cases {
            let atom = atom_by_name(name).unwrap();
            let up = upcast(&parse_layout(bits).unwrap(), 16).unwrap();
            let a = coalesce_by(&up, &profile).unwrap();
            let b = coalesce_by(&atom.tv, &profile).unwrap();
            assert_eq!(a, b, "{name}");
            assert_eq!(up.values(), atom.tv.values(), "{name}");
        }
        let src_bits = [
            ("ldmatrix_x1", "((8,4),128):((128,0),1)"),
            ("ldmatrix_x2", "((16,2),128):((128,0),1)"),
            ("ldmatrix_x4", "(32,128):(128,1)"),
        ];
        for (name, bits) in src_bits {
            let up = upcast(&parse_layout(bits).unwrap(), 16).unwrap();
            assert_eq!(Some(up), atom_by_name(name).unwrap().src_tv, "{name}");
        }
    }

    #[test]
    fn lookup() {
        for name in ATOM_NAMES.iter().filter(|n| !n.contains('<')) {
            assert_eq!(atom_by_name(name).unwrap().name, *name);
        }
        assert_eq!(
            atom_by_name("wgmma_m64n64k16_c").unwrap().tv.to_string(),
            "((4,8,4),(2,2,8)):((128,1,16),(64,8,512))"
        );
        assert_eq!(atom_by_name("wgmma_m64n256k16_a").unwrap().m, 64);
        assert_eq!(
            atom_by_name("wgmma_m64n8k16_c").unwrap().tv.to_string(),
            "((4,8,4),(2,2,1)):((128,1,16),(64,8,512))"
        );
        for bad in [
            "",
            "mma",
            "ldmatrix_x3",
            "ldmatrix_x4_t",
            "wgmma_m64nk16_c",
            "wgmma_m64n99999999999k16_c",
            "wgmma_m64n-8k16_c",
            "wgmma_m64n12k16_c",
        ] {
            assert!(atom_by_name(bad).is_err(), "{bad}");
        }
        let e = atom_by_name("mma_m16n8k8_a").unwrap_err().to_string();
        assert!(e.contains("mma_m16n8k16_a"), "{e}");
    }
}
