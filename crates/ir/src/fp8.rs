//! Float8 (OCP e4m3fn and e5m2) conversions, bit-exact, shared by the CPU reference paths.
//!
//! Conversions to fp8 round to nearest even and saturate to the largest finite value (the
//! `satfinite` mode GPU kernels use), and NaN stays NaN.

fn encode(v: f32, exp_bits: u32, man_bits: u32, bias: i32, max_finite: f32, nan: u8) -> u8 {
    if v.is_nan() {
        return nan;
    }
    let sign: u8 = if v.is_sign_negative() { 0x80 } else { 0 };
    let a = v.abs();
    if a >= max_finite {
        // Saturate: the largest finite magnitude.
        return sign | encode_magnitude(max_finite as f64, exp_bits, man_bits, bias);
    }
    sign | encode_magnitude(a as f64, exp_bits, man_bits, bias)
}

fn encode_magnitude(a: f64, exp_bits: u32, man_bits: u32, bias: i32) -> u8 {
    if a == 0.0 {
        return 0;
    }
    let min_normal_exp = 1 - bias;
    let mut e = a.log2().floor() as i32;
    if e < min_normal_exp {
        e = min_normal_exp;
    }
    // Quantum at this exponent; subnormals share the minimum exponent's quantum.
    let quantum = 2f64.powi(e - man_bits as i32);
    let q = a / quantum;
    let mut m = q.floor();
    let rem = q - m;
    if rem > 0.5 || (rem == 0.5 && (m as u64) % 2 == 1) {
        m += 1.0;
    }
    let mut m = m as u32;
    let is_normal_range = m >= (1 << man_bits);
    if m >= (2 << man_bits) {
        m >>= 1;
        e += 1;
    }
    let max_e = (1 << exp_bits) - 1;
    if is_normal_range || m >= (1 << man_bits) {
        let biased = (e + bias) as u32;
        let biased = biased.min(max_e as u32);
        ((biased << man_bits) | (m & ((1 << man_bits) - 1))) as u8
    } else {
        m as u8
    }
}

fn decode(b: u8, exp_bits: u32, man_bits: u32, bias: i32) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let e = ((b >> man_bits) as u32) & ((1 << exp_bits) - 1);
    let m = (b as u32) & ((1 << man_bits) - 1);
    let v = if e == 0 {
        (m as f32) * 2f32.powi(1 - bias - man_bits as i32)
    } else {
        (1.0 + m as f32 / (1 << man_bits) as f32) * 2f32.powi(e as i32 - bias)
    };
    sign * v
}

pub fn f32_to_e4m3(v: f32) -> u8 {
    encode(v, 4, 3, 7, 448.0, 0x7f)
}

pub fn e4m3_to_f32(b: u8) -> f32 {
    if b & 0x7f == 0x7f {
        return f32::NAN;
    }
    decode(b, 4, 3, 7)
}

pub fn f32_to_e5m2(v: f32) -> u8 {
    encode(v, 5, 2, 15, 57344.0, 0x7f)
}

pub fn e5m2_to_f32(b: u8) -> f32 {
    let e = (b >> 2) & 0x1f;
    if e == 0x1f {
        return if b & 3 == 0 {
            if b & 0x80 != 0 {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            }
        } else {
            f32::NAN
        };
    }
    decode(b, 5, 2, 15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_round_trips_every_finite_code() {
        for b in 0u8..=255 {
            let v = e4m3_to_f32(b);
            if v.is_nan() {
                continue;
            }
            let back = f32_to_e4m3(v);
            // +0 and -0 both decode to zero.
            if v == 0.0 {
                assert_eq!(back & 0x7f, 0);
            } else {
                assert_eq!(back, b, "code {b:#x} value {v}");
            }
        }
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(f32_to_e4m3(1000.0), 0x7e);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
    }

    #[test]
    fn e5m2_round_trips_every_finite_code() {
        for b in 0u8..=255 {
            let v = e5m2_to_f32(b);
            if !v.is_finite() {
                continue;
            }
            let back = f32_to_e5m2(v);
            if v == 0.0 {
                assert_eq!(back & 0x7f, 0);
            } else {
                assert_eq!(back, b, "code {b:#x} value {v}");
            }
        }
        assert_eq!(e5m2_to_f32(0x7b), 57344.0);
    }

    #[test]
    fn rounds_to_nearest_even() {
        // 1.0625 lies halfway between 1.0 and 1.125 in e4m3: ties to even gives 1.0.
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1.0625)), 1.0);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1.19)), 1.25);
    }
}
