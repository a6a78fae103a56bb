//! Static report of the AMDGPU assembly clang prints for a kernel (`clang++ -x hip
//! --offload-arch=gfx950 -nogpulib -nogpuinc --cuda-device-only -O3 -S`): registers, spills,
//! LDS, an occupancy estimate, and what one trip of the main loop issues (MFMAs, LDS reads,
//! global loads, waits, barriers, scheduling hints).
//!
//! Nothing runs on a GPU: these numbers describe code, not performance. They exist so that our
//! kernels can be compared with the public peers' (FlyDSL, Triton) numbers in
//! `design/amd-peers/README.md`, which come from that folder's `isa_metrics.py`. The metric
//! definitions are therefore that script's, and on the same assembly the numbers agree with
//! it; where this module says more (vmcnt(0) waits, the gap between vector-memory loads), the
//! extra metric is documented on its field.
//!
//! The input is text: it is parsed with plain string handling (`;` starts a comment, lines
//! starting with `.` are directives, `name:` is a label, anything else is an instruction whose
//! first word is the mnemonic). Malformed input gives an [`IsaError`], never a panic.
//!
//! ```
//! let asm = "\t.amdgcn_target \"amdgcn-amd-amdhsa--gfx950\"\n\t.type k,@function\nk:\n\ts_endpgm\n.Lfunc_end0:\n\t.amdgpu_metadata\n---\namdhsa.kernels:\n  - .agpr_count: 0\n    .group_segment_fixed_size: 0\n    .max_flat_workgroup_size: 256\n    .name: k\n    .private_segment_fixed_size: 0\n    .sgpr_count: 6\n    .sgpr_spill_count: 0\n    .vgpr_count: 2\n    .vgpr_spill_count: 0\n    .wavefront_size: 64\n...\n\t.end_amdgpu_metadata\n\t.set k.num_vgpr, 2\n\t.set k.num_agpr, 0\n";
//! let r = tl_amdgpu::isa::report(asm)?;
//! assert_eq!((r.kernel.arch.as_str(), r.kernel.occupancy), ("gfx950", 8));
//! assert!(r.main_loop.is_none());
//! # Ok::<(), tl_amdgpu::isa::IsaError>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};

/// Why the assembly could not be reported on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    /// No function in the text is a kernel: a kernel is a `.type NAME,@function` symbol with an
    /// entry in the `.amdgpu_metadata` block or an `.amdhsa_kernel` descriptor (a symbol with
    /// neither is a device helper function).
    #[error("no kernel in the assembly: no `.type NAME,@function` symbol has `.amdgpu_metadata` or an `.amdhsa_kernel` descriptor")]
    NoKernel,
    /// A number the report needs is not in the assembly (e.g. `-S` output cut short).
    #[error("kernel `{kernel}`: {what} is missing from the assembly")]
    Missing { kernel: String, what: &'static str },
    /// A number the report needs is there but is not a decimal number.
    #[error("kernel `{kernel}`: {what} is `{value}`, not a number")]
    BadNumber {
        kernel: String,
        what: &'static str,
        value: String,
    },
}

/// Registers, memory and occupancy of one kernel, from its metadata, its kernel descriptor and
/// the `.set` resource symbols clang prints after the function.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelResources {
    /// The kernel's symbol.
    pub name: String,
    /// The target from `.amdgcn_target` (`gfx942`, `gfx950`), without target-id features.
    pub arch: String,
    /// Architectural VGPRs: `.set <kernel>.num_vgpr` (or `.L<kernel>.num_vgpr`), else the
    /// `; NumVgprs:` comment.
    pub arch_vgprs: u32,
    /// Accumulation VGPRs: `.set <kernel>.num_agpr`, else `; NumAgprs:`, else the metadata
    /// `.agpr_count`.
    pub agprs: u32,
    /// VGPRs allocated per lane: the larger of the metadata `.vgpr_count` (the unified
    /// arch + acc total on gfx90a/gfx94x/gfx950) and the descriptor's `.amdhsa_next_free_vgpr`
    /// (what the hardware allocates from; LLVM raises it when LDS already limits occupancy).
    pub alloc_vgprs: u32,
    /// The granule-rounded (8) unified VGPR count the occupancy estimate uses: with AGPRs in
    /// use, `.amdhsa_accum_offset + .agpr_count`, else `.vgpr_count`; at least
    /// `.amdhsa_next_free_vgpr`. `None` where the unified file is not modelled (other archs).
    pub unified_vgprs: Option<u32>,
    /// Metadata `.sgpr_count`.
    pub sgprs: u32,
    /// Metadata `.vgpr_spill_count`.
    pub vgpr_spills: u32,
    /// Metadata `.sgpr_spill_count`.
    pub sgpr_spills: u32,
    /// Scratch (private segment) bytes per lane: metadata `.private_segment_fixed_size`.
    pub scratch_bytes: u32,
    /// Static LDS bytes per workgroup: metadata `.group_segment_fixed_size` (our kernels
    /// allocate no dynamic LDS).
    pub lds_bytes: u32,
    /// Threads per workgroup: the product of `.reqd_workgroup_size` when given, else
    /// `.max_flat_workgroup_size` (the launch bound).
    pub workgroup_size: u32,
    /// Metadata `.wavefront_size` (64 when absent).
    pub wave_size: u32,
    /// Waves per SIMD the VGPRs allow: `512 / unified_vgprs`, at most 8.
    pub vgpr_waves_per_simd: Option<u32>,
    /// Waves per SIMD the LDS allows, averaged over the CU's 4 SIMDs: workgroups per CU
    /// (64 KiB per CU on gfx942, 160 KiB on gfx950, over `lds_bytes`) times waves per workgroup,
    /// over 4. Fractional (2.5) when waves do not spread evenly, as the peers' script reports
    /// it. `None` when the kernel uses no LDS or the arch is not modelled.
    pub lds_waves_per_simd: Option<f64>,
    /// Waves per SIMD: the smaller of the two limits (the LDS one rounded down), at most 8.
    /// SGPR limits are not modelled, as in the peers' numbers; a limit that is not modelled
    /// for the arch does not constrain.
    pub occupancy: u32,
}

