//! Links from tile IR to compiled code (crates/tilelang/src/link.rs): a cache hit through a
//! link skips lowering and code generation, for NVIDIA (NVRTC or nvJitLink) and AMD (clang)
//! targets alike. Such a hit launches with the signature of the kernel's tile IR instead of
//! the lowered kernel's; that is sound only if lowering keeps the signature — the same name,
//! parameters, dims and threads (but for a warp-specialized kernel's producer warpgroup,
//! whose threads the link records), and a grid of the same value for every size — checked
//! here for every example kernel on every GPU target, in both variants (persistent ones, whose
//! grid a link hit works out from the tile IR, separately).

use std::collections::HashMap;

use tilelang::kernels::{elementwise, flash_attention, gemm, rmsnorm, softmax};
use tilelang::prelude::*;
use tilelang::Target;
use tl_ir::eval::{eval_int, Value};

/// The target's default GEMM tiles with one block per output tile: the Hopper default is
/// persistent, and a persistent kernel's grid follows the device's multiprocessors, so it is
/// never linked.
fn linkable_gemm(t: &Target) -> gemm::GemmConfig {
    gemm::GemmConfig {
        persistent: None,
        ..gemm::GemmConfig::for_target(t, BF16)
    }
}

fn kernels(t: Target) -> Vec<Kernel> {
    let row = softmax::RowConfig {
        rows: 2,
        cols: 1024,
        threads: 256,
    };
    let mut v = vec![
        elementwise::add_relu(BF16, 1024, 256),
        softmax::softmax(BF16, row),
        rmsnorm::rmsnorm(BF16, row),
        softmax::softmax_row(BF16, 4096, softmax::row_threads_for(&t, 4096)),
    ];
    for layout in [gemm::Layout::NT, gemm::Layout::NN, gemm::Layout::TN] {
        v.push(gemm::gemm(layout, BF16, BF16, linkable_gemm(&t)));
    }
    for d in [64, 128] {
        for causal in [false, true] {
            // As for the GEMM: one block a query tile (non-causal d128 on Hopper is persistent
            // by default, and so never linked).
            let cfg = flash_attention::AttnConfig {
                persistent: None,
                ..flash_attention::AttnConfig::for_target(&t, d, causal, BF16)
            };
            v.push(flash_attention::flash_attention(BF16, d, causal, cfg));
        }
    }
    v
}

/// `k` lowered for `t`: the variant for aligned sizes, or the general one.
fn lowered(k: &Kernel, t: Target, aligned: bool) -> tl_ir::Kernel {
    if aligned {
        k.lower_aligned(t)
    } else {
        k.lower(t)
    }
    .unwrap_or_else(|e| panic!("{} on {t}: {e}", k.name()))
}

/// Grids `a` and `b` of one rank and the same value at every size in `sizes` (each dim set to
/// it).
fn assert_grids_agree(
    what: &str,
    dims: &[tl_ir::Var],
    a: &[tl_ir::Expr],
    b: &[tl_ir::Expr],
    sizes: &[i64],
) {
    assert_eq!(a.len(), b.len(), "{what}: grid rank");
    for &s in sizes {
        let env: HashMap<u64, Value> = dims.iter().map(|d| (d.id(), Value::Int(s))).collect();
        for (x, y) in a.iter().zip(b) {
            let vx = eval_int(x, &env).unwrap_or_else(|e| panic!("{what}: {x}: {e}"));
            let vy = eval_int(y, &env).unwrap_or_else(|e| panic!("{what}: {y}: {e}"));
            assert_eq!(vx, vy, "{what}: grid {x} vs {y} at {s}");
        }
    }
}

#[test]
fn lowering_keeps_the_launch_signature_of_linked_kernels() {
    let sizes = [1i64, 7, 64, 1000, 4099];
    for t in [
        Target::Cuda { sm: 80 },
        Target::Cuda { sm: 90 },
        Target::GFX942,
        Target::GFX950,
    ] {
        for k in kernels(t) {
            let ir = k.ir();
            assert!(
                ir.attrs.persistent_blocks.is_none(),
                "{} is persistent",
                ir.name
            );
            for aligned in [false, true] {
                let low = lowered(&k, t, aligned);
                let what = format!("{} on {t} (aligned {aligned})", ir.name);
                assert_eq!(low.name, ir.name, "{what}");
                assert_eq!(low.params, ir.params, "{what}: params");
                assert_eq!(low.dims, ir.dims, "{what}: dims");
                // A warp-specialized kernel gains a producer warpgroup (the link records
                // the threads it launches with).
                let producer = if low.attrs.warp_specialized.is_some() {
                    128
                } else {
                    0
                };
                assert_eq!(low.threads, ir.threads + producer, "{what}: threads");
                assert_grids_agree(&what, &ir.dims, &ir.grid, &low.grid, &sizes);
            }
        }
    }
}

