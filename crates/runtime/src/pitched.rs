//! The built-in kernel that stages a tensor into a pitched copy (see [`crate::exec::Staging`]).
//!
//! TMA reads a tensor only when its rows are whole 16-byte units, so an input with odd rows
//! (an odd K in bf16) is copied before the launch into scratch memory whose rows are padded.
//! `cuMemcpy2DAsync` did that at about 1.4 TB/s on an H100 (49 µs for each 4096×4095 bf16
//! operand, against 189 µs for the whole GEMM: docs/performance.md, session 17), so the copy is
//! our own kernel: every thread writes whole 16-byte chunks of the padded rows. A chunk that
//! starts off 16 bytes in the source is read as the two aligned 16-byte vectors around it and
//! shifted into place (funnel shifts of 32-bit words): two vector loads where a 2-byte aligned
//! chunk took five narrow ones (a half, three words, a half), which kept the copy at about
//! 2.9 TB/s on an H200 (gpu-notes run 25a; no faster since, run 25d: the copy is not bound by
//! its load instructions). Chunks that end the row, or whose vectors would start before the
//! source or run past its last byte, read byte by byte and zero the padding.

/// CUDA C++ of `tl_pitched_copy(src, dst, src_pitch, dst_pitch, width, height)`: `height` rows
/// of `width` bytes from `src` (rows `src_pitch` bytes apart) to `dst` (rows `dst_pitch` apart,
/// a multiple of 16, `dst` 16-byte aligned). Blocks take rows in turn; a block's threads take
/// the row's 16-byte chunks in turn.
pub const CUDA_SOURCE: &str = concat!(
    "\n",
    include_str!("pitched_shift.cuh"),
    r#"
extern "C" __global__ void __launch_bounds__(256) tl_pitched_copy(
    const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
    unsigned long long src_pitch, unsigned long long dst_pitch,
    unsigned long long width, unsigned long long height) {
#if __CUDA_ARCH__ >= 900
  // Programmatic dependent launch (see the compiler's grid_dependency stage): let the GEMM
  // after this copy start as early as it can, and wait for the kernel before it.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const unsigned long long chunks = (width + 15) / 16;
  // One past the source's last byte: no vector read may cross it (nor start before `src`).
  const unsigned long long end =
      height == 0 ? 0 : (unsigned long long)src + (height - 1) * src_pitch + width;
  for (unsigned long long r = blockIdx.x; r < height; r += gridDim.x) {
    const unsigned char* s_row = src + r * src_pitch;
    uint4* d_row = (uint4*)(dst + r * dst_pitch);
    for (unsigned long long c = threadIdx.x; c < chunks; c += blockDim.x) {
      const unsigned char* s = s_row + c * 16;
      const unsigned long long a = (unsigned long long)s;
      const unsigned long long a0 = a & ~15ull;
      uint4 v;
      if (c * 16 + 16 <= width && (a & 15) == 0) {
        v = __ldg((const uint4*)s);
      } else if (c * 16 + 16 <= width && a0 >= (unsigned long long)src && a0 + 32 <= end) {
        const uint4 lo = __ldg((const uint4*)a0), hi = __ldg((const uint4*)(a0 + 16));
        v = tl_shifted(lo, hi, (unsigned)(a & 15));
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
"#
);

/// The kernel's entry point.
pub const ENTRY: &str = "tl_pitched_copy";

/// Threads per block.
pub const THREADS: u32 = 256;

/// Blocks for a copy of `height` rows: one a row (a block loops over rows only past the
/// grid's limit). 4096 rows of 8190 bytes copied in 22.7 µs this way against 23.7–24.9 with
/// 16 blocks a multiprocessor looping over rows (gpu-notes run 32j; a contiguous
/// `cudaMemcpy` of the same bytes: 20.1–20.4), and the GEMMs that stage operands ran 0.5–1.2%
/// faster (32k).
pub fn blocks(height: usize) -> i64 {
    (height as i64).clamp(1, i64::from(i32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel compiles (NVRTC, no GPU needed), and its misaligned chunks read whole
    /// vectors: three 16-byte loads (the aligned chunk's, and the two around a misaligned
    /// one), funnel shifts, and no 2-byte or 4-byte loads (the five narrow loads of the earlier
    /// 2-byte path). Spills are `builtin_kernels_compile`'s check. Its results are checked on
    /// the GPU (gpu-notes run 25d: odd K in bf16, f16 and fp8).
    #[test]
    fn the_copy_kernel_reads_misaligned_chunks_as_vectors() {
        if tl_nvrtc::testing::nvrtc_or_skip("the_copy_kernel_reads_misaligned_chunks_as_vectors")
            .is_none()
        {
            return;
        }
        let opts = tl_nvrtc::CheckOptions {
            sass: tl_nvrtc::SassMode::Required,
            require_instructions: vec!["SHF.R".into()],
            ..Default::default()
        };
        for arch in ["sm_80", "sm_90a"] {
            let r = tl_nvrtc::check_with(CUDA_SOURCE, arch, &opts)
                .unwrap_or_else(|e| panic!("{arch}: {e}"));
            let sass = r.sass.clone().unwrap_or_default();
            let wide = sass.matches("LDG.E.128").count();
            assert!(wide >= 3, "{arch}: {wide} 16-byte loads\n{sass}");
            for narrow in ["LDG.E.U16", "LDG.E.CONSTANT ", "LDG.E.U16.CONSTANT"] {
                assert!(!sass.contains(narrow), "{arch}: {narrow} in\n{sass}");
            }
        }
    }

    #[test]
    fn one_block_a_row() {
        assert_eq!(blocks(4095), 4095);
        assert_eq!(blocks(100), 100);
        assert_eq!(blocks(0), 1);
        assert_eq!(blocks(1 << 40), i64::from(i32::MAX));
    }
}