/// What one trip of the main loop issues. The main loop is, among the back-edge regions (a
/// conditional or unconditional branch to a label defined earlier in the same function; the
/// region runs from that label to the branch), the one with the most MFMAs, the shortest on a
/// tie. Counts cover every instruction of the region, nested labels included, so a region with
/// an internal branch counts both sides once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoopReport {
    /// The label the back-edge branches to.
    pub header: String,
    /// The back-edge branch's mnemonic (`s_cbranch_scc1`, `s_branch`).
    pub backedge: String,
    /// Basic blocks in the region: the header, plus each nested label or `; %bb.N:` comment.
    pub basic_blocks: u32,
    /// All instructions in the region (the back-edge branch included).
    pub instructions: u32,
    /// `v_mfma*` and `v_smfmac*`.
    pub mfma: u32,
    /// MFMAs by mnemonic, `v_mfma_f32_` dropped (`16x16x32_bf16`); other MFMAs lose `v_` only
    /// (`mfma_i32_16x16x64_i8`).
    pub mfma_variants: BTreeMap<String, u32>,
    /// `ds_read*` / `ds_load*`.
    pub ds_read: u32,
    /// LDS reads by mnemonic without `ds_` and `read_`/`load_`: the width for plain reads
    /// (`b128`, `u16`, `b64_tr_b16`), `read2…` for two-address reads (`read2st64_b64`).
    pub ds_read_widths: BTreeMap<String, u32>,
    /// `ds_write*` / `ds_store*`.
    pub ds_write: u32,
    /// Vector-memory loads: `buffer_load*`, `global_load*`, `flat_load*`.
    pub vmem_loads: u32,
    /// Those loads that write LDS directly (`lds` modifier, or `_lds` in the mnemonic).
    pub vmem_loads_lds: u32,
    /// `buffer_store*`, `global_store*`, `flat_store*`.
    pub vmem_stores: u32,
    /// `scratch_load*` / `scratch_store*`: spill traffic inside the loop.
    pub scratch: u32,
    /// `s_waitcnt*` instructions.
    pub waitcnt: u32,
    /// Those that wait on vmcnt (one instruction can wait on vmcnt and lgkmcnt).
    pub waitcnt_vmcnt: u32,
    /// Those that wait on lgkmcnt.
    pub waitcnt_lgkmcnt: u32,
    /// Those that wait for vmcnt(0): every vector-memory load in flight, which drains the
    /// global-load pipeline (not in the peers' script).
    pub vmcnt_zero: u32,
    /// `s_barrier*`.
    pub barriers: u32,
    /// `s_setprio`.
    pub setprio: u32,
    /// `s_nop`.
    pub s_nop: u32,
    /// `; sched_barrier` comments (the verbose asm's trace of `__builtin_amdgcn_sched_barrier`).
    pub sched_barrier: u32,
    /// `; sched_group_barrier` comments.
    pub sched_group_barrier: u32,
    /// `; iglp_opt` comments.
    pub iglp_opt: u32,
    /// `v_*` other than MFMAs (`v_accvgpr_*` included).
    pub valu: u32,
    /// `s_*` other than scalar memory and program control (waits, barriers, priorities, nops,
    /// branches, ...): the script's lists, see `SMEM` and `CONTROL` in the source.
    pub salu: u32,
    /// Longest run of non-MFMA instructions between two consecutive MFMAs of the region: how
    /// long the matrix pipe can sit idle within a trip. `None` with fewer than two MFMAs.
    pub max_gap_between_mfma: Option<u32>,
    /// Non-MFMA instructions before the first MFMA plus after the last one: the idle stretch
    /// across the back-edge (the script's `wraparound_non_mfma_run`). `None` without MFMAs.
    pub wraparound_gap_mfma: Option<u32>,
    /// Longest run of instructions other than vector-memory loads (s_nop included) between two
    /// consecutive vector-memory loads of the region: how spread out the global→LDS/VGPR
    /// traffic is (not in the peers' script). `None` with fewer than two loads.
    pub max_gap_between_buffer_loads: Option<u32>,
    /// The same within clusters of loads: the longest run between two consecutive vector-memory
    /// loads with no MFMA or LDS read between them (HipKittens keeps ~3 instructions there; a
    /// schedule that spreads a tile's loads between MFMA rounds is measured by the cluster, not
    /// by the compute between clusters). `None` when no two loads are adjacent that way.
    pub max_gap_in_load_clusters: Option<u32>,
}

/// The report on the first kernel of an assembly file.
#[derive(Debug, Clone, PartialEq)]
pub struct IsaReport {
    pub kernel: KernelResources,
    /// Back-edge regions found (loops, counting each back-edge once).
    pub back_edges: u32,
    /// `None` when no back-edge region contains an MFMA (no loop, or a loop without MFMAs:
    /// there is no main loop in the peers' sense).
    pub main_loop: Option<LoopReport>,
}

/// Report on the first kernel in `asm` (the text `clang -S` prints; ours hold one kernel).
pub fn report(asm: &str) -> Result<IsaReport, IsaError> {
    let items: Vec<Item> = asm.lines().filter_map(parse_line).collect();
    let functions: Vec<&str> = items
        .iter()
        .filter_map(|it| match it {
            Item::Directive(d) => function_symbol(d),
            _ => None,
        })
        .collect();
    let metadata = metadata(asm);
    let descriptors = descriptors(asm);
    let (start, name) = items
        .iter()
        .enumerate()
        .find_map(|(i, it)| match it {
            Item::Label(l)
                if functions.contains(l)
                    && (metadata.contains_key(l) || descriptors.contains_key(l)) =>
            {
                Some((i, *l))
            }
            _ => None,
        })
        .ok_or(IsaError::NoKernel)?;
    // The body runs to `.Lfunc_endN` (or, failing that, the next function's label).
    let end = items[start + 1..]
        .iter()
        .position(|it| {
            matches!(it, Item::Label(l) if l.starts_with(".Lfunc_end") || functions.contains(l))
        })
        .map_or(items.len(), |p| start + 1 + p);
    let body = &items[start + 1..end];
    let info = kernel_info(&items[end..], &functions);
    let empty = Metadata::default();
    let md = metadata.get(name).unwrap_or(&empty);
    let no_kd = HashMap::new();
    let kd = descriptors.get(name).unwrap_or(&no_kd);
    let kernel = resources(asm, name, md, kd, &info)?;

    let loops = back_edges(body);
    let mut best: Option<(u32, u32, usize, usize)> = None;
    for &(a, b) in &loops {
        let region = &body[a..=b];
        let mfma = count(region, |m, _| is_mfma(m));
        let n = count(region, |_, _| true);
        // Most MFMAs, then fewest instructions; the first such region on a full tie.
        let better = match best {
            None => true,
            Some((bm, bn, _, _)) => mfma > bm || (mfma == bm && n < bn),
        };
        if better {
            best = Some((mfma, n, a, b));
        }
    }
    let main_loop = match best {
        Some((mfma, _, a, b)) if mfma > 0 => Some(loop_report(&body[a..=b])),
        _ => None,
    };
    Ok(IsaReport {
        kernel,
        back_edges: count_u32(loops.len()),
        main_loop,
    })
}

// ---------------------------------------------------------------- lines

