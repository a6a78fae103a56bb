//! The NVSHMEM route of multi-rank kernels (`Kernel::with_nvshmem`): every peer access becomes
//! a call of NVSHMEM's shim in the PTX, the simulator runs the same kernel (its semantics are
//! the flat kernel's), and — where NVSHMEM's wheel is installed
//! (`bash scripts/install-cuda-tools.sh` unpacks it; CI does) — nvJitLink links the kernel with
//! the shim and NVSHMEM's device archive into a cubin that holds NVSHMEM's device state.

use tilelang::kernels::dist::{
    ag_gemm, all_gather, all_gather_by, all_reduce, all_reduce_two_shot, gemm_rs, AgGemmConfig,
    Transfer, ARRIVALS_PER_CALL,
};
use tilelang::prelude::*;
use tilelang::Target;
use tl_sim::{SimArg, SimOptions};

/// Each kernel with the shim functions its PTX must call.
fn kernels() -> Vec<(Kernel, &'static [&'static str])> {
    let tiles = AgGemmConfig::tiles(128, 128, 64, 3, 256);
    vec![
        (
            all_gather(F32, 128),
            &["tl_shmem_put_warp", "tl_shmem_add32", "tl_shmem_quiet"][..],
        ),
        (
            all_gather_by(F32, 128, Transfer::GET_WARP, 64),
            &["tl_shmem_get_warp", "tl_shmem_add32", "tl_shmem_quiet"][..],
        ),
        (
            all_gather_by(F32, 128, Transfer::PUT_WARP, 64),
            &["tl_shmem_put_warp", "tl_shmem_add32"][..],
        ),
        (
            all_gather_by(F32, 128, Transfer::GET_BLOCK, 64),
            &["tl_shmem_get_warp", "tl_shmem_add32"][..],
        ),
        (
            ag_gemm(BF16, tiles),
            &["tl_shmem_put_warp", "tl_shmem_add32"][..],
        ),
        (gemm_rs(BF16, tiles), &["tl_shmem_add32"][..]),
        (
            all_reduce(256, 256),
            &["tl_shmem_fetch32", "tl_shmem_set32"][..],
        ),
        (
            all_reduce_two_shot(256, 256),
            &["tl_shmem_fetch32", "tl_shmem_set32"][..],
        ),
    ]
}

#[test]
fn every_peer_access_becomes_a_call_of_the_shim() {
    for (k, wants) in kernels() {
        let flat = k
            .emit_ptx(Target::SM90)
            .unwrap_or_else(|e| panic!("{}: {e}", k.name()));
        let k = k.with_nvshmem().expect("a multi-rank kernel");
        for target in [Target::SM80, Target::SM90] {
            let ptx = k
                .emit_ptx(target)
                .unwrap_or_else(|e| panic!("{} {target}: {e}", k.name()));
            for want in wants.iter() {
                assert!(
                    ptx.contains(&format!("call {want}, "))
                        || ptx.contains(&format!("), {want}, (")),
                    "{} {target}: no call of {want}",
                    k.name()
                );
            }
            // Declared once each, at module scope, before the kernel.
            let entry = ptx.find(".visible .entry").unwrap_or(0);
            for want in wants {
                let decl = ptx
                    .find(&format!(".extern .func {want}("))
                    .or_else(|| ptx.find(&format!(") {want}(")))
                    .unwrap_or_else(|| panic!("{} {target}: {want} not declared", k.name()));
                assert!(decl < entry, "{want} declared after the kernel");
            }
            // No peer is reached by address any more: the system-scope flag accesses left
            // are this rank's own (waits), and no store or reduction goes to a peer.
            assert!(
                !ptx.contains("red.release.sys") && !ptx.contains("st.release.sys"),
                "{} {target}: a release by address is left",
                k.name()
            );
        }
        assert!(!flat.contains("tl_shmem_"), "the flat kernel calls nothing");
        // A block or warp copy is one call of the group, not a loop of chunk copies.
        let ptx = k.emit_ptx(Target::SM90).expect("PTX");
        assert!(
            !ptx.contains("tl_shmem_put,") && !ptx.contains("tl_shmem_get,"),
            "{}: chunk copies left",
            k.name()
        );
    }
}

