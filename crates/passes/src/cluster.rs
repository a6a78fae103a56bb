//! Kernels whose blocks synchronize across a thread-block cluster (`cluster_sync`): what a
//! target and a launch must give them before any stage lowers them. The barrier only means
//! something where a cluster's blocks run together, so every mismatch is an error here rather
//! than a kernel that hangs or reads another block's unfinished results.

use tl_ir::{DiagKind, Diagnostic, Diagnostics, Intrinsic, Kernel, Stmt};
use tl_target::Target;

use crate::tile_util::is_call;

/// The most blocks a cluster may hold without the driver's non-portable opt-in.
pub const MAX_PORTABLE_CLUSTER: u32 = 8;

/// Whether `body` waits at a cluster barrier.
pub fn synchronizes_cluster(body: &Stmt) -> bool {
    let mut found = false;
    body.walk(&mut |s| found |= is_call(s, |op| matches!(op, Intrinsic::ClusterSync)));
    found
}

/// Refuse a kernel that calls `cluster_sync` where its clusters cannot be what it assumes:
/// a target without clusters, a persistent kernel, warp specialization asked for, no cluster
/// declared, clusters along another grid dim than the first, more than
/// [`MAX_PORTABLE_CLUSTER`] blocks, or a first grid dim that is not a whole number of clusters.
pub fn check(k: &Kernel, target: &Target) -> Result<(), Diagnostics> {
    if !synchronizes_cluster(&k.body) {
        return Ok(());
    }
    let err = |msg: String, help: &str| -> Result<(), Diagnostics> {
        Err(Diagnostic::new(DiagKind::Unsupported, k.body.span, msg)
            .help(help)
            .into())
    };
    let name = &k.name;
    if !target.has_clusters() {
        return err(
            format!(
                "kernel `{name}` calls cluster_sync, which needs thread-block clusters; {target} \
                 has none"
            ),
            "compile it for sm_90 (an H100: --device cuda or sim:sm_90a), or use a form of the \
             kernel whose blocks do not wait for each other (the split row kernels, say)",
        );
    }
    if k.attrs.persistent_blocks.is_some() {
        return err(
            format!(
                "kernel `{name}` is persistent and calls cluster_sync: a persistent kernel's \
                 blocks loop over tiles in their own order, so its clusters would not hold the \
                 tiles the barrier pairs"
            ),
            "drop `persistent` (one block per grid entry) or the cross-block barrier",
        );
    }
    if k.attrs.warp_specialize == Some(true) {
        return err(
            format!(
                "kernel `{name}` calls cluster_sync and asks for warp specialization: the \
                 producer warpgroup would not reach the cluster barrier"
            ),
            "drop `warp_specialize(true)` (the kernel's pipelined loops then run on every warp)",
        );
    }
    let Some(c) = k.attrs.cluster.filter(|c| c.size > 1) else {
        return err(
            format!(
                "kernel `{name}` calls cluster_sync but runs no clusters: each block would wait \
                 only for itself"
            ),
            "declare the cluster with `t.cluster(0, size)` in the launch body",
        );
    };
    if c.dim != 0 {
        return err(
            format!(
                "kernel `{name}`: clusters along grid dim {} with cluster_sync; only dim 0 is \
                 supported",
                c.dim
            ),
            "put the dim the cluster's blocks share first in the launch grid",
        );
    }
    if c.size > MAX_PORTABLE_CLUSTER {
        return err(
            format!(
                "kernel `{name}`: clusters of {} blocks; at most {MAX_PORTABLE_CLUSTER} run on \
                 every sm_90 GPU",
                c.size
            ),
            "use clusters of 8 blocks or fewer (give each block more of the work)",
        );
    }
    let first = k.grid.first().and_then(|e| e.as_int());
    if first.is_none_or(|n| n <= 0 || n % i64::from(c.size) != 0) {
        return err(
            format!(
                "kernel `{name}`: grid dim 0 ({}) must be a positive constant multiple of the \
                 cluster size {} for cluster_sync",
                k.grid.first().map_or("none".to_string(), |e| e.to_string()),
                c.size
            ),
            "make the launch's first grid extent the cluster size (or a constant multiple of it)",
        );
    }
    Ok(())
}
