/* ---- Hopper warpgroup MMA (sm_90a), emitted only into kernels that use it. ----
 *
 * Operand tiles have 128-byte rows under the 128-byte swizzle and are 1024-byte aligned; the
 * descriptor's start address is the slice's first element and the stride between 8-row groups
 * is 1024 bytes (SBO), swizzle mode 1 (128B). The leading offset (LBO) is unused for K-major
 * operands (pass 16) and, for MN-major ones, the distance between 64-column blocks. */
TL_DEVICE uint64_t tl_wgmma_desc_sw128(const void* smem, uint32_t lbo_bytes) {
    const uint64_t addr = (uint64_t)tl_smem_addr(smem);
    return ((addr & 0x3FFFFull) >> 4) | ((uint64_t)((lbo_bytes >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
/* Register arrays a wgmma uses are pinned around the asynchronous region (an empty asm that
 * "reads and writes" them), so the compiler neither sinks their initialization below the first
 * wgmma, nor hoists a read above the wait, nor reuses A's registers while the wgmma reads them
 * (the wgmma asm's own operands look complete to it at issue). One register per statement:
 * eight per statement compiled a little faster but ran d64 causal attention 3% slower on an
 * H100 (docs/gpu-notes.md, run 7). */
template <int N> TL_DEVICE void tl_wgmma_pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> TL_DEVICE void tl_wgmma_pin_u32(uint32_t* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
TL_DEVICE void tl_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
TL_DEVICE void tl_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int Pending> TL_DEVICE void tl_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
// A wait that stays below the code before it: a branch ptxas cannot prove never taken (the
// dynamic shared memory is never 4 GiB) ends the basic block, and ptxas does not raise a wait
// out of its block. See the PTX printer's `wgmma_wait`.
template <int Pending> TL_DEVICE void tl_wgmma_wait_pinned() {
    unsigned size;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(size));
    if (size == 0xffffffffu) __nanosleep(0);
    tl_wgmma_wait<Pending>();
}
TL_DEVICE void tl_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
