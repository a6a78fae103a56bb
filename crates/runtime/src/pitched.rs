//! The built-in kernel that stages a tensor into a pitched copy (see [`crate::exec::Staging`]).
//!
//! TMA reads a tensor only when its rows are whole 16-byte units, so an input with odd rows
//! (an odd K in bf16) is copied before the launch into scratch memory whose rows are padded.
//! `cuMemcpy2DAsync` did that at about 1.4 TB/s on an H100 (49 µs for each 4096×4095 bf16
//! operand, against 189 µs for the whole GEMM: docs/performance.md, session 17), so the copy is
//! our own kernel: every thread writes whole 16-byte chunks of the padded rows, reading the
//! source with the widest loads its alignment allows: 16 bytes where the chunk is aligned, four
//! words where it is 4-byte aligned, and for the 2-byte aligned chunks of 2-byte elements (odd
//! rows of bf16 alternate between the two) a half, three words and a half, shifted together.
//! Chunks that end the row read byte by byte and zero the padding.

/// CUDA C++ of `tl_pitched_copy(src, dst, src_pitch, dst_pitch, width, height)`: `height` rows
/// of `width` bytes from `src` (rows `src_pitch` bytes apart) to `dst` (rows `dst_pitch` apart,
/// a multiple of 16, `dst` 16-byte aligned). Blocks take rows in turn; a block's threads take
/// the row's 16-byte chunks in turn.
pub const CUDA_SOURCE: &str = r#"
extern "C" __global__ void __launch_bounds__(256) tl_pitched_copy(
    const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
    unsigned long long src_pitch, unsigned long long dst_pitch,
    unsigned long long width, unsigned long long height) {
  const unsigned long long chunks = (width + 15) / 16;
  for (unsigned long long r = blockIdx.x; r < height; r += gridDim.x) {
    const unsigned char* s_row = src + r * src_pitch;
    uint4* d_row = (uint4*)(dst + r * dst_pitch);
    for (unsigned long long c = threadIdx.x; c < chunks; c += blockDim.x) {
      const unsigned char* s = s_row + c * 16;
      const unsigned long long a = (unsigned long long)s;
      uint4 v;
      if (c * 16 + 16 <= width && (a & 15) == 0) {
        v = __ldg((const uint4*)s);
      } else if (c * 16 + 16 <= width && (a & 3) == 0) {
        const unsigned* w = (const unsigned*)s;
        v = make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
      } else if (c * 16 + 16 <= width && (a & 3) == 2) {
        // A half, three aligned words, a half: each output word is the top half of one
        // and the bottom half of the next.
        const unsigned h0 = __ldg((const unsigned short*)s);
        const unsigned* w = (const unsigned*)(s + 2);
        const unsigned w1 = __ldg(w), w2 = __ldg(w + 1), w3 = __ldg(w + 2);
        const unsigned h7 = __ldg((const unsigned short*)(s + 14));
        v = make_uint4(h0 | (w1 << 16), (w1 >> 16) | (w2 << 16), (w2 >> 16) | (w3 << 16),
                       (w3 >> 16) | (h7 << 16));
      } else {
        unsigned long long lo = 0, hi = 0;
        const unsigned long long n = width - c * 16 < 16 ? width - c * 16 : 16;
        for (unsigned i = 0; i < n; ++i) {
          const unsigned long long byte = __ldg(s + i);
          if (i < 8) lo |= byte << (8 * i); else hi |= byte << (8 * (i - 8));
        }
        v = make_uint4((unsigned)lo, (unsigned)(lo >> 32), (unsigned)hi, (unsigned)(hi >> 32));
      }
      d_row[c] = v;
    }
  }
}
"#;

/// The kernel's entry point.
pub const ENTRY: &str = "tl_pitched_copy";

/// Threads per block.
pub const THREADS: u32 = 256;

/// Blocks for a copy of `height` rows: enough to fill the device (16 blocks of 256 threads per
/// multiprocessor: each thread has few loads in flight, so many warps hide the latency), no
/// more than there are rows.
pub fn blocks(height: usize, multiprocessors: u32) -> i64 {
    (height as i64).clamp(1, multiprocessors.max(1) as i64 * 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_fill_the_device_without_idle_ones() {
        assert_eq!(blocks(4095, 132), 2112);
        assert_eq!(blocks(100, 132), 100);
        assert_eq!(blocks(0, 132), 1);
    }
}
