//! Resource usage from ptxas's verbose log (`-Xptxas -v`): registers, spills, stack, shared
//! memory per function. Checks fail on spills, and the numbers go into reports.

use std::fmt;

/// What ptxas reports for one function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceUsage {
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    /// Per-thread local memory frame (local arrays indexed at run time, spills, calls).
    pub stack_frame: u32,
    /// Static shared memory (the generated kernels use dynamic shared memory, so usually 0).
    pub shared_bytes: u32,
    pub barriers: u32,
}

impl ResourceUsage {
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

impl fmt::Display for ResourceUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} registers, {} bytes spill stores, {} bytes spill loads, {} bytes stack frame, {} bytes static smem, {} barriers",
            self.registers,
            self.spill_stores,
            self.spill_loads,
            self.stack_frame,
            self.shared_bytes,
            self.barriers
        )
    }
}

/// One function of the compiled module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionUsage {
    /// The (possibly mangled) symbol name; `extern "C"` kernels keep their name.
    pub name: String,
    /// A `__global__` entry point (as opposed to a non-inlined device function).
    pub entry: bool,
    pub usage: ResourceUsage,
}

/// Parse ptxas's `-v` output. Lines look like
/// ```text
/// ptxas info    : Compiling entry function 'k' for 'sm_90a'
/// ptxas info    : Function properties for k
/// ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 16 registers, used 1 barriers, 16 bytes smem, 376 bytes cmem[0]
/// ```
/// `Used` belongs to the function being compiled; the stack/spill line to the function whose
/// properties were announced last (device functions called from a kernel get their own).
pub fn parse_ptxas_log(log: &str) -> Vec<FunctionUsage> {
    let mut out: Vec<FunctionUsage> = vec![];
    let mut compiling: Option<usize> = None;
    let mut props: Option<usize> = None;
    fn slot(out: &mut Vec<FunctionUsage>, name: &str) -> usize {
        if let Some(i) = out.iter().position(|f| f.name == name) {
            return i;
        }
        out.push(FunctionUsage {
            name: name.to_string(),
            entry: false,
            usage: ResourceUsage::default(),
        });
        out.len() - 1
    }
    for line in log.lines() {
        let l = line.trim();
        if let Some(rest) = after(l, "Compiling entry function '") {
            let name = rest.split('\'').next().unwrap_or("");
            let i = slot(&mut out, name);
            out[i].entry = true;
            compiling = Some(i);
        } else if let Some(rest) = after(l, "Compiling function '") {
            let name = rest.split('\'').next().unwrap_or("");
            compiling = Some(slot(&mut out, name));
        } else if let Some(rest) = after(l, "Function properties for ") {
            props = Some(slot(&mut out, rest.trim()));
        } else if l.contains("bytes stack frame") {
            if let Some(i) = props {
                let u = &mut out[i].usage;
                for part in l
                    .trim_start_matches(|c: char| !c.is_ascii_digit())
                    .split(',')
                {
                    let n = leading_number(part);
                    if part.contains("stack frame") {
                        u.stack_frame = n;
                    } else if part.contains("spill stores") {
                        u.spill_stores = n;
                    } else if part.contains("spill loads") {
                        u.spill_loads = n;
                    }
                }
            }
        } else if let Some(rest) = after(l, "Used ") {
            if let Some(i) = compiling {
                let u = &mut out[i].usage;
                for part in rest.split(',') {
                    let part = part.trim();
                    if part.ends_with("registers") {
                        u.registers = leading_number(part);
                    } else if let Some(b) = part.strip_prefix("used ") {
                        if b.ends_with("barriers") || b.ends_with("barrier") {
                            u.barriers = leading_number(b);
                        }
                    } else if part.ends_with("bytes smem") {
                        u.shared_bytes = leading_number(part);
                    }
                }
            }
        }
    }
    out
}

fn after<'a>(line: &'a str, pat: &str) -> Option<&'a str> {
    line.find(pat).map(|i| &line[i + pat.len()..])
}

fn leading_number(s: &str) -> u32 {
    let s = s.trim_start();
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "ptxas info    : 272 bytes gmem, 16 bytes cmem[4]
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     40 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 40 bytes cumulative stack size, 16 bytes smem, 376 bytes cmem[0], 632 bytes cmem[2]
ptxas info    : Compile time = 101.478 ms
ptxas info    : Function properties for __internal_accurate_pow
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
";

    #[test]
    fn parses_entry_and_device_functions() {
        let f = parse_ptxas_log(LOG);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].name, "k");
        assert!(f[0].entry);
        assert_eq!(
            f[0].usage,
            ResourceUsage {
                registers: 32,
                spill_stores: 8,
                spill_loads: 12,
                stack_frame: 40,
                shared_bytes: 16,
                barriers: 1,
            }
        );
        assert!(f[0].usage.spills());
        assert_eq!(f[1].name, "__internal_accurate_pow");
        assert!(!f[1].entry);
        assert!(!f[1].usage.spills());
    }

    #[test]
    fn garbage_is_ignored() {
        assert!(parse_ptxas_log("nothing here\nUsed registers").is_empty());
        let f = parse_ptxas_log("ptxas info : Compiling entry function 'x' for 'sm_90a'\nptxas info : Used many registers");
        assert_eq!(f[0].usage.registers, 0);
    }
}
