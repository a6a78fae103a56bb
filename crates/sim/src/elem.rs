//! Elements in memory: decoding bytes of any dtype into the interpreter's [`Value`] and encoding
//! values back.
//!
//! Unlike the runtime's f64-based `dtype_io`, integers stay exact (64-bit values do not fit an
//! f64). Narrow floats are bit patterns in memory and widen to f32 values on load; a store rounds
//! to nearest even, after rounding to f32 first, exactly as the generated `tl_f32_to_bf16(float)`
//! does.

use tl_ir::eval::{wrap_int, Value};
use tl_ir::{fp8, DType};

/// Decode one element from `b` (which holds at least `dtype.bytes()` bytes).
pub fn decode(b: &[u8], dtype: DType) -> Value {
    let mut w = [0u8; 8];
    let n = dtype.bytes().min(b.len());
    w[..n].copy_from_slice(&b[..n]);
    let u = u64::from_le_bytes(w);
    match dtype {
        DType::Bool => Value::Bool(u & 0xff != 0),
        DType::I8 => Value::Int(u as u8 as i8 as i64),
        DType::I16 => Value::Int(u as u16 as i16 as i64),
        DType::I32 => Value::Int(u as u32 as i32 as i64),
        DType::I64 | DType::U64 => Value::Int(u as i64),
        DType::U8 => Value::Int(u as u8 as i64),
        DType::U16 => Value::Int(u as u16 as i64),
        DType::U32 => Value::Int(u as u32 as i64),
        DType::F16 => Value::Float(half::f16::from_bits(u as u16).to_f64()),
        DType::BF16 => Value::Float(half::bf16::from_bits(u as u16).to_f64()),
        DType::F32 => Value::Float(f32::from_bits(u as u32) as f64),
        DType::F64 => Value::Float(f64::from_bits(u)),
        DType::F8E4M3 => Value::Float(fp8::e4m3_to_f32(u as u8) as f64),
        DType::F8E5M2 => Value::Float(fp8::e5m2_to_f32(u as u8) as f64),
    }
}

/// The storage bits of `v` as an element of `dtype` (little-endian in the low bytes).
pub fn encode_bits(v: Value, dtype: DType) -> u64 {
    match dtype {
        DType::Bool => v.truthy() as u64,
        d if d.is_int() => {
            let i = match v {
                Value::Float(f) => tl_ir::dtype::round_to(d, f) as i64,
                other => other.as_i64(),
            };
            wrap_int(i as i128, d) as u64
        }
        DType::F32 => (v.as_f64() as f32).to_bits() as u64,
        DType::F64 => v.as_f64().to_bits(),
        DType::F16 => half::f16::from_f32(v.as_f64() as f32).to_bits() as u64,
        DType::BF16 => half::bf16::from_f32(v.as_f64() as f32).to_bits() as u64,
        DType::F8E4M3 => fp8::f32_to_e4m3(v.as_f64() as f32) as u64,
        DType::F8E5M2 => fp8::f32_to_e5m2(v.as_f64() as f32) as u64,
        _ => 0,
    }
}

/// Encode `v` into `out` (exactly `dtype.bytes()` bytes long).
pub fn encode(v: Value, dtype: DType, out: &mut [u8]) {
    let bits = encode_bits(v, dtype).to_le_bytes();
    let n = dtype.bytes().min(out.len());
    out[..n].copy_from_slice(&bits[..n]);
}

/// The bytes of `v` as an element of `dtype`, in a fixed array (for callers that check the
/// destination before writing).
pub fn encode_array(v: Value, dtype: DType) -> [u8; 8] {
    encode_bits(v, dtype).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_dtype() {
        for dt in DType::ALL {
            let mut b = [0u8; 8];
            let v = if dt.is_float() {
                Value::Float(-3.0)
            } else if dt.is_bool() {
                Value::Bool(true)
            } else if dt.is_unsigned_int() {
                Value::Int(200)
            } else {
                Value::Int(-100)
            };
            encode(v, dt, &mut b);
            assert_eq!(decode(&b, dt), v, "{dt}");
        }
    }

    #[test]
    fn sixty_four_bit_ints_are_exact() {
        let mut b = [0u8; 8];
        let big = (1i64 << 62) + 1;
        encode(Value::Int(big), DType::I64, &mut b);
        assert_eq!(decode(&b, DType::I64), Value::Int(big));
        encode(Value::Int(-1), DType::U64, &mut b);
        assert_eq!(b, [0xff; 8]);
    }

    #[test]
    fn narrow_stores_round_to_nearest_even() {
        let mut b = [0u8; 2];
        encode(Value::Float(1.0 + 1.0 / 256.0), DType::BF16, &mut b);
        assert_eq!(decode(&b, DType::BF16), Value::Float(1.0));
        encode(Value::Float(1.0 + 3.0 / 256.0), DType::BF16, &mut b);
        assert_eq!(decode(&b, DType::BF16), Value::Float(1.0 + 4.0 / 256.0));
    }
}
