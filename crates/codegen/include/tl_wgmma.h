/* ---- Hopper warpgroup MMA (sm_90a), emitted only into kernels that use it. ----
 *
 * Operand tiles are K-major with 128-byte rows under the 128-byte swizzle, 1024-byte aligned:
 * the descriptor's start address is the slice's first element, the stride between 8-row
 * groups 1024 bytes, the leading offset unused (1), swizzle mode 1 (128B). */
TL_DEVICE uint64_t tl_wgmma_desc_sw128(const void* smem) {
    const uint64_t addr = (uint64_t)tl_smem_addr(smem);
    return ((addr & 0x3FFFFull) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
/* Accumulator registers are pinned around the asynchronous region ("+f" on an empty asm), so
 * the compiler neither sinks their initialization below the first wgmma nor hoists a read
 * above the wait (the wgmma asm's own outputs look complete to it at issue). */
template <int N> TL_DEVICE void tl_wgmma_pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> TL_DEVICE void tl_wgmma_fence(float* d) {
    tl_wgmma_pin<N>(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
TL_DEVICE void tl_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int Pending, int N> TL_DEVICE void tl_wgmma_wait(float* d) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
    tl_wgmma_pin<N>(d);
}
TL_DEVICE void tl_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
