//! Targets: what each one offers (instructions, memory sizes) so passes can ask instead of
//! hard-coding an architecture.

use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Target {
    /// The host CPU: C compiled by the system compiler, one OS thread per block at a time.
    Cpu,
    /// NVIDIA, by compute capability (80 = sm_80, 90 = sm_90a).
    Cuda { sm: u32 },
    /// AMD CDNA, by gfx number (942, 950).
    Hip { gfx: u32 },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown target `{0}`: use cpu, sm_80, sm_86, sm_89, sm_90a, gfx942 or gfx950")]
pub struct ParseTargetError(pub String);

impl Target {
    pub const SM80: Target = Target::Cuda { sm: 80 };
    pub const SM90: Target = Target::Cuda { sm: 90 };

    pub fn parse(s: &str) -> Result<Target, ParseTargetError> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_prefix("cuda:").unwrap_or(&t);
        if t == "cpu" || t == "c" {
            return Ok(Target::Cpu);
        }
        if let Some(rest) = t.strip_prefix("sm_") {
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(sm) = digits.parse::<u32>() {
                if (70..=120).contains(&sm) {
                    return Ok(Target::Cuda { sm });
                }
            }
        }
        if let Some(rest) = t.strip_prefix("gfx") {
            if let Ok(gfx) = rest.parse::<u32>() {
                return Ok(Target::Hip { gfx });
            }
        }
        Err(ParseTargetError(s.to_string()))
    }

    pub fn is_gpu(self) -> bool {
        !matches!(self, Target::Cpu)
    }
    pub fn is_cuda(self) -> bool {
        matches!(self, Target::Cuda { .. })
    }

    /// The architecture name compilers take: `sm_90a` (Hopper-specific instructions need the
    /// `a` variant), `sm_80`, `gfx942`, `cpu`.
    pub fn arch(self) -> String {
        match self {
            Target::Cpu => "cpu".into(),
            Target::Cuda { sm: 90 } => "sm_90a".into(),
            Target::Cuda { sm } => format!("sm_{sm}"),
            Target::Hip { gfx } => format!("gfx{gfx}"),
        }
    }

    pub fn warp_size(self) -> u32 {
        match self {
            Target::Cpu => 1,
            Target::Cuda { .. } => 32,
            Target::Hip { .. } => 64,
        }
    }

    /// Shared memory (LDS) a block may use, in bytes.
    pub fn max_shared_bytes(self) -> usize {
        match self {
            Target::Cpu => 8 << 20,
            Target::Cuda { sm } if sm >= 90 => 227 * 1024,
            Target::Cuda { sm: 80 } => 163 * 1024,
            Target::Cuda { sm } if sm >= 86 => 99 * 1024,
            Target::Cuda { .. } => 96 * 1024,
            Target::Hip { gfx } if gfx >= 950 => 160 * 1024,
            Target::Hip { .. } => 64 * 1024,
        }
    }

    /// Asynchronous global→shared copies (cp.async, sm_80+).
    pub fn has_cp_async(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm >= 80)
    }
    /// Warp-level tensor cores (mma.sync m16n8k16).
    pub fn has_mma_sync(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm >= 80)
    }
    /// Warpgroup tensor cores, TMA and mbarrier transactions (sm_90a).
    pub fn has_wgmma(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm == 90)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.arch())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!(Target::parse("sm_90a"), Ok(Target::SM90));
        assert_eq!(Target::parse("cuda:sm_80"), Ok(Target::SM80));
        assert_eq!(Target::parse("gfx942"), Ok(Target::Hip { gfx: 942 }));
        assert_eq!(Target::parse("cpu"), Ok(Target::Cpu));
        assert!(Target::parse("sm_x").is_err());
        assert_eq!(Target::SM90.arch(), "sm_90a");
    }
}
