//! Named, ordered IR-to-IR stages. Every stage is `fn(Kernel, &Target) -> Result<Kernel,
//! Diagnostics>`; [`pipeline`] lists them for a target in one place, and [`run_pipeline`] runs
//! them, verifying the result and optionally writing the IR after each stage to a directory.

use std::path::Path;

use tl_ir::verify::{verify_level, Level};
use tl_ir::{Diagnostic, Diagnostics, Kernel};
use tl_target::Target;

pub mod cluster;
pub mod cpu_lower;
pub mod gpu;
pub mod remap;
pub mod simplify;
pub mod strength;
pub mod tile_util;

pub type PassFn = fn(Kernel, &Target) -> Result<Kernel, Diagnostics>;

#[derive(Clone, Copy)]
pub struct Pass {
    pub name: &'static str,
    pub run: PassFn,
}

/// The stages for a target, in order.
pub fn pipeline(target: &Target) -> Vec<Pass> {
    let pass = |name, run| Pass { name, run };
    match target {
        Target::Cpu => vec![
            pass("simplify", simplify::run),
            pass("lower_tile_ops_cpu", cpu_lower::run),
            pass("simplify_lowered", simplify::run),
        ],
        _ => {
            let mut v = vec![
                pass("simplify", simplify::run),
                pass("select_instructions", gpu::isel::run),
                pass("infer_layouts", gpu::infer::run),
                pass("pipeline", gpu::pipeline::run),
                pass("insert_barriers", gpu::barriers::run),
                pass("lower_tile_ops", gpu::lower::run),
                pass("apply_smem_layouts", gpu::lower::apply_smem_layouts),
                pass("simplify_lowered", simplify::run),
            ];
            if target.is_hip() {
                // vmcnt waits and LDS barriers (docs in gpu::waitcnt).
                v.push(pass("insert_waits", gpu::waitcnt::run));
            }
            v.push(pass("persistent", gpu::persistent::run));
            // Producer warps for a split TMA pipeline (docs in gpu::warp_specialize).
            v.push(pass("warp_specialize", gpu::warp_specialize::run));
            v.push(pass("strength_reduce", strength::run));
            // Programmatic dependent launch (docs in gpu::grid_dependency).
            v.push(pass("grid_dependency", gpu::grid_dependency::run));
            if target.is_hip() {
                // MFMA/LDS-read rounds (docs in gpu::schedule).
                v.push(pass("schedule", gpu::schedule::run));
            }
            v
        }
    }
}

/// Verify the tile IR, run every stage of the target's pipeline, and verify the thread-level
/// result. With `dump`, write `NN_stage.tir` files (the IR after each stage) into that
/// directory.
pub fn run_pipeline(
    k: &Kernel,
    target: &Target,
    dump: Option<&Path>,
) -> Result<Kernel, Diagnostics> {
    tl_ir::verify::verify(k)?;
    let dump_to = |idx: usize, name: &str, k: &Kernel| -> Result<(), Diagnostics> {
        if let Some(dir) = dump {
            std::fs::create_dir_all(dir)
                .and_then(|_| {
                    std::fs::write(
                        dir.join(format!("{}.{idx:02}_{name}.tir", k.name)),
                        k.to_string(),
                    )
                })
                .map_err(|e| {
                    Diagnostics::from(Diagnostic::new(
                        tl_ir::DiagKind::InvalidArgument,
                        tl_ir::Span::UNKNOWN,
                        format!("cannot write IR dump into {}: {e}", dir.display()),
                    ))
                })?;
        }
        Ok(())
    };
    cluster::check(k, target)?;
    dump_to(0, "input", k)?;
    let mut cur = k.clone();
    for (i, p) in pipeline(target).iter().enumerate() {
        cur = (p.run)(cur, target)?;
        dump_to(i + 1, p.name, &cur)?;
    }
    verify_level(&cur, Level::Thread).map_err(|d| {
        Diagnostics(
            d.0.into_iter()
                .map(|x| {
                    if x.kind == tl_ir::DiagKind::Internal {
                        x
                    } else {
                        Diagnostic::internal(format!("lowered IR is ill-formed: {x}"))
                    }
                })
                .collect(),
        )
    })?;
    Ok(cur)
}
