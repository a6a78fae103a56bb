//! Links from a kernel's tile IR to its compiled GPU code in the disk cache, so that a cache hit
//! skips lowering and code generation (5–20 ms for a GEMM or attention kernel) as well as the
//! compiler.
//!
//! The binary's own cache key covers the generated source; finding it needs the source, i.e.
//! the whole lowering. A link is keyed instead by what decides that source: the tile IR (its
//! full `Debug` form, so every attribute counts), the target, the backend and the compiler
//! knobs read from the environment, the toolchain's identity, and a fingerprint of this
//! compiler's own sources (`TILELANG_BUILD_ID`, from build.rs) — a rebuilt compiler never
//! follows an old link. The link stores the binary's key and everything needed to load it —
//! entry point, arch, dynamic shared memory, and the source itself, so that a binary evicted
//! from the cache is rebuilt from the stored source without lowering.
//!
//! Only kernels whose launch signature the lowering leaves as it is, or rewrites in a way the
//! tile IR settles, are linked: a persistent kernel launches the grid its rounds need, which
//! a link hit works out from the tile IR (`tl_passes::gpu::persistent::launch_grid`, the same
//! rule the lowering applies); a clustered persistent kernel, whose clusters stay only where
//! the pipeline specializes it, always goes the full way.

use tl_runtime::Cache;

/// What a link records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The binary's cache key.
    pub key: String,
    pub entry: String,
    pub arch: String,
    pub dynamic_smem_bytes: u32,
    /// `ptx`, `cuda` (CUDA C++) or `hip`.
    pub language: String,
    /// Why PTX fell back to CUDA C++ (`CompileStats::fallback`), if it did.
    pub fallback: Option<String>,
    pub source: String,
    /// The tensor maps the kernel takes (`Abi::tmaps`): they come from lowering, which a
    /// link skips.
    pub tmaps: Vec<tl_codegen::TmaSpec>,
    /// The tensors the kernel stages itself (`Abi::staged`), also from lowering.
    pub staged: Vec<usize>,
    /// Threads per block the compiled kernel launches with: lowering may add some (a
    /// warp-specialized kernel's producer warpgroup).
    pub threads: u32,
}

const MAGIC: &str = "tilelang-link 4";