/// A persistent kernel is linked too: a link hit launches it with the grid its rounds need,
/// worked out from the tile IR (`persistent::launch_grid`), which must be the lowered
/// kernel's grid at every size — the Hopper GEMM and non-causal d128 attention defaults (one
/// block per multiprocessor, or a few), causal attention asked to be persistent, both size
/// variants. A clustered persistent kernel, whose clusters only the pipeline settles, is not.
#[test]
fn persistent_kernels_link_with_the_grid_their_rounds_need() {
    use tl_passes::gpu::persistent::launch_grid;
    let t = Target::Cuda { sm: 90 };
    let sizes = [1i64, 7, 64, 1000, 4099, 20000];
    let mut kernels = vec![];
    for blocks in [132, 5] {
        for layout in [gemm::Layout::NT, gemm::Layout::NN] {
            let cfg = gemm::GemmConfig {
                persistent: Some(blocks),
                ..gemm::GemmConfig::for_target(&t, BF16)
            };
            kernels.push(gemm::gemm(layout, BF16, BF16, cfg));
        }
        for causal in [false, true] {
            let cfg = flash_attention::AttnConfig {
                persistent: Some(blocks),
                ..flash_attention::AttnConfig::for_target(&t, 128, causal, BF16)
            };
            kernels.push(flash_attention::flash_attention(BF16, 128, causal, cfg));
        }
    }
    for k in kernels {
        let ir = k.ir();
        let grid = launch_grid(ir).unwrap_or_else(|| panic!("{}: no launch grid", ir.name));
        for aligned in [false, true] {
            let low = lowered(&k, t, aligned);
            let what = format!("{} (aligned {aligned})", ir.name);
            assert_eq!(low.params, ir.params, "{what}: params");
            assert_eq!(low.dims, ir.dims, "{what}: dims");
            assert_grids_agree(&what, &ir.dims, &grid, &low.grid, &sizes);
        }
    }
    let clustered = gemm::gemm(
        gemm::Layout::NT,
        BF16,
        BF16,
        gemm::GemmConfig {
            persistent: Some(132),
            cluster: 2,
            ..gemm::GemmConfig::for_target(&t, BF16)
        },
    );
    assert!(launch_grid(clustered.ir()).is_none());
}

/// `precompile_for` by target: the first run lowers and compiles (or finds the binary) and
/// writes a link; the second follows it without lowering and finds the same binary; a
/// different tile IR or target is a different link.
#[test]
fn a_second_precompile_follows_the_link_without_lowering() {
    let dir = std::env::temp_dir().join(format!("tl-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = CompileOptions {
        cache_dir: Some(dir.clone()),
        ..Default::default()
    };
    let mut targets = vec![];
    if tilelang::amdgpu::toolchain::clang_or_skip("links: gfx950").is_some() {
        targets.push(Target::GFX950);
    }
    if tl_nvrtc::testing::nvrtc_or_skip("links: sm_90a").is_some() {
        targets.push(Target::Cuda { sm: 90 });
    }
    for t in targets {
        let k = gemm::gemm(gemm::Layout::NT, BF16, BF16, linkable_gemm(&t));
        let first = k.precompile_for(t, &opts).expect("first");
        assert!(
            !first.stats.lower.is_zero(),
            "{t}: the first precompile lowers"
        );
        let second = k.precompile_for(t, &opts).expect("second");
        assert!(second.cache_hit, "{t}");
        assert!(
            second.stats.lower.is_zero() && second.stats.codegen.is_zero(),
            "{t}: {:?}",
            second.stats
        );
        assert_eq!(second.key, first.key, "{t}: the same binary");
        // Another tile: another link (and binary).
        let other = gemm::gemm(
            gemm::Layout::NT,
            BF16,
            BF16,
            gemm::GemmConfig::tiles(64, 64, 32, 2, 256),
        );
        let o = other.precompile_for(t, &opts).expect("other");
        assert!(!o.stats.lower.is_zero() && o.key != first.key, "{t}");
        // The target's default, persistent on sm_90a: linked as well.
        let default = gemm::gemm(
            gemm::Layout::NT,
            BF16,
            BF16,
            gemm::GemmConfig::for_target(&t, BF16),
        );
        let d1 = default.precompile_for(t, &opts).expect("default");
        let d2 = default.precompile_for(t, &opts).expect("default again");
        assert!(
            d2.cache_hit && d2.stats.lower.is_zero() && d2.key == d1.key,
            "{t}: {:?}",
            d2.stats
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every example kernel names its variables and buffers uniquely, so every one gets a link.
#[test]
fn every_example_kernel_can_be_linked() {
    for t in [Target::Cuda { sm: 90 }, Target::GFX950] {
        for k in kernels(t) {
            assert!(
                tilelang::link_names_are_unique(k.ir()),
                "{} on {t}: two variables or buffers share a name",
                k.name()
            );
        }
    }
}
