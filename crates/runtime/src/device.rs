//! Devices: where tensors live and kernels run.

use std::fmt;

use tl_target::Target;

use crate::error::{Result, RuntimeError};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Device {
    /// The host CPU (generated C, blocks spread over OS threads).
    Cpu,
    /// A CUDA GPU by ordinal.
    Cuda(usize),
}

impl Device {
    /// A CUDA GPU when one is present, else the CPU.
    pub fn best() -> Device {
        if crate::cuda_probe::device_count() > 0 {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }
    }

    /// Parse `cpu`, `cuda`, `cuda:N`.
    pub fn parse(s: &str) -> Result<Device> {
        let t = s.trim().to_ascii_lowercase();
        if t == "cpu" {
            return Ok(Device::Cpu);
        }
        if t == "cuda" || t == "gpu" {
            return Ok(Device::Cuda(0));
        }
        if let Some(n) = t.strip_prefix("cuda:") {
            if let Ok(i) = n.parse::<usize>() {
                return Ok(Device::Cuda(i));
            }
        }
        Err(RuntimeError::DeviceUnavailable {
            device: s.to_string(),
            reason: "unknown device name; use cpu, cuda or cuda:N".into(),
        })
    }

    /// The compile target for this device.
    pub fn target(&self) -> Result<Target> {
        match self {
            Device::Cpu => Ok(Target::Cpu),
            Device::Cuda(i) => crate::cuda_probe::target_of(*i),
        }
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}
