/* ---- Hopper tensor-memory accelerator and mbarriers (sm_90), emitted only into kernels that
 * use them. ----
 *
 * A tensor map (CUtensorMap: 128 bytes, 64-byte aligned) is built on the host at launch and
 * passed by value as a __grid_constant__ parameter, so its address is the parameter's. Box
 * coordinates go innermost first, as the PTX instruction takes them. */
struct __align__(64) tl_tmap { unsigned long long words[16]; };

TL_DEVICE void tl_mbar_init(const void* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tl_smem_addr(bar)), "r"(count) : "memory");
}
/* Generic-proxy writes this thread is ordered after (a peer's puts it acquired) become visible
 * to its later TMA loads of global memory. */
TL_DEVICE void tl_fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
// Bring a tensor map into the TMA unit's descriptor cache ahead of its first copy.
TL_DEVICE void tl_prefetch_tmap(const tl_tmap* map) {
  asm volatile("prefetch.tensormap [%0];\n" :: "l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
TL_DEVICE void tl_fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
TL_DEVICE void tl_mbar_expect_tx(const void* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(tl_smem_addr(bar)), "r"(bytes) : "memory");
}
TL_DEVICE void tl_mbar_arrive(const void* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(tl_smem_addr(bar)) : "memory");
}
/* Spin until the phase of parity `parity` has completed. */
TL_DEVICE void tl_mbar_wait(const void* bar, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "TL_MBAR_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra TL_MBAR_WAIT;\n"
                 "}\n" ::"r"(tl_smem_addr(bar)), "r"(parity) : "memory");
}
TL_DEVICE void tl_tma_load_2d(void* dst, const tl_tmap* map, const void* bar, int32_t c0, int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(tl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(tl_smem_addr(bar)) : "memory");
}
TL_DEVICE void tl_tma_load_3d(void* dst, const tl_tmap* map, const void* bar, int32_t c0, int32_t c1, int32_t c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(tl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(tl_smem_addr(bar)) : "memory");
}
TL_DEVICE void tl_tma_load_4d(void* dst, const tl_tmap* map, const void* bar, int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 ::"r"(tl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(tl_smem_addr(bar)) : "memory");
}
TL_DEVICE void tl_tma_load_5d(void* dst, const tl_tmap* map, const void* bar, int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n"
                 ::"r"(tl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(tl_smem_addr(bar)) : "memory");
}
/* Thread-block clusters (sm_90): the block's rank in its cluster, a cluster-wide barrier,
 * an arrival on the barrier at the same offset in another block of the cluster, and TMA loads
 * multicast to the blocks of `mask`. */
TL_DEVICE int32_t tl_cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return (int32_t)r;
}
TL_DEVICE void tl_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
TL_DEVICE void tl_mbar_arrive_cluster(const void* bar, int32_t rank) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n"
                 ::"r"(tl_smem_addr(bar)), "r"(rank) : "memory");
}
TL_DEVICE void tl_tma_load_mc_2d(void* dst, const tl_tmap* map, const void* bar, int32_t mask, int32_t c0, int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n"
                 ::"r"(tl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(tl_smem_addr(bar)), "h"((uint16_t)mask) : "memory");
}
TL_DEVICE void tl_tma_load_mc_3d(void* dst, const tl_tmap* map, const void* bar, int32_t mask, int32_t c0, int32_t c1, int32_t c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
                 ::"r"(tl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(tl_smem_addr(bar)), "h"((uint16_t)mask) : "memory");
}
TL_DEVICE void tl_tma_load_mc_4d(void* dst, const tl_tmap* map, const void* bar, int32_t mask, int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n"
                 ::"r"(tl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(tl_smem_addr(bar)), "h"((uint16_t)mask) : "memory");
}
TL_DEVICE void tl_tma_load_mc_5d(void* dst, const tl_tmap* map, const void* bar, int32_t mask, int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4, %5, %6}], [%7], %8;\n"
                 ::"r"(tl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(tl_smem_addr(bar)), "h"((uint16_t)mask) : "memory");
}
/* TMA stores (shared -> global, bulk groups). Elements outside the tensor are not written;
 * the shared source may be reused after a `.read` wait retires the group. */
TL_DEVICE void tl_tma_store_2d(const tl_tmap* map, const void* src, int32_t c0, int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(tl_smem_addr(src)) : "memory");
}
TL_DEVICE void tl_tma_store_3d(const tl_tmap* map, const void* src, int32_t c0, int32_t c1, int32_t c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(tl_smem_addr(src)) : "memory");
}
TL_DEVICE void tl_tma_store_4d(const tl_tmap* map, const void* src, int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(tl_smem_addr(src)) : "memory");
}
TL_DEVICE void tl_tma_store_5d(const tl_tmap* map, const void* src, int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];\n"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(tl_smem_addr(src)) : "memory");
}
TL_DEVICE void tl_bulk_store(void* dst, const void* src, int32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                 ::"l"(dst), "r"(tl_smem_addr(src)), "r"(bytes) : "memory");
}
TL_DEVICE void tl_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
#define tl_bulk_wait(n) asm volatile("cp.async.bulk.wait_group " #n ";\n" ::: "memory")
#define tl_bulk_wait_read(n) asm volatile("cp.async.bulk.wait_group.read " #n ";\n" ::: "memory")
