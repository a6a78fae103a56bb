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
#[error("{}", parse_error_message(.0))]
pub struct ParseTargetError(pub String);

/// What [`ParseTargetError`] says: every target name, and for an AMD architecture tilelang does
/// not compile for (`gfx90a`, `gfx1100`, ...) that it is one, with the AMD targets first.
fn parse_error_message(name: &str) -> String {
    let all = "use cpu, sm_80, sm_86, sm_89, sm_90a, gfx942 (MI300X) or gfx950 (MI355X)";
    let t = name.trim().to_ascii_lowercase();
    let t = t.strip_prefix("hip:").unwrap_or(&t);
    if t.starts_with("gfx") {
        format!(
            "`{name}` is an AMD architecture tilelang does not compile for: its AMD targets are gfx942 (MI300X/MI325X) and gfx950 (MI350X/MI355X); {all}"
        )
    } else {
        format!("unknown target `{name}`: {all}")
    }
}

/// An MFMA instruction an AMD GPU has: `v_mfma_f32_{m}x{n}x{k}_{f16|bf16}` (f32 accumulate).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Mfma {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

impl Mfma {
    /// Operand elements each of the 64 lanes holds (A and B alike).
    pub fn operand_elems(self) -> u32 {
        self.m * self.k / 64
    }
    /// Accumulator f32 values each lane holds.
    pub fn acc_elems(self) -> u32 {
        self.m * self.n / 64
    }
}

/// What an AMD CDNA GPU offers the compiler.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AmdArch {
    pub gfx: u32,
    /// LDS per workgroup (and per CU), bytes.
    pub lds_bytes: usize,
    /// The 16-bit-input MFMA shapes (f16 and bf16 alike), the preferred first.
    pub mfma: &'static [Mfma],
    /// The widest `buffer_load … lds` (direct to LDS) per lane, bytes: dwordx4 on gfx950,
    /// dword on gfx942.
    pub buffer_lds_bytes: u32,
    /// `ds_read_b64_tr_b16` (gfx950): a 16-lane group reads a 4 × 16 block of 16-bit elements
    /// transposed, so an MFMA operand stored K-strided in LDS is read 8 bytes per lane.
    pub lds_transpose_reads: bool,
    /// Unified vector registers (arch VGPRs + AGPRs) per lane of a SIMD, shared by its waves.
    pub vgprs_per_simd: u32,
    /// Registers are allocated in granules of this many.
    pub vgpr_granule: u32,
    /// The most waves one SIMD holds.
    pub max_waves_per_simd: u32,
    pub simds_per_cu: u32,
    /// Compute units of the flagship part (MI300X: 304, MI355X: 256).
    pub compute_units: u32,
    /// Accelerator complex dies: consecutive workgroups go to different XCDs round-robin, each
    /// with its own L2.
    pub xcds: u32,
}

const MFMA_GFX942: &[Mfma] = &[
    Mfma {
        m: 16,
        n: 16,
        k: 16,
    },
    Mfma { m: 32, n: 32, k: 8 },
];
const MFMA_GFX950: &[Mfma] = &[
    Mfma {
        m: 16,
        n: 16,
        k: 32,
    },
    Mfma {
        m: 32,
        n: 32,
        k: 16,
    },
    Mfma {
        m: 16,
        n: 16,
        k: 16,
    },
    Mfma { m: 32, n: 32, k: 8 },
];

impl AmdArch {
    pub fn has_mfma(&self, m: u32, n: u32, k: u32) -> bool {
        self.mfma.iter().any(|x| (x.m, x.n, x.k) == (m, n, k))
    }

    /// Waves per SIMD a kernel using `vgprs` unified registers per lane can keep resident
    /// (registers only; LDS and the workgroup size limit it further).
    pub fn waves_per_simd(&self, vgprs: u32) -> u32 {
        let g = self.vgpr_granule;
        let alloc = vgprs.max(1).div_ceil(g) * g;
        (self.vgprs_per_simd / alloc).min(self.max_waves_per_simd)
    }
}

