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
    /// An AMD GPU by ordinal, through ROCm's HIP runtime (`libamdhip64.so`, loaded at run
    /// time; see [`crate::hip`]). **Untested on hardware**: written against the documented HIP
    /// API and checked only against a mock runtime.
    Hip(usize),
    /// The GPU simulator: kernels are lowered for a GPU target (sm_80 by default; `sim:gfx950`
    /// and the like for others) and their thread-level IR is executed on the CPU, every thread
    /// of a block in lockstep (32-lane warps or 64-lane waves), with race and missing-wait
    /// checks. Tensors live in host memory. For small shapes: it is slow.
    Sim(Target),
}

impl Device {
    /// `TILELANG_DEVICE` when it is set to a usable device (`cpu`, `cuda`, `cuda:N`, `hip`,
    /// `hip:N`), else a CUDA GPU when the driver loads and reports one, else an AMD GPU when
    /// ROCm's HIP runtime loads and reports one, else the CPU. Never panics: a missing or broken
    /// CUDA or ROCm installation means the next choice.
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
        } else if crate::hip::device_count() > 0 {
            Device::Hip(0)
        } else {
            Device::Cpu
        }
    }

    /// Whether tensors can be made and kernels run here.
    pub fn is_available(&self) -> bool {
        match self {
            Device::Cpu | Device::Sim(_) => true,
            Device::Cuda(i) => crate::cuda_probe::check(*i).is_ok(),
            Device::Hip(i) => crate::hip::check(*i).is_ok(),
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

    /// Number of usable HIP (AMD) devices (0 without ROCm or an AMD GPU).
    pub fn hip_count() -> usize {
        crate::hip::device_count()
    }

    /// Why there is no HIP device, when there is none: where `libamdhip64.so` was looked for,
    /// or what the runtime reported.
    pub fn hip_unavailable_reason() -> Option<String> {
        crate::hip::unavailable_reason()
    }

    /// A name that identifies the hardware, for cache keys and tuning records: the GPU's
    /// marketing name (for an AMD GPU with its architecture and a note that the HIP backend is
    /// untested on hardware), or the host CPU's model.
    pub fn name(&self) -> Result<String> {
        match self {
            Device::Cpu => Ok(crate::cpu::host_cpu_id()),
            Device::Sim(t) => Ok(format!("tilelang-sim ({t})")),
            Device::Cuda(i) => crate::cuda_probe::name(*i),
            Device::Hip(i) => Ok(crate::hip::device(*i)?.display_name()),
        }
    }

    /// Properties of a CUDA device (multiprocessors, L2 size, shared memory limits); opens the
    /// device.
    pub fn cuda_props(&self) -> Result<crate::cuda::DeviceProps> {
        match self {
            Device::Cpu | Device::Sim(_) | Device::Hip(_) => Err(RuntimeError::DeviceUnavailable {
                device: self.to_string(),
                reason: "only a CUDA device has CUDA properties".into(),
            }),
            Device::Cuda(i) => Ok(crate::cuda::device(*i)?.props().clone()),
        }
    }

    /// Properties of an AMD device (compute units, L2 size, LDS limit, architecture name);
    /// opens the device.
    pub fn hip_props(&self) -> Result<crate::hip::HipProps> {
        match self {
            Device::Hip(i) => Ok(crate::hip::device(*i)?.props().clone()),
            _ => Err(RuntimeError::DeviceUnavailable {
                device: self.to_string(),
                reason: "only a HIP device has HIP properties".into(),
            }),
        }
    }

    /// Wait for all work queued on this device (a no-op on the CPU).
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Device::Cpu | Device::Sim(_) => Ok(()),
            Device::Cuda(i) => crate::cuda::device(*i)?.synchronize(),
            Device::Hip(i) => crate::hip::device(*i)?.synchronize(),
        }
    }

    /// The simulator of sm_80 kernels.
    pub const SIM: Device = Device::Sim(Target::SM80);

    /// Parse `cpu`, `cuda`, `cuda:N`, `hip`, `hip:N` (also spelled `rocm`, `amd`), `sim`
    /// (sm_80 kernels) and `sim:TARGET` (`sim:gfx950`, `sim:sm_90a`, ...).
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
        for amd in ["hip", "rocm", "amd"] {
            if t == amd {
                return Ok(Device::Hip(0));
            }
            if let Some(n) = t.strip_prefix(amd).and_then(|r| r.strip_prefix(':')) {
                if let Ok(i) = n.parse::<usize>() {
                    return Ok(Device::Hip(i));
                }
            }
        }
        Err(RuntimeError::DeviceUnavailable {
            device: s.to_string(),
            reason: "unknown device name; use cpu, cuda, cuda:N, hip, hip:N, sim or sim:TARGET (sim:gfx950)"
                .into(),
        })
    }

    /// The compile target for this device: `Target::Cuda { sm }` from a GPU's compute
    /// capability (sm 90 gives the `sm_90a` arch); `Target::Hip { gfx }` from an AMD GPU's
    /// `gcnArchName` (`gfx950:sramecc+:xnack-` is gfx950), an error for architectures other than
    /// gfx942 and gfx950.
    pub fn target(&self) -> Result<Target> {
        match self {
            Device::Cpu => Ok(Target::Cpu),
            Device::Sim(t) => Ok(*t),
            Device::Cuda(i) => crate::cuda_probe::target_of(*i),
            Device::Hip(i) => crate::hip::device(*i)?.props().target().map_err(|reason| {
                RuntimeError::DeviceUnavailable {
                    device: self.to_string(),
                    reason,
                }
            }),
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

    pub fn is_hip(&self) -> bool {
        matches!(self, Device::Hip(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Sim(t) if *t == Target::SM80 => write!(f, "sim"),
            Device::Sim(t) => write!(f, "sim:{t}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Hip(i) => write!(f, "hip:{i}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display() {
        for (s, d) in [
            ("hip", Device::Hip(0)),
            ("HIP:3", Device::Hip(3)),
            ("rocm", Device::Hip(0)),
            ("rocm:1", Device::Hip(1)),
            ("amd:2", Device::Hip(2)),
            ("cuda:1", Device::Cuda(1)),
            ("cpu", Device::Cpu),
        ] {
            assert_eq!(Device::parse(s).unwrap(), d, "{s}");
        }
        assert_eq!(Device::Hip(2).to_string(), "hip:2");
        assert_eq!(
            Device::parse(&Device::Hip(5).to_string()).unwrap(),
            Device::Hip(5)
        );
        assert!(Device::parse("hip:x").is_err());
        assert!(Device::parse("hipster").is_err());
        assert!(Device::Hip(0).is_hip() && !Device::Hip(0).is_host());
    }
}
