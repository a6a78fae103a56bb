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
    /// The GPU simulator: kernels are lowered for a GPU target (sm_80 by default; `sim:gfx950`
    /// and the like for others) and their thread-level IR is executed on the CPU, every thread
    /// of a block in lockstep (32-lane warps or 64-lane waves), with race and missing-wait
    /// checks. Tensors live in host memory. For small shapes: it is slow.
    Sim(Target),
}

impl Device {
    /// `TILELANG_DEVICE` when it is set to a usable device (`cpu`, `cuda`, `cuda:N`), else a
    /// CUDA GPU when the driver loads and reports one, else the CPU. Never panics: a missing or
    /// broken CUDA installation means the CPU.
    pub fn best() -> Device {
        if let Ok(name) = std::env::var("TILELANG_DEVICE") {
            if let Ok(d) = Device::parse(&name) {
                if d.is_available() {
                    return d;
                }
            }
        }
        if crate::cuda_probe::device_count() > 0 {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }
    }

    /// Whether tensors can be made and kernels run here.
    pub fn is_available(&self) -> bool {
        match self {
            Device::Cpu | Device::Sim(_) => true,
            Device::Cuda(i) => crate::cuda_probe::check(*i).is_ok(),
        }
    }

    /// Number of usable CUDA devices (0 without a driver or GPU).
    pub fn cuda_count() -> usize {
        crate::cuda_probe::device_count()
    }

    /// Why there is no CUDA device, when there is none (for SKIPPED messages).
    pub fn cuda_unavailable_reason() -> Option<String> {
        crate::cuda_probe::probe().reason.clone()
    }

    /// A name that identifies the hardware, for cache keys and tuning records: the GPU's
    /// marketing name, or the host CPU's model.
    pub fn name(&self) -> Result<String> {
        match self {
            Device::Cpu => Ok(crate::cpu::host_cpu_id()),
            Device::Sim(t) => Ok(format!("tilelang-sim ({t})")),
            Device::Cuda(i) => crate::cuda_probe::name(*i),
        }
    }

    /// Properties of a CUDA device (multiprocessors, L2 size, shared memory limits); opens the
    /// device.
    pub fn cuda_props(&self) -> Result<crate::cuda::DeviceProps> {
        match self {
            Device::Cpu | Device::Sim(_) => Err(RuntimeError::DeviceUnavailable {
                device: self.to_string(),
                reason: "only a CUDA device has CUDA properties".into(),
            }),
            Device::Cuda(i) => Ok(crate::cuda::device(*i)?.props().clone()),
        }
    }

    /// Wait for all work queued on this device (a no-op on the CPU).
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Device::Cpu | Device::Sim(_) => Ok(()),
            Device::Cuda(i) => crate::cuda::device(*i)?.synchronize(),
        }
    }

    /// The simulator of sm_80 kernels.
    pub const SIM: Device = Device::Sim(Target::SM80);

    /// Parse `cpu`, `cuda`, `cuda:N`, `sim` (sm_80 kernels) and `sim:TARGET` (`sim:gfx950`,
    /// `sim:sm_90a`, ...).
    pub fn parse(s: &str) -> Result<Device> {
        let t = s.trim().to_ascii_lowercase();
        if t == "cpu" {
            return Ok(Device::Cpu);
        }
        if t == "sim" {
            return Ok(Device::SIM);
        }
        if let Some(target) = t.strip_prefix("sim:") {
            return match Target::parse(target) {
                Ok(tg) if tg.is_gpu() => Ok(Device::Sim(tg)),
                Ok(_) => Err(RuntimeError::DeviceUnavailable {
                    device: s.to_string(),
                    reason: "the simulator runs GPU kernels; use sim:sm_80, sim:sm_90a, sim:gfx942 or sim:gfx950".into(),
                }),
                Err(e) => Err(RuntimeError::DeviceUnavailable {
                    device: s.to_string(),
                    reason: e.to_string(),
                }),
            };
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
            reason: "unknown device name; use cpu, cuda, cuda:N, sim or sim:TARGET (sim:gfx950)"
                .into(),
        })
    }

    /// The compile target for this device: `Target::Cuda { sm }` from a GPU's compute
    /// capability (sm 90 gives the `sm_90a` arch).
    pub fn target(&self) -> Result<Target> {
        match self {
            Device::Cpu => Ok(Target::Cpu),
            Device::Sim(t) => Ok(*t),
            Device::Cuda(i) => crate::cuda_probe::target_of(*i),
        }
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// Tensors of this device live in host memory (the CPU and the simulator).
    pub fn is_host(&self) -> bool {
        matches!(self, Device::Cpu | Device::Sim(_))
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Sim(t) if *t == Target::SM80 => write!(f, "sim"),
            Device::Sim(t) => write!(f, "sim:{t}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}