impl Target {
    pub const SM80: Target = Target::Cuda { sm: 80 };
    pub const SM90: Target = Target::Cuda { sm: 90 };
    /// AMD Instinct MI300X (CDNA3).
    pub const GFX942: Target = Target::Hip { gfx: 942 };
    /// AMD Instinct MI355X / MI350X (CDNA4).
    pub const GFX950: Target = Target::Hip { gfx: 950 };

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
        let t = t.strip_prefix("hip:").unwrap_or(t);
        match t {
            "gfx942" | "mi300x" | "mi300" => return Ok(Target::GFX942),
            "gfx950" | "mi355x" | "mi350x" | "mi355" | "mi350" => return Ok(Target::GFX950),
            _ => {}
        }
        Err(ParseTargetError(s.to_string()))
    }

    pub fn is_gpu(self) -> bool {
        !matches!(self, Target::Cpu)
    }
    pub fn is_cuda(self) -> bool {
        matches!(self, Target::Cuda { .. })
    }
    pub fn is_hip(self) -> bool {
        matches!(self, Target::Hip { .. })
    }

    /// The AMD architecture's properties (`None` for other targets and unknown gfx numbers).
    pub fn amd(self) -> Option<AmdArch> {
        let base = AmdArch {
            gfx: 942,
            lds_bytes: 64 * 1024,
            mfma: MFMA_GFX942,
            buffer_lds_bytes: 4,
            lds_transpose_reads: false,
            vgprs_per_simd: 512,
            vgpr_granule: 8,
            max_waves_per_simd: 8,
            simds_per_cu: 4,
            compute_units: 304,
            xcds: 8,
        };
        match self {
            Target::Hip { gfx: 942 } => Some(base),
            Target::Hip { gfx: 950 } => Some(AmdArch {
                gfx: 950,
                lds_bytes: 160 * 1024,
                mfma: MFMA_GFX950,
                buffer_lds_bytes: 16,
                lds_transpose_reads: true,
                compute_units: 256,
                ..base
            }),
            _ => None,
        }
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
            Target::Hip { .. } => self.amd().map_or(64 * 1024, |a| a.lds_bytes),
        }
    }

    /// Asynchronous global→shared copies (cp.async, sm_80+).
    pub fn has_cp_async(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm >= 80)
    }
    /// Asynchronous global→shared copies a software pipeline can run ahead: cp.async (sm_80+),
    /// direct-to-LDS buffer loads (gfx942, gfx950).
    pub fn has_async_copy(self) -> bool {
        self.has_cp_async() || self.amd().is_some()
    }
    /// Warp-level tensor cores (mma.sync m16n8k16).
    pub fn has_mma_sync(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm >= 80)
    }
    /// Warpgroup tensor cores, TMA and mbarrier transactions (sm_90a).
    pub fn has_wgmma(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm == 90)
    }
    /// The tensor-memory accelerator (bulk tensor copies completing on mbarriers), sm_90.
    pub fn has_tma(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm >= 90)
    }
    /// Thread-block clusters: blocks scheduled together, with a barrier across them, sm_90.
    pub fn has_clusters(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm >= 90)
    }
    /// Programmatic dependent launch (`griddepcontrol`, sm_90): a kernel may start while the
    /// one before it in the stream finishes, and waits for it before touching memory.
    pub fn has_grid_dependency_control(self) -> bool {
        matches!(self, Target::Cuda { sm } if sm >= 90)
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
    fn amd_occupancy_follows_the_unified_register_file() {
        let a = Target::GFX950.amd().expect("gfx950");
        assert_eq!(a.waves_per_simd(256), 2);
        assert_eq!(a.waves_per_simd(204), 2);
        assert_eq!(a.waves_per_simd(128), 4);
        assert_eq!(a.waves_per_simd(512), 1);
        assert_eq!(a.waves_per_simd(24), 8);
        assert!(
            a.has_mfma(16, 16, 32) && !Target::GFX942.amd().expect("gfx942").has_mfma(16, 16, 32)
        );
    }

    #[test]
    fn parses_names() {
        assert_eq!(Target::parse("sm_90a"), Ok(Target::SM90));
        assert_eq!(Target::parse("cuda:sm_80"), Ok(Target::SM80));
        assert_eq!(Target::parse("gfx942"), Ok(Target::Hip { gfx: 942 }));
        assert_eq!(Target::parse("hip:gfx950"), Ok(Target::GFX950));
        assert!(
            Target::parse("gfx90a").is_err(),
            "only CDNA3/CDNA4 are targets"
        );
        for name in ["gfx90a", "GFX1100", "hip:gfx908"] {
            let e = Target::parse(name).unwrap_err().to_string();
            assert!(
                e.contains(&format!("`{name}` is an AMD architecture"))
                    && e.contains("gfx942")
                    && e.contains("gfx950"),
                "{e}"
            );
        }
        let e = Target::parse("sm_5").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown target `sm_5`") && e.contains("sm_90a") && e.contains("gfx950"),
            "{e}"
        );
        assert_eq!(Target::GFX950.warp_size(), 64);
        assert_eq!(Target::GFX950.max_shared_bytes(), 160 * 1024);
        assert_eq!(Target::GFX942.max_shared_bytes(), 64 * 1024);
        assert_eq!(Target::parse("cpu"), Ok(Target::Cpu));
        assert!(Target::parse("sm_x").is_err());
        assert_eq!(Target::SM90.arch(), "sm_90a");
    }
}
