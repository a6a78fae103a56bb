//! Reading and writing single elements of any dtype in a byte buffer, as f64.

use tl_ir::fp8;
use tl_ir::DType;

/// Read element `i` of a `dtype` array as f64.
pub fn read(bytes: &[u8], dtype: DType, i: usize) -> f64 {
    let n = dtype.bytes();
    let b = &bytes[i * n..(i + 1) * n];
    match dtype {
        DType::Bool => (b[0] != 0) as i32 as f64,
        DType::I8 => b[0] as i8 as f64,
        DType::U8 => b[0] as f64,
        DType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
        DType::U16 => u16::from_le_bytes([b[0], b[1]]) as f64,
        DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::I64 => i64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f64,
        DType::U64 => u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f64,
        DType::F16 => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DType::BF16 => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
        DType::F8E4M3 => fp8::e4m3_to_f32(b[0]) as f64,
        DType::F8E5M2 => fp8::e5m2_to_f32(b[0]) as f64,
    }
}

/// Write `v` (rounded/converted to `dtype`) into element `i`.
pub fn write(bytes: &mut [u8], dtype: DType, i: usize, v: f64) {
    let n = dtype.bytes();
    let b = &mut bytes[i * n..(i + 1) * n];
    match dtype {
        DType::Bool => b[0] = (v != 0.0) as u8,
        DType::I8 => b[0] = (v as i8) as u8,
        DType::U8 => b[0] = v as u8,
        DType::I16 => b.copy_from_slice(&(v as i16).to_le_bytes()),
        DType::U16 => b.copy_from_slice(&(v as u16).to_le_bytes()),
        DType::I32 => b.copy_from_slice(&(v as i32).to_le_bytes()),
        DType::U32 => b.copy_from_slice(&(v as u32).to_le_bytes()),
        DType::I64 => b.copy_from_slice(&(v as i64).to_le_bytes()),
        DType::U64 => b.copy_from_slice(&(v as u64).to_le_bytes()),
        DType::F16 => b.copy_from_slice(&tl_ir::dtype::f64_to_f16(v).to_bits().to_le_bytes()),
        DType::BF16 => b.copy_from_slice(&tl_ir::dtype::f64_to_bf16(v).to_bits().to_le_bytes()),
        DType::F32 => b.copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => b.copy_from_slice(&v.to_le_bytes()),
        DType::F8E4M3 => b[0] = fp8::f32_to_e4m3(tl_ir::dtype::f64_to_f32_odd(v)),
        DType::F8E5M2 => b[0] = fp8::f32_to_e5m2(tl_ir::dtype::f64_to_f32_odd(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for dt in DType::ALL {
            let mut buf = vec![0u8; dt.bytes() * 2];
            write(&mut buf, dt, 1, 3.0);
            assert_eq!(
                read(&buf, dt, 1),
                if dt == DType::Bool { 1.0 } else { 3.0 },
                "{dt}"
            );
            assert_eq!(read(&buf, dt, 0), 0.0);
        }
    }
}
