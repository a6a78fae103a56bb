//! The counter-based random numbers of CUDA tensors.
//!
//! Element `i` of a random CUDA tensor is a pure function of `(seed, i)` (SplitMix64 over a
//! Weyl sequence), so a large tensor is generated in place on the GPU by a built-in kernel
//! ([`CUDA_SOURCE`]) and a small one, or any tensor when NVRTC is missing, by the same function
//! on the host ([`fill_host`]): the values do not depend on which path ran. Uniform values
//! agree bit for bit (both sides round each operation to nearest, no fused multiply-add);
//! normal values go through `log` and `cos`, whose last bit may differ between the GPU's and
//! the host's math libraries, which rounding to the tensor's dtype almost always hides.
//!
//! CPU tensors keep their own ChaCha-based generator (see `Tensor::randn`): to give a CPU
//! reference the same inputs as a GPU run, create the inputs on one device and copy them with
//! `Tensor::to_device`.

use tl_ir::DType;

use crate::dtype_io;

/// What to draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// Uniform in `[lo, hi)`.
    Uniform { lo: f64, hi: f64 },
    /// Normal with this mean and standard deviation.
    Normal { mean: f64, std: f64 },
}

const WEYL: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The per-tensor key of a seed.
pub fn key(seed: u64) -> u64 {
    mix(seed ^ 0x5851_F42D_4C95_7F2D)
}

/// A uniform double in `[0, 1)` with 53 random bits.
pub fn u01(key: u64, ctr: u64) -> f64 {
    (mix(key.wrapping_add(ctr.wrapping_mul(WEYL))) >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// Element `i` of the stream.
pub fn value(key: u64, i: u64, dist: Dist) -> f64 {
    match dist {
        Dist::Uniform { lo, hi } => lo + (hi - lo) * u01(key, i),
        Dist::Normal { mean, std } => {
            // Box-Muller on (0, 1] × [0, 1); one normal per pair of uniforms.
            let u1 = 1.0 - u01(key, i.wrapping_mul(2));
            let u2 = u01(key, i.wrapping_mul(2).wrapping_add(1));
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            mean + std * z
        }
    }
}

/// The dtypes the device kernel writes; others are generated on the host.
pub fn device_code(dtype: DType) -> Option<i32> {
    match dtype {
        DType::F32 => Some(0),
        DType::F64 => Some(1),
        DType::F16 => Some(2),
        DType::BF16 => Some(3),
        _ => None,
    }
}

/// Store `v` as the device kernel does: through f32 for the 16-bit floats (round to nearest
/// even at each step), otherwise as `dtype_io` does.
fn store(bytes: &mut [u8], dtype: DType, i: usize, v: f64) {
    let n = dtype.bytes();
    let b = &mut bytes[i * n..(i + 1) * n];
    match dtype {
        DType::F16 => b.copy_from_slice(&half::f16::from_f32(v as f32).to_bits().to_le_bytes()),
        DType::BF16 => b.copy_from_slice(&half::bf16::from_f32(v as f32).to_bits().to_le_bytes()),
        _ => dtype_io::write(bytes, dtype, i, v),
    }
}

/// Fill a host buffer of `numel` elements with the values the device kernel would write.
pub fn fill_host(bytes: &mut [u8], dtype: DType, seed: u64, dist: Dist) {
    let k = key(seed);
    let numel = bytes.len() / dtype.bytes().max(1);
    for i in 0..numel {
        store(bytes, dtype, i, value(k, i as u64, dist));
    }
}

/// The built-in generator kernel. Keep it in step with [`value`] and [`store`].
/// `__dadd_rn`/`__dmul_rn` keep the compiler from fusing into FMAs, which would change the last
/// bit relative to the host.
pub const CUDA_SOURCE: &str = r#"
typedef unsigned long long u64;
__device__ __forceinline__ u64 tl_mix(u64 z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
__device__ __forceinline__ double tl_u01(u64 key, u64 ctr) {
  return (double)(tl_mix(key + ctr * 0x9E3779B97F4A7C15ULL) >> 11) * (1.0 / 9007199254740992.0);
}
__device__ __forceinline__ unsigned short tl_f32_to_bf16(float f) {
  unsigned int x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ unsigned short tl_f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
// mode 0: uniform in [a, b); mode 1: normal, mean a, standard deviation b.
// dt 0: f32, 1: f64, 2: f16, 3: bf16.
extern "C" __global__ void tl_rand(void* out, u64 n, u64 key, int mode, double a, double b, int dt) {
  u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    double v;
    if (mode == 0) {
      v = __dadd_rn(a, __dmul_rn(__dadd_rn(b, -a), tl_u01(key, i)));
    } else {
      double u1 = 1.0 - tl_u01(key, 2 * i);
      double u2 = tl_u01(key, 2 * i + 1);
      double z = __dmul_rn(sqrt(-2.0 * log(u1)), cos(__dmul_rn(6.283185307179586, u2)));
      v = __dadd_rn(a, __dmul_rn(b, z));
    }
    switch (dt) {
      case 0: ((float*)out)[i] = (float)v; break;
      case 1: ((double*)out)[i] = v; break;
      case 2: ((unsigned short*)out)[i] = tl_f32_to_f16((float)v); break;
      default: ((unsigned short*)out)[i] = tl_f32_to_bf16((float)v); break;
    }
  }
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distributed() {
        let n = 20_000;
        let mut a = vec![0u8; n * 4];
        let mut b = vec![0u8; n * 4];
        fill_host(
            &mut a,
            DType::F32,
            3,
            Dist::Normal {
                mean: 0.0,
                std: 1.0,
            },
        );
        fill_host(
            &mut b,
            DType::F32,
            3,
            Dist::Normal {
                mean: 0.0,
                std: 1.0,
            },
        );
        assert_eq!(a, b);
        let v: Vec<f64> = (0..n).map(|i| dtype_io::read(&a, DType::F32, i)).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
        fill_host(
            &mut b,
            DType::F32,
            4,
            Dist::Normal {
                mean: 0.0,
                std: 1.0,
            },
        );
        assert_ne!(a, b, "different seeds give different tensors");

        let mut u = vec![0u8; n * 2];
        fill_host(&mut u, DType::BF16, 9, Dist::Uniform { lo: -2.0, hi: 3.0 });
        let v: Vec<f64> = (0..n).map(|i| dtype_io::read(&u, DType::BF16, i)).collect();
        assert!(v.iter().all(|&x| (-2.0..=3.0).contains(&x)));
        let mean = v.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
    }

    #[test]
    fn uniform_is_in_range_at_the_edges() {
        // The largest u01 is 1 - 2^-53, so `hi` is excluded in f64.
        assert!(u01(0, 0) < 1.0);
        let k = key(1);
        for i in 0..1000 {
            let x = value(k, i, Dist::Uniform { lo: 1.0, hi: 2.0 });
            assert!((1.0..2.0).contains(&x));
        }
    }

    #[test]
    fn stores_match_the_kernel_rounding() {
        // bf16 through f32 with round-to-nearest-even (the kernel's tl_f32_to_bf16).
        let mut b = [0u8; 2];
        store(&mut b, DType::BF16, 0, 1.0 + 1.0 / 256.0); // a tie: rounds to even (1.0)
        assert_eq!(u16::from_le_bytes(b), 0x3f80);
        store(&mut b, DType::F16, 0, 65504.0);
        assert_eq!(u16::from_le_bytes(b), 0x7bff);
    }
}