/// The simulator runs the NVSHMEM kernel as the flat one: the all-gather's result and flags.
#[test]
fn the_simulator_runs_nvshmem_kernels_as_written() {
    let k = all_gather(F32, 64).with_nvshmem().expect("multi-rank");
    let lowered = k.lower(Target::SM90).expect("lowers");
    // The simulator runs the group's call (each thread its share), not the SM copy loop.
    let ir = lowered.to_string();
    assert!(ir.contains("peer_put_warp"), "no group copy in\n{ir}");
    let flat = all_gather(F32, 64).lower(Target::SM90).expect("lowers");
    let flat = flat.to_string();
    assert!(!flat.contains("peer_put_warp") && !flat.contains("via_nvshmem"));
    let (ranks, n) = (2usize, 64usize);
    let shard = |r: usize| (0..n).map(|i| (r * 1000 + i) as f64).collect::<Vec<f64>>();
    let mut args: Vec<Vec<SimArg>> = (0..ranks)
        .map(|r| {
            vec![
                SimArg::tensor(F32, &[n], &shard(r)),
                SimArg::tensor(F32, &[ranks, n], &vec![f64::NAN; ranks * n]),
                SimArg::zeros(I32, &[ranks]),
                SimArg::zeros(I32, &[ranks]),
                SimArg::Int(1),
                SimArg::Int(r as i64),
                SimArg::Int(ranks as i64),
                SimArg::Int(0),
            ]
        })
        .collect();
    tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect("runs");
    let want: Vec<f64> = (0..ranks).flat_map(shard).collect();
    for a in &args {
        assert_eq!(a[1].to_f64(F32), want);
        assert_eq!(a[2].to_f64(I32), vec![ARRIVALS_PER_CALL as f64; ranks]);
    }
}

#[test]
fn with_nvshmem_refuses_what_it_cannot_route() {
    let single = tilelang::kernels::elementwise::add_relu(F32, 256, 128);
    let Err(e) = single.with_nvshmem() else {
        panic!("a single-rank kernel taken for NVSHMEM")
    };
    assert!(e.to_string().contains("not a multi-rank kernel"), "{e}");
    // Tables after NVSHMEM change nothing: the calls reach the peers.
    let k = all_gather(F32, 64).with_nvshmem().expect("multi-rank");
    let params = k.ir().params.len();
    assert_eq!(k.with_peer_tables().ir().params.len(), params);
    let tabled = all_gather(F32, 64).with_peer_tables();
    let Err(e) = tabled.with_nvshmem() else {
        panic!("a kernel with peer tables taken for NVSHMEM")
    };
    assert!(e.to_string().contains("tables"), "{e}");
    // The CUDA C++ printer does not lower NVSHMEM's calls, and says which backend does.
    let k = all_gather(F32, 64).with_nvshmem().expect("multi-rank");
    let low = k.lower_aligned(Target::SM90).expect("lowers");
    let e = tl_codegen::cuda::generate(&low, Target::SM90).expect_err("PTX only");
    assert!(e.to_string().contains("PTX"), "{e}");
}

/// nvJitLink links the NVSHMEM kernels with the shim (compiled by NVRTC against NVSHMEM's
/// headers) and NVSHMEM's device archive: the cubin holds NVSHMEM's device state, which
/// `nvshmemx_cumodule_init` fills at load.
#[test]
fn nvshmem_kernels_link_with_nvshmems_device_archive() {
    let test = "nvshmem_kernels_link_with_nvshmems_device_archive";
    if tl_nvrtc::testing::nvrtc_or_skip(test).is_none() {
        return;
    }
    if let Err(e) = tl_nvrtc::nvshmem::discover_home() {
        if std::env::var_os("TILELANG_REQUIRE_NVSHMEM").is_some() {
            panic!("{test}: TILELANG_REQUIRE_NVSHMEM is set but NVSHMEM is not found: {e}");
        }
        eprintln!("SKIPPED {test}: {e}");
        return;
    }
    // Every function the printer may call links (the kernels below use only some).
    let probe = tl_codegen::ptx::nvshmem_shim_probe("sm_90a");
    let c = tl_nvrtc::compile(&probe, "sm_90a", &Default::default())
        .unwrap_or_else(|e| panic!("the shim probe: {e}\n{probe}"));
    assert!(c.cubin.windows(12).any(|w| w == b"tl_shmem_add"));
    for (k, _) in kernels() {
        let k = k.with_nvshmem().expect("multi-rank");
        let ptx = k.emit_ptx(Target::SM90).expect("PTX");
        let c = tl_nvrtc::compile(&ptx, "sm_90a", &Default::default())
            .unwrap_or_else(|e| panic!("{}: {e}", k.name()));
        let has = |needle: &[u8]| c.cubin.windows(needle.len()).any(|w| w == needle);
        assert!(
            has(b"nvshmemi_device_state_d"),
            "{}: no NVSHMEM state",
            k.name()
        );
        assert!(has(b"tl_shmem_"), "{}: the shim is not linked", k.name());
        println!(
            "{}: cubin {} bytes, {:?}",
            k.name(),
            c.cubin.len(),
            c.functions.first()
        );
    }
}