/// One non-empty line of assembly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item<'a> {
    Label(&'a str),
    Instr {
        mnemonic: &'a str,
        operands: &'a str,
    },
    /// A comment-only line that records a scheduling hint (`sched_barrier mask(...)`,
    /// `sched_group_barrier ...`, `iglp_opt ...`): the hints emit no instruction, so the
    /// verbose asm's comment is their only trace.
    Sched(&'a str),
    /// `; %bb.N:`: a basic block that got no label (fall-through only).
    Block,
    Directive(&'a str),
    Comment(&'a str),
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `s` starts with `word` and the next character (if any) does not continue the word.
fn starts_with_word(s: &str, word: &str) -> bool {
    s.strip_prefix(word)
        .is_some_and(|rest| !rest.starts_with(is_word))
}

fn parse_line(raw: &str) -> Option<Item<'_>> {
    let line = raw.trim();
    if line.is_empty() {
        return None;
    }
    let (code, comment) = match line.find(';') {
        Some(i) => (line[..i].trim(), line[i + 1..].trim()),
        None => (line, ""),
    };
    if code.is_empty() {
        let hint = ["sched_barrier", "sched_group_barrier", "iglp_opt"]
            .iter()
            .any(|w| starts_with_word(comment, w));
        let block = comment
            .strip_prefix("%bb.")
            .and_then(|r| r.split_once(':'))
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        return Some(if hint {
            Item::Sched(comment)
        } else if block {
            Item::Block
        } else {
            Item::Comment(comment)
        });
    }
    if code.ends_with(':') {
        if let Some((name, _)) = code.split_once(':') {
            if !name.is_empty() && name.chars().all(|c| is_word(c) || c == '.' || c == '$') {
                return Some(Item::Label(name));
            }
        }
    }
    if code.starts_with('.') {
        return Some(Item::Directive(code));
    }
    let (mnemonic, operands) = code
        .split_once(char::is_whitespace)
        .map_or((code, ""), |(m, o)| (m, o.trim()));
    Some(Item::Instr { mnemonic, operands })
}

/// `NAME` of a `.type NAME,@function` directive.
fn function_symbol(directive: &str) -> Option<&str> {
    let rest = directive.strip_prefix(".type")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let (name, kind) = rest.split_once(',')?;
    (kind.trim_start().starts_with("@function")).then_some(name.trim())
}

// ---------------------------------------------------------------- classification

/// After `s_`: scalar memory instructions (not SALU work).
const SMEM: &[&str] = &[
    "load",
    "buffer_load",
    "store",
    "buffer_store",
    "scratch_",
    "dcache",
    "memtime",
    "memrealtime",
    "atc_probe",
];

/// After `s_`: program control and synchronisation (SOPP-style), not SALU work.
const CONTROL: &[&str] = &[
    "waitcnt",
    "barrier",
    "setprio",
    "nop",
    "branch",
    "cbranch",
    "endpgm",
    "sleep",
    "sched",
    "trap",
    "sethalt",
    "setkill",
    "icache",
    "wakeup",
    "ttrace",
    "incperflevel",
    "decperflevel",
    "denorm_mode",
    "round_mode",
    "code_end",
    "wait_",
    "waitcnt_",
    "set_inst_prefetch",
    "clause",
    "delay_alu",
    "getpc",
    "setpc",
    "swappc",
    "call",
    "rfe",
    "sendmsg",
];

fn is_mfma(m: &str) -> bool {
    m.starts_with("v_mfma") || m.starts_with("v_smfmac")
}

fn is_ds_read(m: &str) -> bool {
    m.starts_with("ds_read") || m.starts_with("ds_load")
}

fn is_ds_write(m: &str) -> bool {
    m.starts_with("ds_write") || m.starts_with("ds_store")
}

fn is_vmem(m: &str, op: &str) -> bool {
    ["buffer_", "global_", "flat_"]
        .iter()
        .any(|p| m.strip_prefix(p).is_some_and(|r| r.starts_with(op)))
}

fn is_vmem_load(m: &str) -> bool {
    is_vmem(m, "load")
}

fn scalar_in(m: &str, prefixes: &[&str]) -> bool {
    m.strip_prefix("s_")
        .is_some_and(|r| prefixes.iter().any(|p| r.starts_with(p)))
}

fn is_salu(m: &str) -> bool {
    m.starts_with("s_") && !scalar_in(m, SMEM) && !scalar_in(m, CONTROL)
}

fn is_branch(m: &str) -> bool {
    m == "s_branch"
        || m.strip_prefix("s_cbranch_")
            .is_some_and(|r| !r.is_empty() && r.chars().all(is_word))
}

/// A load that writes LDS directly: `lds` operand modifier, or `_lds` in the mnemonic.
fn is_lds_load(m: &str, operands: &str) -> bool {
    m.contains("_lds_") || m.ends_with("_lds") || operands.split_whitespace().any(|t| t == "lds")
}

/// An `s_waitcnt` that waits for vmcnt(0).
fn waits_vmcnt_zero(m: &str, operands: &str) -> bool {
    if m == "s_waitcnt_vmcnt" {
        // `s_waitcnt_vmcnt null, 0x0`: the count is the last operand.
        return operands
            .rsplit(',')
            .next()
            .and_then(|v| parse_int(v.trim()))
            == Some(0);
    }
    operands.match_indices("vmcnt(").any(|(i, pat)| {
        operands[i + pat.len()..]
            .split_once(')')
            .and_then(|(n, _)| parse_int(n.trim()))
            == Some(0)
    })
}

fn parse_int(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => decimal(s).map(u64::from),
    }
}

/// A plain decimal `u32` (what the metadata and `.set` symbols print).
fn decimal(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn count(region: &[Item], pred: impl Fn(&str, &str) -> bool) -> u32 {
    count_u32(
        region
            .iter()
            .filter(
                |it| matches!(it, Item::Instr { mnemonic, operands } if pred(mnemonic, operands)),
            )
            .count(),
    )
}

// ---------------------------------------------------------------- loops

/// `(label index, branch index)` of every branch to a label defined earlier in `body`.
fn back_edges(body: &[Item]) -> Vec<(usize, usize)> {
    let mut labels: HashMap<&str, usize> = HashMap::new();
    for (i, it) in body.iter().enumerate() {
        if let Item::Label(l) = it {
            labels.insert(l, i);
        }
    }
    body.iter()
        .enumerate()
        .filter_map(|(i, it)| match it {
            Item::Instr { mnemonic, operands } if is_branch(mnemonic) => {
                let target = operands.split_whitespace().next()?;
                let at = *labels.get(target)?;
                (at < i).then_some((at, i))
            }
            _ => None,
        })
        .collect()
}

/// The longest run of other instructions between consecutive loads that no MFMA or LDS read
/// separates.
fn max_gap_in_clusters(mnemonics: &[&str]) -> Option<u32> {
    let mut best = None;
    let mut last_load: Option<usize> = None;
    for (i, m) in mnemonics.iter().enumerate() {
        if is_vmem_load(m) {
            if let Some(j) = last_load {
                let gap = count_u32(i - j - 1);
                best = Some(best.map_or(gap, |b: u32| b.max(gap)));
            }
            last_load = Some(i);
        } else if is_mfma(m) || m.starts_with("ds_read") || m.starts_with("ds_load") {
            last_load = None;
        }
    }
    best
}

/// Longest run of instructions failing `pred` between two consecutive ones passing it.
fn max_gap(mnemonics: &[&str], pred: impl Fn(&str) -> bool) -> Option<u32> {
    let at: Vec<usize> = (0..mnemonics.len())
        .filter(|&i| pred(mnemonics[i]))
        .collect();
    at.windows(2).map(|w| count_u32(w[1] - w[0] - 1)).max()
}

fn bump(map: &mut BTreeMap<String, u32>, key: &str) {
    *map.entry(key.to_string()).or_insert(0) += 1;
}

fn loop_report(region: &[Item]) -> LoopReport {
    let mut r = LoopReport {
        basic_blocks: 1,
        ..LoopReport::default()
    };
    if let Some(Item::Label(l)) = region.first() {
        r.header = l.to_string();
    }
    let mut mnemonics = Vec::new();
    for (i, it) in region.iter().enumerate() {
        let (m, ops) = match *it {
            Item::Instr { mnemonic, operands } => (mnemonic, operands),
            Item::Sched(s) => {
                r.sched_barrier += u32::from(s.starts_with("sched_barrier"));
                r.sched_group_barrier += u32::from(s.starts_with("sched_group_barrier"));
                r.iglp_opt += u32::from(s.starts_with("iglp_opt"));
                continue;
            }
            Item::Label(_) | Item::Block if i > 0 => {
                r.basic_blocks += 1;
                continue;
            }
            _ => continue,
        };
        mnemonics.push(m);
        r.instructions += 1;
        if is_branch(m) {
            r.backedge = m.to_string();
        }
        if is_mfma(m) {
            r.mfma += 1;
            let short = m
                .strip_prefix("v_mfma_f32_")
                .or_else(|| m.strip_prefix("v_"));
            bump(&mut r.mfma_variants, short.unwrap_or(m));
        } else if m.starts_with("v_") {
            r.valu += 1;
        }
        if is_ds_read(m) {
            r.ds_read += 1;
            let op = m.strip_prefix("ds_").unwrap_or(m);
            let width = op
                .strip_prefix("read_")
                .or_else(|| op.strip_prefix("load_"));
            bump(&mut r.ds_read_widths, width.unwrap_or(op));
        }
        r.ds_write += u32::from(is_ds_write(m));
        if is_vmem_load(m) {
            r.vmem_loads += 1;
            r.vmem_loads_lds += u32::from(is_lds_load(m, ops));
        }
        r.vmem_stores += u32::from(is_vmem(m, "store"));
        r.scratch += u32::from(m.starts_with("scratch_load") || m.starts_with("scratch_store"));
        if m.starts_with("s_waitcnt") {
            r.waitcnt += 1;
            r.waitcnt_vmcnt += u32::from(ops.contains("vmcnt") || m == "s_waitcnt_vmcnt");
            r.waitcnt_lgkmcnt += u32::from(ops.contains("lgkmcnt") || m == "s_waitcnt_lgkmcnt");
            r.vmcnt_zero += u32::from(waits_vmcnt_zero(m, ops));
        }
        r.barriers += u32::from(m.starts_with("s_barrier"));
        r.setprio += u32::from(m == "s_setprio");
        r.s_nop += u32::from(m == "s_nop");
        r.salu += u32::from(is_salu(m));
    }
    r.max_gap_between_mfma = max_gap(&mnemonics, is_mfma);
    r.max_gap_between_buffer_loads = max_gap(&mnemonics, is_vmem_load);
    r.max_gap_in_load_clusters = max_gap_in_clusters(&mnemonics);
    let first = mnemonics.iter().position(|m| is_mfma(m));
    let last = mnemonics.iter().rposition(|m| is_mfma(m));
    if let (Some(f), Some(l)) = (first, last) {
        r.wraparound_gap_mfma = Some(count_u32(f + mnemonics.len() - 1 - l));
    }
    r
}

// ---------------------------------------------------------------- resources

/// One kernel's entry of the `.amdgpu_metadata` YAML: its top-level `.key: value` pairs.
#[derive(Debug, Default)]
struct Metadata<'a> {
    keys: HashMap<&'a str, &'a str>,
    reqd_workgroup_size: Option<Vec<u32>>,
}

/// Kernel entries of the `.amdgpu_metadata` block by `.name`. The YAML is what LLVM prints:
/// an entry starts with `  - .key:` and its own keys are indented by exactly four spaces
/// (argument entries are deeper), so no YAML parser is needed.
fn metadata(asm: &str) -> HashMap<&str, Metadata<'_>> {
    let mut out = HashMap::new();
    let mut lines = asm
        .lines()
        .skip_while(|l| l.trim() != ".amdgpu_metadata")
        .skip(1)
        .take_while(|l| !l.contains(".end_amdgpu_metadata"))
        .peekable();
    let mut entries: Vec<Metadata> = Vec::new();
    while let Some(line) = lines.next() {
        let key_line = if let Some(rest) = line.strip_prefix("  - .") {
            entries.push(Metadata::default());
            rest
        } else if let Some(rest) = line.strip_prefix("    .") {
            rest
        } else {
            continue;
        };
        let Some(entry) = entries.last_mut() else {
            continue;
        };
        let Some((key, value)) = key_line.split_once(':') else {
            continue;
        };
        if key.is_empty() || !key.chars().all(is_word) {
            continue;
        }
        let value = value.trim();
        entry.keys.insert(key, value);
        if key == "reqd_workgroup_size" && value.is_empty() {
            let mut dims = Vec::new();
            while let Some(d) = lines.peek().and_then(|l| {
                l.starts_with(char::is_whitespace)
                    .then(|| l.trim().strip_prefix("- "))
                    .flatten()
                    .and_then(|n| decimal(n.trim()))
            }) {
                dims.push(d);
                lines.next();
            }
            if !dims.is_empty() {
                entry.reqd_workgroup_size = Some(dims);
            }
        }
    }
    for e in entries {
        if let Some(name) = e.keys.get("name").copied() {
            out.insert(name, e);
        }
    }
    out
}

/// `.amdhsa_kernel NAME` … `.end_amdhsa_kernel` blocks: `.amdhsa_<key> <value>` by kernel.
fn descriptors(asm: &str) -> HashMap<&str, HashMap<&str, &str>> {
    let mut out: HashMap<&str, HashMap<&str, &str>> = HashMap::new();
    let mut current: Option<&str> = None;
    for line in asm.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix(".amdhsa_kernel") {
            if name.starts_with(char::is_whitespace) {
                if let Some(name) = name.split_whitespace().next() {
                    current = Some(name);
                    out.entry(name).or_default();
                }
                continue;
            }
        }
        if line.starts_with(".end_amdhsa_kernel") {
            current = None;
            continue;
        }
        let Some(kernel) = current else { continue };
        let mut words = line.split_whitespace();
        if let (Some(key), Some(value)) = (words.next(), words.next()) {
            if let Some(key) = key.strip_prefix(".amdhsa_") {
                out.entry(kernel).or_default().insert(key, value);
            }
        }
    }
    out
}

