//! Element types and the rules for mixing them.

use std::fmt;

/// An element type. Float8 types are storage types: arithmetic on them happens after a cast to a
/// wider float, so the promotion rules send them to `f32`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    F8E4M3,
    F8E5M2,
}

pub use DType::*;

impl DType {
    pub const ALL: [DType; 15] = [
        Bool, I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64, F8E4M3, F8E5M2,
    ];

    /// Storage size in bytes (bool is stored as one byte).
    pub fn bytes(self) -> usize {
        match self {
            Bool | I8 | U8 | F8E4M3 | F8E5M2 => 1,
            I16 | U16 | F16 | BF16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 => 8,
        }
    }

    pub fn bits(self) -> usize {
        self.bytes() * 8
    }

    pub fn is_float(self) -> bool {
        matches!(self, F16 | BF16 | F32 | F64 | F8E4M3 | F8E5M2)
    }

    /// The 8-bit float formats (e4m3, e5m2).
    pub fn is_fp8(self) -> bool {
        matches!(self, F8E4M3 | F8E5M2)
    }

    /// Float types that only exist in memory; compute happens in f32.
    pub fn is_storage_only(self) -> bool {
        matches!(self, F8E4M3 | F8E5M2)
    }

    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, I8 | I16 | I32 | I64)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, U8 | U16 | U32 | U64)
    }

    pub fn is_bool(self) -> bool {
        self == Bool
    }

    /// The short name used in printed IR and diagnostics (`bf16`, `f32`, `e4m3`).
    pub fn name(self) -> &'static str {
        match self {
            Bool => "bool",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            U8 => "u8",
            U16 => "u16",
            U32 => "u32",
            U64 => "u64",
            F16 => "f16",
            BF16 => "bf16",
            F32 => "f32",
            F64 => "f64",
            F8E4M3 => "e4m3",
            F8E5M2 => "e5m2",
        }
    }

    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name() == s)
            .or(match s {
                "float8_e4m3" | "fp8_e4m3" => Some(F8E4M3),
                "float8_e5m2" | "fp8_e5m2" => Some(F8E5M2),
                "float32" => Some(F32),
                "float16" => Some(F16),
                "bfloat16" => Some(BF16),
                "float64" => Some(F64),
                "int32" => Some(I32),
                "int64" => Some(I64),
                _ => None,
            })
    }

    /// The type two operands are brought to before a binary operation.
    ///
    /// Floats beat integers; among floats the wider wins, and f16 with bf16 meets at f32 (neither
    /// holds the other's values); float8 computes in f32. Among integers the wider wins and, at
    /// equal width, unsigned wins (C's rule, so generated C and the IR agree).
    pub fn promote(a: DType, b: DType) -> DType {
        if a == b && !a.is_storage_only() {
            return a;
        }
        let fa = a.is_float();
        let fb = b.is_float();
        match (fa, fb) {
            (true, true) => {
                let (a, b) = (a.compute_type(), b.compute_type());
                if a == b {
                    a
                } else if a == F64 || b == F64 {
                    F64
                } else if (a == F16 && b == BF16) || (a == BF16 && b == F16) {
                    F32
                } else if a.bytes() >= b.bytes() {
                    a
                } else {
                    b
                }
            }
            (true, false) => a.compute_type(),
            (false, true) => b.compute_type(),
            (false, false) => {
                if a.is_bool() {
                    return b;
                }
                if b.is_bool() {
                    return a;
                }
                if a.bytes() != b.bytes() {
                    if a.bytes() > b.bytes() {
                        a
                    } else {
                        b
                    }
                } else if a.is_unsigned_int() {
                    a
                } else {
                    b
                }
            }
        }
    }

    /// The type arithmetic on this type happens in (float8 → f32, everything else itself).
    pub fn compute_type(self) -> DType {
        if self.is_storage_only() {
            F32
        } else {
            self
        }
    }

    /// The smallest and largest values of an integer type (None for floats and bool).
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            I8 => (i8::MIN as i128, i8::MAX as i128),
            I16 => (i16::MIN as i128, i16::MAX as i128),
            I32 => (i32::MIN as i128, i32::MAX as i128),
            I64 => (i64::MIN as i128, i64::MAX as i128),
            U8 => (0, u8::MAX as i128),
            U16 => (0, u16::MAX as i128),
            U32 => (0, u32::MAX as i128),
            U64 => (0, u64::MAX as i128),
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Round an f64 to the nearest value representable in `dtype` (the value a store of it would
/// hold). Integers truncate toward zero and wrap like C's conversions of in-range values.
pub fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        F32 => v as f32 as f64,
        F64 => v,
        F16 => f64_to_f16(v).to_f64(),
        BF16 => f64_to_bf16(v).to_f64(),
        F8E4M3 => crate::fp8::e4m3_to_f32(crate::fp8::f32_to_e4m3(f64_to_f32_odd(v))) as f64,
        F8E5M2 => crate::fp8::e5m2_to_f32(crate::fp8::f32_to_e5m2(f64_to_f32_odd(v))) as f64,
        Bool => {
            if v != 0.0 {
                1.0
            } else {
                0.0
            }
        }
        _ => {
            let t = v.trunc();
            match dtype.int_range() {
                Some((lo, hi)) => t.clamp(lo as f64, hi as f64),
                None => t,
            }
        }
    }
}