/// `param/box0xbox1.../swizzle` per tensor map, `;`-separated.
fn encode_tmaps(t: &[tl_codegen::TmaSpec]) -> String {
    t.iter()
        .map(|t| {
            let b: Vec<String> = t.box_dims.iter().map(|d| d.to_string()).collect();
            format!("{}/{}/{}", t.param, b.join("x"), t.swizzle)
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn decode_tmaps(s: &str) -> Option<Vec<tl_codegen::TmaSpec>> {
    s.split(';')
        .filter(|x| !x.is_empty())
        .map(|x| {
            let mut f = x.split('/');
            let param = f.next()?.parse().ok()?;
            let box_dims = f
                .next()?
                .split('x')
                .map(|d| d.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            let swizzle = f.next()?.parse().ok()?;
            Some(tl_codegen::TmaSpec {
                param,
                box_dims,
                swizzle,
            })
        })
        .collect()
}
const EXT: &str = "link";

impl Link {
    fn encode(&self) -> String {
        format!(
            "{MAGIC}\nkey {}\nentry {}\narch {}\nsmem {}\nthreads {}\nlanguage {}\nfallback {}\ntmaps {}\nstaged {}\n--\n{}",
            self.key,
            self.entry,
            self.arch,
            self.dynamic_smem_bytes,
            self.threads,
            self.language,
            self.fallback.as_deref().unwrap_or("").replace('\n', " "),
            encode_tmaps(&self.tmaps),
            self.staged
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(","),
            self.source
        )
    }

    fn decode(text: &str) -> Option<Link> {
        let (head, source) = text.split_once("\n--\n")?;
        let mut lines = head.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut field = |name: &str| -> Option<String> {
            let l = lines.next()?;
            let v = l.strip_prefix(name)?.strip_prefix(' ').unwrap_or("");
            Some(v.to_string())
        };
        let key = field("key")?;
        let entry = field("entry")?;
        let arch = field("arch")?;
        let dynamic_smem_bytes = field("smem")?.parse().ok()?;
        let threads = field("threads")?.parse().ok().filter(|&t| t > 0)?;
        let language = field("language")?;
        let fallback = Some(field("fallback")?).filter(|f| !f.is_empty());
        let tmaps = decode_tmaps(&field("tmaps")?)?;
        let staged = field("staged")?
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.parse().ok())
            .collect::<Option<Vec<usize>>>()?;
        if key.is_empty() || entry.is_empty() {
            return None;
        }
        Some(Link {
            key,
            entry,
            arch,
            dynamic_smem_bytes,
            language,
            fallback,
            source: source.to_string(),
            tmaps,
            staged,
            threads,
        })
    }

    /// The link stored under `pre`, if there is a readable one.
    pub fn read(cache: &Cache, pre: &str) -> Option<Link> {
        Link::decode(&cache.read_string(pre, EXT)?)
    }

    /// Store the link (best effort: a link that cannot be written only costs a later lowering).
    pub fn write(&self, cache: &Cache, pre: &str) {
        let text = self.encode();
        let _ = cache.put_bytes(pre, EXT, text.as_bytes());
    }
}

/// The environment variables that change what a kernel compiles to.
const KNOBS: &[&str] = &[
    "TILELANG_BACKEND",
    "TILELANG_AMD_SCHEDULE",
    "TILELANG_PTXAS_OPTIONS",
    "TILELANG_NVRTC_PTX_VIA_JITLINK",
    "TILELANG_TMA",
    "TILELANG_STAGE_LEAD",
    "TILELANG_STAGE_GROUP",
    "TILELANG_STAGE_DEPTH",
    "TILELANG_STAGE_BATCH",
    "TILELANG_STAGE_PREFETCH",
    "TILELANG_WS",
    "TILELANG_WS_PRODUCER_REGS",
    "TILELANG_WS_PRELOAD",
    "TILELANG_PINGPONG",
];

/// A variable or buffer the kernel names.
enum Named<'a> {
    Var(&'a tl_ir::Var),
    Buf(&'a tl_ir::Buffer),
}

/// Every variable and buffer occurrence of `k`: parameters, sizes, grid, loop and let
/// variables, allocations, and the operands of statements and expressions.
fn each_named(k: &tl_ir::Kernel, note: &mut dyn FnMut(Named)) {
    use tl_ir::{ExprKind, Param, StmtKind};
    let exprs = |e: &tl_ir::Expr, note: &mut dyn FnMut(Named)| {
        e.visit(&mut |x| match x.kind() {
            ExprKind::Var(v) => note(Named::Var(v)),
            ExprKind::Load(b, _) => note(Named::Buf(b)),
            _ => {}
        });
    };
    for p in &k.params {
        match p {
            Param::Tensor { buffer, .. } => {
                note(Named::Buf(buffer));
                for d in buffer.shape() {
                    exprs(d, note);
                }
            }
            Param::Scalar(v) => note(Named::Var(v)),
        }
    }
    for d in &k.dims {
        note(Named::Var(d));
    }
    for g in &k.grid {
        exprs(g, note);
    }
    for v in &k.block_vars {
        note(Named::Var(v));
    }
    k.body.walk(&mut |s| {
        match &s.kind {
            StmtKind::Alloc(b) | StmtKind::AnnotateLayout { buffer: b, .. } => {
                note(Named::Buf(b));
                for d in b.shape() {
                    exprs(d, note);
                }
            }
            StmtKind::Store { buffer, .. } => note(Named::Buf(buffer)),
            StmtKind::For(l) => note(Named::Var(&l.var)),
            StmtKind::Let { var, .. } => note(Named::Var(var)),
            StmtKind::Op(op) => {
                let (r, w) = op.regions();
                for reg in r.into_iter().chain(w) {
                    note(Named::Buf(&reg.buffer));
                }
            }
            _ => {}
        }
        for e in s.exprs() {
            exprs(e, note);
        }
    });
}

/// Whether every variable and buffer of `k` has a name no other one has. The `Debug` form
/// names them (ids differ from process to process, names do not); where two share a name it
/// could stand for two different programs, and the kernel gets no link.
pub fn names_are_unique(k: &tl_ir::Kernel) -> bool {
    use std::collections::HashMap;
    let mut seen: HashMap<(bool, String), u64> = HashMap::new();
    let mut ok = true;
    each_named(k, &mut |n| {
        let (key, id) = match n {
            Named::Var(v) => ((true, v.name().to_string()), v.id()),
            Named::Buf(b) => ((false, b.name().to_string()), b.id()),
        };
        if *seen.entry(key).or_insert(id) != id {
            ok = false;
        }
    });
    ok
}

/// What the `Debug` form leaves out: each variable's type and each buffer's element type,
/// memory scope and shape, by name (names are unique where a kernel is linked). Without them
/// two kernels that differ only in a dtype (a bf16 GEMM and an f16 one) would share a link.
pub fn declarations(k: &tl_ir::Kernel) -> String {
    let mut decls = std::collections::BTreeMap::new();
    each_named(k, &mut |n| match n {
        Named::Var(v) => {
            decls
                .entry(format!("v {}", v.name()))
                .or_insert_with(|| v.dtype().to_string());
        }
        Named::Buf(b) => {
            decls.entry(format!("b {}", b.name())).or_insert_with(|| {
                let shape: Vec<String> = b.shape().iter().map(|d| d.to_string()).collect();
                format!("{} {} [{}]", b.dtype(), b.scope(), shape.join(", "))
            });
        }
    });
    decls
        .iter()
        .map(|(n, d)| format!("{n}: {d}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The link key of a kernel: its tile IR (as lowering gets it), the target, the toolchain's
/// identity (`toolchain`: versions and options, as the binary keys use them), the knobs, and
/// this compiler's build.
pub fn link_key(ir: &tl_ir::Kernel, target: &str, toolchain: &str) -> String {
    let ir = format!("{ir:?}\n{}", declarations(ir));
    let knobs: Vec<String> = KNOBS
        .iter()
        .map(|k| format!("{k}={}", std::env::var(k).unwrap_or_default()))
        .collect();
    Cache::key(&[
        "link",
        &ir,
        target,
        toolchain,
        &knobs.join(";"),
        env!("TILELANG_BUILD_ID"),
        env!("CARGO_PKG_VERSION"),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_round_trip_and_reject_damage() {
        let l = Link {
            key: "ab12".into(),
            entry: "tl_kernel_gemm".into(),
            arch: "sm_90a".into(),
            dynamic_smem_bytes: 98304,
            language: "ptx".into(),
            fallback: None,
            source: "line one\n--\nline after a separator\n".into(),
            tmaps: vec![],
            staged: vec![1, 3],
            threads: 384,
        };
        assert_eq!(Link::decode(&l.encode()), Some(l.clone()));
        assert_eq!(
            Link::decode(&l.encode().replace("threads 384", "threads 0")),
            None
        );
        let with_maps = Link {
            tmaps: vec![
                tl_codegen::TmaSpec {
                    param: 0,
                    box_dims: vec![128, 64],
                    swizzle: 128,
                },
                tl_codegen::TmaSpec {
                    param: 2,
                    box_dims: vec![1, 64, 32],
                    swizzle: 0,
                },
            ],
            ..l.clone()
        };
        assert_eq!(Link::decode(&with_maps.encode()), Some(with_maps.clone()));
        let with_fallback = Link {
            fallback: Some("nvJitLink missing".into()),
            ..l.clone()
        };
        assert_eq!(
            Link::decode(&with_fallback.encode()),
            Some(with_fallback.clone())
        );
        let text = l.encode();
        assert_eq!(Link::decode(&text.replace(MAGIC, "tilelang-link 0")), None);
        assert_eq!(Link::decode(&text[..20]), None);
        assert_eq!(Link::decode(""), None);
    }

    #[test]
    fn the_key_follows_the_ir_the_target_and_the_knobs() {
        let a = crate::kernels::elementwise::add_relu(tl_ir::DType::F32, 1024, 256);
        let b = crate::kernels::elementwise::add_relu(tl_ir::DType::F32, 512, 256);
        let (ia, ib) = (a.ir(), b.ir());
        assert_eq!(link_key(ia, "sm_90a", "t"), link_key(ia, "sm_90a", "t"));
        assert_ne!(link_key(ia, "sm_90a", "t"), link_key(ib, "sm_90a", "t"));
        assert_ne!(link_key(ia, "sm_90a", "t"), link_key(ia, "sm_80", "t"));
        assert_ne!(link_key(ia, "sm_90a", "t"), link_key(ia, "sm_90a", "u"));
        // Kernels that differ only in element types: the Debug form names buffers without
        // their types, so a bf16 GEMM once took an f16 one's link (a GPU run caught it:
        // NaN output after an f16 run filled the cache).
        use crate::kernels::gemm::{gemm, GemmConfig, Layout};
        use tl_ir::DType;
        let cfg = GemmConfig::tiles(64, 64, 32, 2, 128);
        let bf16 = gemm(Layout::NT, DType::BF16, DType::BF16, cfg);
        let f16 = gemm(Layout::NT, DType::F16, DType::F16, cfg);
        let f16_f32 = gemm(Layout::NT, DType::F16, DType::F32, cfg);
        let keys = [&bf16, &f16, &f16_f32].map(|k| link_key(k.ir(), "sm_90a", "t"));
        assert_ne!(keys[0], keys[1]);
        assert_ne!(keys[1], keys[2]);
        assert_ne!(keys[0], keys[2]);
        let fp32 = crate::kernels::elementwise::add_relu(DType::F32, 1024, 256);
        let fp16 = crate::kernels::elementwise::add_relu(DType::F16, 1024, 256);
        assert_ne!(
            link_key(fp32.ir(), "sm_90a", "t"),
            link_key(fp16.ir(), "sm_90a", "t")
        );
    }

    /// The `Debug` form names variables and buffers; a kernel where two share a name gets no
    /// link. Every example kernel has unique names (so they all get links), and the same
    /// kernel built twice (new ids) has the same key.
    #[test]
    fn names_decide_whether_a_kernel_is_linked() {
        use crate::prelude::*;
        let build = || {
            crate::kernels::gemm::gemm(
                crate::kernels::gemm::Layout::NT,
                BF16,
                BF16,
                crate::kernels::gemm::GemmConfig::tiles(64, 64, 32, 2, 128),
            )
        };
        let (a, b) = (build(), build());
        assert!(names_are_unique(a.ir()));
        assert_eq!(
            link_key(a.ir(), "gfx950", "t"),
            link_key(b.ir(), "gfx950", "t")
        );
        // Two parallel nests in a row: the builder names their indices `i` and `i_1`.
        let twice = Kernel::build("twice", |k| {
            let n = k.dim("N");
            let x = k.output("X", [&n], F32);
            k.launch([ceildiv(&n, 128)], 128, |t, [bx]| {
                let s = t.alloc_fragment([128], F32);
                t.parallel([128], |t, [i]| t.store(&s, [i], 1.0f32));
                t.parallel([128], |t, [i]| t.store(&s, [i.clone()], s.at([i]) * 2.0f32));
                t.copy(&s, x.tile([&bx * 128]));
            });
        });
        assert!(names_are_unique(twice.ir()));
        // IR made otherwise may reuse a name: another variable `i` makes it ambiguous.
        let ir = twice.ir();
        let other_i = tl_ir::Stmt::new(
            tl_ir::StmtKind::Let {
                var: tl_ir::Var::new("i", tl_ir::DType::I32),
                value: tl_ir::Expr::int(0),
            },
            ir.body.span,
        );
        let ambiguous = ir.with_body(tl_ir::Stmt::seq(
            vec![ir.body.clone(), other_i],
            ir.body.span,
        ));
        assert!(!names_are_unique(&ambiguous));
    }
}