/// The `; Kernel info:` comment block printed after the function (before the next one).
fn kernel_info<'a>(after: &[Item<'a>], functions: &[&str]) -> HashMap<&'a str, &'a str> {
    let mut out = HashMap::new();
    let rest = after
        .iter()
        .take_while(|it| !matches!(it, Item::Label(l) if functions.contains(l)))
        .skip_while(|it| !matches!(it, Item::Comment(c) if *c == "Kernel info:"));
    for it in rest.skip(1) {
        let Item::Comment(c) = it else { break };
        if let Some(i) = c.find([':', '=']) {
            if let Some(v) = c[i + 1..].split_whitespace().next() {
                out.insert(c[..i].trim(), v);
            }
        }
    }
    out
}

/// `.set <kernel>.<field>, N` (or `.set .L<kernel>.<field>, N`), when N is a number.
fn set_symbol(asm: &str, kernel: &str, field: &str) -> Option<u32> {
    asm.lines().find_map(|l| {
        let (symbol, value) = l.trim().strip_prefix(".set")?.split_once(',')?;
        let symbol = symbol.trim();
        let symbol = symbol
            .strip_prefix(".L")
            .filter(|s| s.starts_with(kernel))
            .unwrap_or(symbol);
        let f = symbol.strip_prefix(kernel)?.strip_prefix('.')?;
        (f == field).then(|| decimal(value.trim())).flatten()
    })
}

/// The gfx name in `.amdgcn_target "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"`.
fn target_arch(asm: &str) -> Option<String> {
    let line = asm
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(".amdgcn_target"))?;
    let target = line.split('"').nth(1)?;
    target.rmatch_indices("-gfx").find_map(|(i, _)| {
        let arch: String = target[i + 1..]
            .chars()
            .take_while(|&c| is_word(c))
            .collect();
        (arch.len() > 3).then_some(arch)
    })
}

