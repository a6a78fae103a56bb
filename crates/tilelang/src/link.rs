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
//! Only kernels whose launch signature the lowering leaves as it is are linked: persistent
//! kernels (whose grid lowering rewrites) always go the full way.

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
}

const MAGIC: &str = "tilelang-link 1";
const EXT: &str = "link";

impl Link {
    fn encode(&self) -> String {
        format!(
            "{MAGIC}\nkey {}\nentry {}\narch {}\nsmem {}\nlanguage {}\nfallback {}\n--\n{}",
            self.key,
            self.entry,
            self.arch,
            self.dynamic_smem_bytes,
            self.language,
            self.fallback.as_deref().unwrap_or("").replace('\n', " "),
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
        let language = field("language")?;
        let fallback = Some(field("fallback")?).filter(|f| !f.is_empty());
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
];

/// Whether every variable and buffer of `k` has a name no other one has. The `Debug` form
/// names them (ids differ from process to process, names do not); where two share a name it
/// could stand for two different programs, and the kernel gets no link.
pub fn names_are_unique(k: &tl_ir::Kernel) -> bool {
    use std::collections::HashMap;
    use tl_ir::{ExprKind, Param, StmtKind};
    let mut seen: HashMap<(bool, String), u64> = HashMap::new();
    let mut ok = true;
    let mut note = |is_var: bool, name: &str, id: u64| {
        if *seen.entry((is_var, name.to_string())).or_insert(id) != id {
            ok = false;
        }
    };
    let exprs = |e: &tl_ir::Expr, note: &mut dyn FnMut(bool, &str, u64)| {
        e.visit(&mut |x| match x.kind() {
            ExprKind::Var(v) => note(true, v.name(), v.id()),
            ExprKind::Load(b, _) => note(false, b.name(), b.id()),
            _ => {}
        });
    };
    for p in &k.params {
        match p {
            Param::Tensor { buffer, .. } => {
                note(false, buffer.name(), buffer.id());
                for d in buffer.shape() {
                    exprs(d, &mut note);
                }
            }
            Param::Scalar(v) => note(true, v.name(), v.id()),
        }
    }
    for d in &k.dims {
        note(true, d.name(), d.id());
    }
    for g in &k.grid {
        exprs(g, &mut note);
    }
    for v in &k.block_vars {
        note(true, v.name(), v.id());
    }
    k.body.walk(&mut |s| {
        match &s.kind {
            StmtKind::Alloc(b) | StmtKind::AnnotateLayout { buffer: b, .. } => {
                note(false, b.name(), b.id());
                for d in b.shape() {
                    exprs(d, &mut note);
                }
            }
            StmtKind::Store { buffer, .. } => note(false, buffer.name(), buffer.id()),
            StmtKind::For(l) => note(true, l.var.name(), l.var.id()),
            StmtKind::Let { var, .. } => note(true, var.name(), var.id()),
            StmtKind::Op(op) => {
                let (r, w) = op.regions();
                for reg in r.into_iter().chain(w) {
                    note(false, reg.buffer.name(), reg.buffer.id());
                }
            }
            _ => {}
        }
        for e in s.exprs() {
            exprs(e, &mut note);
        }
    });
    ok
}

/// The link key of a kernel: its tile IR (as lowering gets it), the target, the toolchain's
/// identity (`toolchain`: versions and options, as the binary keys use them), the knobs, and
/// this compiler's build.
pub fn link_key(ir: &tl_ir::Kernel, target: &str, toolchain: &str) -> String {
    let ir = format!("{ir:?}");
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
        };
        assert_eq!(Link::decode(&l.encode()), Some(l.clone()));
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