/// `v` as an f32 rounded toward zero, with the last bit set where that was inexact ("round to
/// odd"). Rounding this to nearest in any format of at most 22 significant bits (f16, bf16,
/// fp8) gives what rounding `v` itself would: the set bit keeps "just above (or below) a
/// halfway point" from becoming "exactly halfway", which rounding `v as f32` first can do.
/// (`half`'s own f64 conversions get this wrong: `bf16::from_f64(492544.0625)` is 491520,
/// though the value is above the halfway point 492544 and rounds to 493568.)
pub fn f64_to_f32_odd(v: f64) -> f32 {
    let f = v as f32;
    if v.is_nan() || f as f64 == v {
        return f;
    }
    let mut bits = f.to_bits();
    if (f as f64).abs() > v.abs() {
        // Rounded away from zero (to infinity, past the largest f32): one step back.
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// `v` rounded to the nearest bf16 (ties to even), in one rounding.
pub fn f64_to_bf16(v: f64) -> half::bf16 {
    half::bf16::from_f32(f64_to_f32_odd(v))
}

/// `v` rounded to the nearest f16 (ties to even), in one rounding.
pub fn f64_to_f16(v: f64) -> half::f16 {
    half::f16::from_f32(f64_to_f32_odd(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(BF16.bytes(), 2);
        assert_eq!(F8E4M3.bytes(), 1);
        assert_eq!(I64.bits(), 64);
    }

    #[test]
    fn promotion() {
        assert_eq!(DType::promote(F16, BF16), F32);
        assert_eq!(DType::promote(BF16, F32), F32);
        assert_eq!(DType::promote(I32, F16), F16);
        assert_eq!(DType::promote(I32, I64), I64);
        assert_eq!(DType::promote(I32, U32), U32);
        assert_eq!(DType::promote(F8E4M3, F8E4M3), F32);
        assert_eq!(DType::promote(Bool, I32), I32);
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }

    #[test]
    fn rounding() {
        assert_eq!(round_to(BF16, 1.0 + 1.0 / 512.0), 1.0);
        assert_eq!(round_to(I8, 300.0), 127.0);
        assert_eq!(round_to(I32, -2.7), -2.0);
    }

    /// The nearest bf16 / f16 by brute force: no neighbour of the result is nearer, and a
    /// tie goes to the even one. Includes the value `half::bf16::from_f64` rounds wrongly.
    fn nearest_16(v: f64, got_bits: u16, to_f64: fn(u16) -> f64) -> bool {
        let d = |b: u16| (to_f64(b) - v).abs();
        let here = d(got_bits);
        [got_bits.wrapping_add(1), got_bits.wrapping_sub(1)]
            .into_iter()
            .filter(|b| to_f64(*b).is_finite())
            .all(|b| d(b) > here || (d(b) == here && got_bits.is_multiple_of(2)))
    }

    #[test]
    fn sixteen_bit_rounding_is_one_rounding() {
        let bf = |b: u16| half::bf16::from_bits(b).to_f64();
        let h = |b: u16| half::f16::from_bits(b).to_f64();
        for v in [
            492544.07460339373,
            492544.0625,
            492544.0,
            1.0 + 1.0 / 256.0,
            -3.0e38,
            1e-42,
        ] {
            assert!(nearest_16(v, f64_to_bf16(v).to_bits(), bf), "bf16 of {v}");
        }
        assert_eq!(f64_to_bf16(492544.0625).to_f64(), 493568.0);
        assert_eq!(f64_to_bf16(492544.0).to_f64(), 491520.0); // a tie: to even
        assert!(f64_to_bf16(1e39).to_f64().is_infinite());
        assert!(f64_to_f16(70000.0).to_f64().is_infinite());
        proptest::proptest!(|(v in -6.0e4f64..6.0e4, e in -30i32..30)| {
            let x = v * 2f64.powi(e);
            proptest::prop_assert!(nearest_16(x, f64_to_bf16(x).to_bits(), bf), "bf16 of {}", x);
            if x.abs() < 65504.0 {
                proptest::prop_assert!(nearest_16(x, f64_to_f16(x).to_bits(), h), "f16 of {}", x);
            }
        });
    }
}