/// Archs with the unified 512-entry arch+acc VGPR file per lane (CDNA2/3/4).
const UNIFIED_VGPR_ARCHS: &[&str] = &["gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"];

/// LDS bytes per CU.
fn lds_per_cu(arch: &str) -> Option<u32> {
    match arch {
        "gfx90a" | "gfx940" | "gfx941" | "gfx942" => Some(64 * 1024),
        "gfx950" => Some(160 * 1024),
        _ => None,
    }
}

fn resources(
    asm: &str,
    name: &str,
    md: &Metadata,
    kd: &HashMap<&str, &str>,
    info: &HashMap<&str, &str>,
) -> Result<KernelResources, IsaError> {
    let missing = |what| IsaError::Missing {
        kernel: name.to_string(),
        what,
    };
    let number = |what: &'static str, v: &str| {
        decimal(v).ok_or_else(|| IsaError::BadNumber {
            kernel: name.to_string(),
            what,
            value: v.to_string(),
        })
    };
    let md_opt = |key: &'static str, what| md.keys.get(key).map(|v| number(what, v)).transpose();
    let md_req = |key: &'static str, what| md_opt(key, what)?.ok_or_else(|| missing(what));
    // Descriptor values LLVM may print as expressions; only numbers are used.
    let kd_num = |key: &str| kd.get(key).and_then(|v| decimal(v));
    let info_num = |key: &str| info.get(key).and_then(|v| decimal(v));

    let arch = target_arch(asm).ok_or_else(|| missing("`.amdgcn_target`"))?;
    let vgpr_count = md_req("vgpr_count", "metadata `.vgpr_count`")?;
    let agpr_count = md_opt("agpr_count", "metadata `.agpr_count`")?;
    let arch_vgprs = set_symbol(asm, name, "num_vgpr")
        .or_else(|| info_num("NumVgprs"))
        .ok_or_else(|| missing("`.set <kernel>.num_vgpr` (or `; NumVgprs:`)"))?;
    let agprs = set_symbol(asm, name, "num_agpr")
        .or_else(|| info_num("NumAgprs"))
        .or(agpr_count)
        .unwrap_or(0);
    let next_free = kd_num("next_free_vgpr");
    let alloc_vgprs = vgpr_count.max(next_free.unwrap_or(0));
    let lds_bytes = md_req(
        "group_segment_fixed_size",
        "metadata `.group_segment_fixed_size`",
    )?;
    let wave_size = md_opt("wavefront_size", "metadata `.wavefront_size`")?.unwrap_or(64);
    let workgroup_size = match &md.reqd_workgroup_size {
        Some(dims) => dims.iter().fold(1u32, |p, &d| p.saturating_mul(d)),
        None => md_req(
            "max_flat_workgroup_size",
            "metadata `.max_flat_workgroup_size`",
        )?,
    };

    let unified_vgprs = UNIFIED_VGPR_ARCHS.contains(&arch.as_str()).then(|| {
        let agprs = agpr_count.unwrap_or(0);
        let total = if agprs > 0 {
            kd_num("accum_offset")
                .unwrap_or(vgpr_count)
                .saturating_add(agprs)
        } else {
            vgpr_count
        };
        total
            .max(next_free.unwrap_or(0))
            .div_ceil(8)
            .saturating_mul(8)
    });
    let vgpr_waves_per_simd = unified_vgprs.map(|v| 512u32.checked_div(v).map_or(8, |w| w.min(8)));
    let lds_waves_per_simd = match lds_per_cu(&arch) {
        Some(cap) if lds_bytes > 0 && workgroup_size > 0 && wave_size > 0 => {
            let per_cu = (cap / lds_bytes).saturating_mul(workgroup_size.div_ceil(wave_size));
            Some(f64::from(per_cu) / 4.0)
        }
        _ => None,
    };
    let occupancy = [
        vgpr_waves_per_simd,
        // floor: a SIMD holds whole waves.
        lds_waves_per_simd.map(|w| w.floor() as u32),
    ]
    .into_iter()
    .flatten()
    .fold(8, u32::min);

    Ok(KernelResources {
        name: name.to_string(),
        arch,
        arch_vgprs,
        agprs,
        alloc_vgprs,
        unified_vgprs,
        sgprs: md_req("sgpr_count", "metadata `.sgpr_count`")?,
        vgpr_spills: md_req("vgpr_spill_count", "metadata `.vgpr_spill_count`")?,
        sgpr_spills: md_req("sgpr_spill_count", "metadata `.sgpr_spill_count`")?,
        scratch_bytes: md_req(
            "private_segment_fixed_size",
            "metadata `.private_segment_fixed_size`",
        )?,
        lds_bytes,
        workgroup_size,
        wave_size,
        vgpr_waves_per_simd,
        lds_waves_per_simd,
        occupancy,
    })
}

