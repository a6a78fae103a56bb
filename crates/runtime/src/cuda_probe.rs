//! Finding CUDA GPUs without requiring CUDA: the CUDA backend arrives behind the same
//! interface; until then no GPU is reported and CUDA devices are unavailable.

use tl_target::Target;

use crate::error::{Result, RuntimeError};

pub fn device_count() -> usize {
    0
}

pub fn target_of(ordinal: usize) -> Result<Target> {
    Err(RuntimeError::DeviceUnavailable {
        device: format!("cuda:{ordinal}"),
        reason: "this build has no CUDA backend".into(),
    })
}
