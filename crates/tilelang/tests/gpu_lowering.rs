//! Every example kernel lowers to well-formed thread-level IR for the GPU targets (the
//! simulator and the CUDA compile checks run what this produces).

mod common;

use common::example_kernels;
use tilelang::Target;

#[test]
fn examples_lower_for_gpu_targets() {
    for k in example_kernels() {
        for target in [Target::SM80, Target::SM90] {
            match k.lower(target) {
                Ok(low) => {
                    if std::env::var("TL_PRINT").is_ok() {
                        println!("{low}");
                    }
                }
                Err(d) => panic!("{} for {target}:\n{d}", k.name()),
            }
        }
    }
}