// ---------------------------------------------------------------- output

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn histogram(map: &BTreeMap<String, u32>) -> String {
    if map.is_empty() {
        return "-".to_string();
    }
    let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    parts.join(", ")
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_opt(v: Option<u32>) -> String {
    v.map_or_else(|| "null".to_string(), |v| v.to_string())
}

/// A JSON object from already-rendered values, indented `depth` levels of two spaces.
fn json_object(fields: &[(&str, String)], depth: usize) -> String {
    if fields.is_empty() {
        return "{}".to_string();
    }
    let pad = "  ".repeat(depth + 1);
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{pad}{}: {v}", json_string(k)))
        .collect();
    format!("{{\n{}\n{}}}", body.join(",\n"), "  ".repeat(depth))
}

fn json_histogram(map: &BTreeMap<String, u32>, depth: usize) -> String {
    let fields: Vec<(&str, String)> = map
        .iter()
        .map(|(k, v)| (k.as_str(), v.to_string()))
        .collect();
    json_object(&fields, depth)
}

impl KernelResources {
    fn json(&self, depth: usize) -> String {
        let lds_waves = self
            .lds_waves_per_simd
            .map_or_else(|| "null".to_string(), |w| format!("{w:?}"));
        json_object(
            &[
                ("name", json_string(&self.name)),
                ("arch", json_string(&self.arch)),
                ("arch_vgprs", self.arch_vgprs.to_string()),
                ("agprs", self.agprs.to_string()),
                ("alloc_vgprs", self.alloc_vgprs.to_string()),
                ("unified_vgprs", json_opt(self.unified_vgprs)),
                ("sgprs", self.sgprs.to_string()),
                ("vgpr_spills", self.vgpr_spills.to_string()),
                ("sgpr_spills", self.sgpr_spills.to_string()),
                ("scratch_bytes", self.scratch_bytes.to_string()),
                ("lds_bytes", self.lds_bytes.to_string()),
                ("workgroup_size", self.workgroup_size.to_string()),
                ("wave_size", self.wave_size.to_string()),
                ("vgpr_waves_per_simd", json_opt(self.vgpr_waves_per_simd)),
                ("lds_waves_per_simd", lds_waves),
                ("occupancy", self.occupancy.to_string()),
            ],
            depth,
        )
    }
}

impl LoopReport {
    fn json(&self, depth: usize) -> String {
        json_object(
            &[
                ("header", json_string(&self.header)),
                ("backedge", json_string(&self.backedge)),
                ("basic_blocks", self.basic_blocks.to_string()),
                ("instructions", self.instructions.to_string()),
                ("mfma", self.mfma.to_string()),
                (
                    "mfma_variants",
                    json_histogram(&self.mfma_variants, depth + 1),
                ),
                ("ds_read", self.ds_read.to_string()),
                (
                    "ds_read_widths",
                    json_histogram(&self.ds_read_widths, depth + 1),
                ),
                ("ds_write", self.ds_write.to_string()),
                ("vmem_loads", self.vmem_loads.to_string()),
                ("vmem_loads_lds", self.vmem_loads_lds.to_string()),
                ("vmem_stores", self.vmem_stores.to_string()),
                ("scratch", self.scratch.to_string()),
                ("waitcnt", self.waitcnt.to_string()),
                ("waitcnt_vmcnt", self.waitcnt_vmcnt.to_string()),
                ("waitcnt_lgkmcnt", self.waitcnt_lgkmcnt.to_string()),
                ("vmcnt_zero", self.vmcnt_zero.to_string()),
                ("barriers", self.barriers.to_string()),
                ("setprio", self.setprio.to_string()),
                ("s_nop", self.s_nop.to_string()),
                ("sched_barrier", self.sched_barrier.to_string()),
                ("sched_group_barrier", self.sched_group_barrier.to_string()),
                ("iglp_opt", self.iglp_opt.to_string()),
                ("valu", self.valu.to_string()),
                ("salu", self.salu.to_string()),
                ("max_gap_between_mfma", json_opt(self.max_gap_between_mfma)),
                ("wraparound_gap_mfma", json_opt(self.wraparound_gap_mfma)),
                (
                    "max_gap_between_buffer_loads",
                    json_opt(self.max_gap_between_buffer_loads),
                ),
                (
                    "max_gap_in_load_clusters",
                    json_opt(self.max_gap_in_load_clusters),
                ),
            ],
            depth,
        )
    }
}

impl IsaReport {
    /// A readable multi-line report (what [`fmt::Display`] prints).
    pub fn table(&self) -> String {
        let k = &self.kernel;
        let mut s = String::new();
        let lds_waves = k
            .lds_waves_per_simd
            .map_or_else(|| "-".to_string(), |w| w.to_string());
        let _ = writeln!(s, "kernel {} ({})", k.name, k.arch);
        let _ = writeln!(
            s,
            "  registers   {} arch VGPR + {} AGPR, {} VGPR allocated (unified {}), {} SGPR",
            k.arch_vgprs,
            k.agprs,
            k.alloc_vgprs,
            opt(k.unified_vgprs),
            k.sgprs
        );
        let _ = writeln!(
            s,
            "  spills      {} VGPR, {} SGPR; scratch {} B per lane",
            k.vgpr_spills, k.sgpr_spills, k.scratch_bytes
        );
        let _ = writeln!(
            s,
            "  LDS         {} B per workgroup of {} threads (waves of {})",
            k.lds_bytes, k.workgroup_size, k.wave_size
        );
        let _ = writeln!(
            s,
            "  occupancy   {} waves/SIMD (VGPR limit {}, LDS limit {})",
            k.occupancy,
            opt(k.vgpr_waves_per_simd),
            lds_waves
        );
        let Some(l) = &self.main_loop else {
            let _ = writeln!(
                s,
                "main loop   none with MFMAs ({} back-edge(s) in the kernel)",
                self.back_edges
            );
            return s;
        };
        let _ = writeln!(
            s,
            "main loop   {} (back-edge {}): {} instructions, {} basic block(s) per trip; {} back-edge(s) in the kernel",
            l.header, l.backedge, l.instructions, l.basic_blocks, self.back_edges
        );
        let _ = writeln!(
            s,
            "  MFMA        {} ({}); longest non-MFMA run {}, across the back-edge {}",
            l.mfma,
            histogram(&l.mfma_variants),
            opt(l.max_gap_between_mfma),
            opt(l.wraparound_gap_mfma)
        );
        let _ = writeln!(
            s,
            "  LDS         {} reads ({}), {} writes",
            l.ds_read,
            histogram(&l.ds_read_widths),
            l.ds_write
        );
        let _ = writeln!(
            s,
            "  VMEM        {} loads ({} direct to LDS; longest run between loads {}, within a cluster {}), {} stores, {} scratch",
            l.vmem_loads,
            l.vmem_loads_lds,
            opt(l.max_gap_between_buffer_loads),
            opt(l.max_gap_in_load_clusters),
            l.vmem_stores,
            l.scratch
        );
        let _ = writeln!(
            s,
            "  s_waitcnt   {} ({} on vmcnt, {} of them vmcnt(0); {} on lgkmcnt)",
            l.waitcnt, l.waitcnt_vmcnt, l.vmcnt_zero, l.waitcnt_lgkmcnt
        );
        let _ = writeln!(
            s,
            "  sync        {} s_barrier, {} s_setprio, {} s_nop; hints: {} sched_barrier, {} sched_group_barrier, {} iglp_opt",
            l.barriers, l.setprio, l.s_nop, l.sched_barrier, l.sched_group_barrier, l.iglp_opt
        );
        let _ = writeln!(s, "  ALU         {} VALU, {} SALU", l.valu, l.salu);
        s
    }

    /// The report as a JSON object (`kernel`, `back_edges`, `main_loop`: null without one),
    /// field names as in the structs.
    pub fn json(&self) -> String {
        let main_loop = self
            .main_loop
            .as_ref()
            .map_or_else(|| "null".to_string(), |l| l.json(1));
        json_object(
            &[
                ("kernel", self.kernel.json(1)),
                ("back_edges", self.back_edges.to_string()),
                ("main_loop", main_loop),
            ],
            0,
        )
    }
}

impl fmt::Display for IsaReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-written gfx950 kernel: a one-MFMA loop (`.LBB0_1`), the main loop (`.LBB0_2` …
    /// `s_cbranch_scc1 .LBB0_2`, 24 instructions with a fall-through block and a nested label),
    /// and an outer back-edge to the same label with the same MFMAs but more instructions.
    const LOOPS: &str = r#"	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	k
	.type	k,@function
k:                                      ; @k
; %bb.0:
	s_load_dwordx4 s[0:3], s[0:1], 0x0
	v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
	s_waitcnt lgkmcnt(0)
.LBB0_1:                                ; a loop with one MFMA
	v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
	s_add_u32 s4, s4, 1
	s_cbranch_scc1 .LBB0_1
	s_branch .LBB0_2                        ; forward: no back-edge
.LBB0_2:                                ; =>This Inner Loop Header: Depth=1
	buffer_load_dwordx4 v[12:15], v16, s[0:3], 0 offen
	s_mov_b32 m0, s5
	s_nop 0
	buffer_load_dword v17, s[0:3], 0 offen lds
	global_load_dwordx2 v[18:19], v[20:21], off
	ds_read_b128 v[4:7], v22
	ds_read2st64_b64 v[8:11], v22 offset1:1
	ds_write_b64 v22, v[18:19]
	s_waitcnt vmcnt(10) lgkmcnt(1)
	s_waitcnt lgkmcnt(0)
	s_barrier
	; sched_barrier mask(0x00000000)
	s_setprio 1
	v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
	v_mfma_f32_16x16x32_bf16 v[24:27], v[4:7], v[8:11], v[24:27]
	v_add_u32_e32 v22, 16, v22
	v_accvgpr_read_b32 v28, a0
	s_add_u32 s4, s4, 1
	; sched_group_barrier mask(0x00000008) size(1) SyncID(0)
	; sched_group_barrier mask(0x00000100) size(2) SyncID(0)
	; iglp_opt mask(0x00000000)
; %bb.3:                                ;   in Loop: Header=BB0_2 Depth=1
	v_mfma_f32_32x32x16_bf16 a[0:15], v[4:7], v[8:11], a[0:15]
	s_setprio 0
	s_waitcnt vmcnt(0)
	s_cmp_lg_u32 s4, 8
	s_cbranch_scc1 .LBB0_4
.LBB0_4:                                ;   in Loop: Header=BB0_2 Depth=1
	s_sleep 1
	s_cbranch_scc1 .LBB0_2
; %bb.5:                                ; same MFMAs, longer: not the main loop
	s_add_u32 s6, s6, 1
	s_cbranch_vccnz .LBB0_2
	s_endpgm
	.section	.rodata,"a",@progbits
	.p2align	6, 0x0
	.amdhsa_kernel k
		.amdhsa_group_segment_fixed_size 40000
		.amdhsa_next_free_vgpr 144
		.amdhsa_accum_offset 104
	.end_amdhsa_kernel
	.text
.Lfunc_end0:
	.size	k, .Lfunc_end0-k
	.set k.num_vgpr, 100
	.set k.num_agpr, 40
"#;

    /// The `.amdgpu_metadata` block describing `k`.
    const METADATA: &str = r#"	.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     40
    .args:
      - .name:           x
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 40000
    .max_flat_workgroup_size: 256
    .name:           k
    .private_segment_fixed_size: 12
    .sgpr_count:     40
    .sgpr_spill_count: 2
    .vgpr_count:     144
    .vgpr_spill_count: 3
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
...
	.end_amdgpu_metadata
"#;

    fn kernel(arch: &str, metadata: &str) -> String {
        format!("{LOOPS}{metadata}").replace("gfx950", arch)
    }

    fn fixture() -> String {
        kernel("gfx950", METADATA)
    }

    #[test]
    fn main_loop_counts() {
        let r = report(&fixture()).expect("report");
        assert_eq!(r.back_edges, 3);
        let l = r.main_loop.expect("main loop");
        let variants = |v: &[(&str, u32)]| -> BTreeMap<String, u32> {
            v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
        };
        let expected = LoopReport {
            header: ".LBB0_2".into(),
            backedge: "s_cbranch_scc1".into(),
            basic_blocks: 3,
            instructions: 24,
            mfma: 3,
            mfma_variants: variants(&[("16x16x32_bf16", 2), ("32x32x16_bf16", 1)]),
            ds_read: 2,
            ds_read_widths: variants(&[("b128", 1), ("read2st64_b64", 1)]),
            ds_write: 1,
            vmem_loads: 3,
            vmem_loads_lds: 1,
            vmem_stores: 0,
            scratch: 0,
            waitcnt: 3,
            waitcnt_vmcnt: 2,
            waitcnt_lgkmcnt: 2,
            vmcnt_zero: 1,
            barriers: 1,
            setprio: 2,
            s_nop: 1,
            sched_barrier: 1,
            sched_group_barrier: 2,
            iglp_opt: 1,
            // v_add_u32, v_accvgpr_read_b32
            valu: 2,
            // s_mov_b32 m0, s_add_u32, s_cmp_lg_u32 (not: waits, barrier, setprio, nop, sleep,
            // branches)
            salu: 3,
            // MFMAs at 12, 13, 17
            max_gap_between_mfma: Some(3),
            wraparound_gap_mfma: Some(12 + 6),
            // loads at 0, 3, 4 (the s_nop between counts)
            max_gap_between_buffer_loads: Some(2),
            max_gap_in_load_clusters: Some(2),
        };
        assert_eq!(l, expected);
    }

    #[test]
    fn resources_and_vgpr_limited_occupancy() {
        let k = report(&fixture()).expect("report").kernel;
        assert_eq!(k.name, "k");
        assert_eq!(k.arch, "gfx950");
        assert_eq!(
            (k.arch_vgprs, k.agprs, k.alloc_vgprs, k.sgprs),
            (100, 40, 144, 40)
        );
        assert_eq!((k.vgpr_spills, k.sgpr_spills, k.scratch_bytes), (3, 2, 12));
        assert_eq!(
            (k.lds_bytes, k.workgroup_size, k.wave_size),
            (40000, 256, 64)
        );
        // accum_offset 104 + 40 AGPRs = 144 → 512 / 144 = 3 waves; LDS: 163840 / 40000 = 4
        // workgroups × 4 waves / 4 SIMDs = 4.
        assert_eq!(k.unified_vgprs, Some(144));
        assert_eq!(k.vgpr_waves_per_simd, Some(3));
        assert_eq!(k.lds_waves_per_simd, Some(4.0));
        assert_eq!(k.occupancy, 3);
    }

    #[test]
    fn lds_limited_occupancy_on_gfx942() {
        let k = report(&kernel("gfx942", METADATA)).expect("report").kernel;
        // 65536 / 40000 = 1 workgroup × 4 waves / 4 SIMDs.
        assert_eq!(k.arch, "gfx942");
        assert_eq!(k.lds_waves_per_simd, Some(1.0));
        assert_eq!(k.vgpr_waves_per_simd, Some(3));
        assert_eq!(k.occupancy, 1);
    }

    #[test]
    fn uneven_lds_occupancy_rounds_down() {
        // 320 threads = 5 waves; 65536 / 32768 = 2 workgroups → 10 waves over 4 SIMDs.
        let md = METADATA
            .replace(
                "group_segment_fixed_size: 40000",
                "group_segment_fixed_size: 32768",
            )
            .replace(
                "max_flat_workgroup_size: 256",
                "max_flat_workgroup_size: 320",
            );
        let k = report(&kernel("gfx942", &md)).expect("report").kernel;
        assert_eq!(k.lds_waves_per_simd, Some(2.5));
        assert_eq!(k.occupancy, 2);
    }

    #[test]
    fn descriptor_next_free_vgpr_raises_the_allocation() {
        // No AGPRs: metadata 54 VGPRs, but the descriptor allocates 257 → 264 → 1 wave.
        let asm = fixture()
            .replace(".amdhsa_next_free_vgpr 144", ".amdhsa_next_free_vgpr 257")
            .replace(".agpr_count:     40", ".agpr_count:     0")
            .replace(".vgpr_count:     144", ".vgpr_count:     54");
        let k = report(&asm).expect("report").kernel;
        assert_eq!((k.alloc_vgprs, k.unified_vgprs), (257, Some(264)));
        assert_eq!(k.vgpr_waves_per_simd, Some(1));
        assert_eq!(k.occupancy, 1);
    }

    #[test]
    fn no_lds_and_few_vgprs_give_eight_waves() {
        let asm = fixture()
            .replace(".amdhsa_next_free_vgpr 144", ".amdhsa_next_free_vgpr 24")
            .replace(".agpr_count:     40", ".agpr_count:     0")
            .replace(".vgpr_count:     144", ".vgpr_count:     24")
            .replace(
                "group_segment_fixed_size: 40000",
                "group_segment_fixed_size: 0",
            );
        let k = report(&asm).expect("report").kernel;
        assert_eq!(
            (k.vgpr_waves_per_simd, k.lds_waves_per_simd),
            (Some(8), None)
        );
        assert_eq!(k.occupancy, 8);
    }

    #[test]
    fn reqd_workgroup_size_overrides_the_launch_bound() {
        let md = METADATA.replace(
            "    .name:           k\n",
            "    .name:           k\n    .reqd_workgroup_size:\n      - 128\n      - 4\n      - 1\n",
        );
        let k = report(&kernel("gfx942", &md)).expect("report").kernel;
        // 512 threads = 8 waves, 1 workgroup per CU: 2 waves per SIMD.
        assert_eq!(k.workgroup_size, 512);
        assert_eq!(k.lds_waves_per_simd, Some(2.0));
    }

    #[test]
    fn register_counts_fall_back_to_kernel_info_comments() {
        let asm = fixture().replace(
            "\t.set k.num_vgpr, 100\n\t.set k.num_agpr, 40\n",
            "; Kernel info:\n; codeLenInByte = 96\n; NumVgprs: 77\n; NumAgprs: 5\n",
        );
        let k = report(&asm).expect("report").kernel;
        assert_eq!((k.arch_vgprs, k.agprs), (77, 5));
        // `.L`-prefixed symbols (other LLVM builds) are read too.
        let asm = fixture().replace(".set k.", ".set .Lk.");
        let k = report(&asm).expect("report").kernel;
        assert_eq!((k.arch_vgprs, k.agprs), (100, 40));
    }

    #[test]
    fn waitcnt_vmcnt_zero() {
        assert!(waits_vmcnt_zero("s_waitcnt", "vmcnt(0)"));
        assert!(waits_vmcnt_zero("s_waitcnt", "vmcnt(0) lgkmcnt(3)"));
        assert!(waits_vmcnt_zero("s_waitcnt", "lgkmcnt(1) vmcnt(0)"));
        assert!(waits_vmcnt_zero(
            "s_waitcnt",
            "vmcnt(0) expcnt(0) lgkmcnt(0)"
        ));
        assert!(!waits_vmcnt_zero("s_waitcnt", "vmcnt(10)"));
        assert!(!waits_vmcnt_zero("s_waitcnt", "lgkmcnt(0)"));
        assert!(waits_vmcnt_zero("s_waitcnt_vmcnt", "null, 0x0"));
        assert!(!waits_vmcnt_zero("s_waitcnt_vmcnt", "null, 0x3"));
    }

    #[test]
    fn classification() {
        for m in [
            "s_mov_b32",
            "s_add_u32",
            "s_cmp_lg_u32",
            "s_cselect_b32",
            "s_and_b64",
        ] {
            assert!(is_salu(m), "{m}");
        }
        for m in [
            "s_load_dwordx4",
            "s_buffer_load_dword",
            "s_waitcnt",
            "s_barrier",
            "s_setprio",
            "s_nop",
            "s_branch",
            "s_cbranch_scc1",
            "s_endpgm",
            "s_sleep",
            "s_getpc_b64",
            "s_swappc_b64",
            "s_sendmsg",
            "v_add_u32_e32",
        ] {
            assert!(!is_salu(m), "{m}");
        }
        assert!(is_branch("s_cbranch_execz") && is_branch("s_branch"));
        assert!(!is_branch("s_setpc_b64") && !is_branch("s_cbranch_"));
        assert!(is_mfma("v_mfma_f32_16x16x32_bf16") && is_mfma("v_smfmac_f32_16x16x64_bf16"));
        assert!(is_lds_load("buffer_load_dword", "v1, s[0:3], 0 offen lds"));
        assert!(is_lds_load("global_load_lds_dwordx4", "v[0:1], off"));
        assert!(!is_lds_load("buffer_load_dword", "v1, s[0:3], 0 offen"));
    }

    #[test]
    fn comments_directives_and_labels() {
        assert_eq!(
            parse_line("\t; sched_barrier mask(0x0)"),
            Some(Item::Sched("sched_barrier mask(0x0)"))
        );
        assert_eq!(
            parse_line("; sched_barrierX"),
            Some(Item::Comment("sched_barrierX"))
        );
        assert_eq!(parse_line("; %bb.12:  ; in Loop"), Some(Item::Block));
        assert_eq!(
            parse_line(".LBB0_7:  ; =>This Inner Loop Header"),
            Some(Item::Label(".LBB0_7"))
        );
        assert_eq!(
            parse_line("\t.p2align 8"),
            Some(Item::Directive(".p2align 8"))
        );
        assert_eq!(
            parse_line("\ts_waitcnt vmcnt(0) ; wait"),
            Some(Item::Instr {
                mnemonic: "s_waitcnt",
                operands: "vmcnt(0)"
            })
        );
        assert_eq!(parse_line("   "), None);
    }

    #[test]
    fn loop_without_mfma_is_not_a_main_loop() {
        let asm = fixture().replace("v_mfma_f32_", "v_fma_f32_");
        let r = report(&asm).expect("report");
        assert_eq!(r.back_edges, 3);
        assert!(r.main_loop.is_none());
        assert!(r.table().contains("none with MFMAs"));
        assert!(r.json().contains("\"main_loop\": null"));
    }

    #[test]
    fn errors() {
        // A function without metadata or descriptor is a helper, not a kernel.
        let helper = "\t.type f,@function\nf:\n\ts_setpc_b64 s[30:31]\n.Lfunc_end0:\n";
        assert_eq!(report(helper), Err(IsaError::NoKernel));
        assert_eq!(report(""), Err(IsaError::NoKernel));
        let asm = fixture().replace("    .sgpr_count:     40\n", "");
        assert!(
            matches!(report(&asm), Err(IsaError::Missing { what, .. }) if what.contains("sgpr_count"))
        );
        let asm = fixture().replace(".vgpr_count:     144", ".vgpr_count:     lots");
        assert!(matches!(report(&asm), Err(IsaError::BadNumber { value, .. }) if value == "lots"));
        let asm = fixture().replace("amdgcn-amd-amdhsa--gfx950\"", "amdgcn-amd-amdhsa--\"");
        assert!(matches!(report(&asm), Err(IsaError::Missing { .. })));
    }

    #[test]
    fn target_features_are_dropped_from_the_arch() {
        let asm = fixture().replace("--gfx950\"", "--gfx950:sramecc+:xnack-\"");
        assert_eq!(report(&asm).expect("report").kernel.arch, "gfx950");
    }

    #[test]
    fn table_and_json() {
        let r = report(&fixture()).expect("report");
        let t = r.table();
        assert!(t.contains("kernel k (gfx950)"), "{t}");
        assert!(
            t.contains("MFMA        3 (16x16x32_bf16: 2, 32x32x16_bf16: 1)"),
            "{t}"
        );
        assert_eq!(t, r.to_string());
        let j = r.json();
        for field in [
            "\"arch\": \"gfx950\"",
            "\"lds_waves_per_simd\": 4.0",
            "\"occupancy\": 3",
            "\"back_edges\": 3",
            "\"16x16x32_bf16\": 2",
            "\"max_gap_between_buffer_loads\": 2",
        ] {
            assert!(j.contains(field), "{field} in {j}");
        }
        assert_eq!(j.matches('{').count(), j.matches('}').count());
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }
}
