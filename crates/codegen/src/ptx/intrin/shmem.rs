//! The NVSHMEM route of a multi-rank kernel's peer accesses (`DistAttrs::nvshmem`): instead of
//! an address on the peer, each access calls a function of the small CUDA C++ shim that
//! `tl_nvrtc::nvshmem` compiles against NVSHMEM's headers (`tl_shmem_*`, wrapping
//! `nvshmem_putmem`, `nvshmem_uint32_atomic_fetch`, `nvshmem_quiet`, …), linked with NVSHMEM's
//! device archive by nvJitLink. The calls take this rank's own address of the symmetric
//! element and the peer's rank: NVSHMEM translates, over NVLink or a network.
//!
//! Ordering: a release (`st.release`, `red.release`, a `sys` fence) first waits for this
//! thread's earlier NVSHMEM operations to complete (`nvshmem_quiet`) after a `fence.acq_rel.sys`
//! for its plain stores; an acquire adds a `fence.acq_rel.sys` after the fetch that observed
//! the value.

use tl_ir::{DType, Expr, MemSem};

use super::super::emit::{Addr, Emitter, R};
use super::super::regs::{Class, Val};

/// One function of the shim: its name, result type and parameter types (PTX `.param` types).
#[derive(Clone, Copy)]
pub(crate) struct ShimFn {
    pub name: &'static str,
    pub ret: Option<&'static str>,
    pub params: &'static [&'static str],
}

const fn f(
    name: &'static str,
    ret: Option<&'static str>,
    params: &'static [&'static str],
) -> ShimFn {
    ShimFn { name, ret, params }
}

/// `(dst, src, bytes, stride, count, pe)`: `count` chunks of `bytes`, `stride` bytes apart.
pub(crate) const PUT: ShimFn = f(
    "tl_shmem_put",
    None,
    &["b64", "b64", "b64", "b64", "b32", "b32"],
);
pub(crate) const GET: ShimFn = f(
    "tl_shmem_get",
    None,
    &["b64", "b64", "b64", "b64", "b32", "b32"],
);
/// `(dst, src, bytes, pe)`, called by every lane of the warp alike.
pub(crate) const PUT_WARP: ShimFn = f("tl_shmem_put_warp", None, &["b64", "b64", "b64", "b32"]);
pub(crate) const GET_WARP: ShimFn = f("tl_shmem_get_warp", None, &["b64", "b64", "b64", "b32"]);
pub(crate) const QUIET: ShimFn = f("tl_shmem_quiet", None, &[]);
/// `(flag)`: after a wait on this rank's own flag was satisfied, what NVSHMEM's own waits do
/// then (over a proxied network transport, make the data delivered before the flag visible).
pub(crate) const WAITED: ShimFn = f("tl_shmem_waited", None, &["b64"]);
pub(crate) const FETCH32: ShimFn = f("tl_shmem_fetch32", Some("b32"), &["b64", "b32"]);
pub(crate) const FETCH64: ShimFn = f("tl_shmem_fetch64", Some("b64"), &["b64", "b32"]);
pub(crate) const SET32: ShimFn = f("tl_shmem_set32", None, &["b64", "b32", "b32"]);
pub(crate) const SET64: ShimFn = f("tl_shmem_set64", None, &["b64", "b64", "b32"]);
pub(crate) const ADD32: ShimFn = f("tl_shmem_add32", None, &["b64", "b32", "b32"]);
pub(crate) const ADD64: ShimFn = f("tl_shmem_add64", None, &["b64", "b64", "b32"]);
pub(crate) const ADDF32: ShimFn = f("tl_shmem_addf32", None, &["b64", "b32", "b32"]);
pub(crate) const FETCH_ADD32: ShimFn =
    f("tl_shmem_fetch_add32", Some("b32"), &["b64", "b32", "b32"]);
pub(crate) const FETCH_ADD64: ShimFn =
    f("tl_shmem_fetch_add64", Some("b64"), &["b64", "b64", "b32"]);

/// Every function of the shim the printer may call (each must link: a test calls them all).
pub(crate) const ALL: [ShimFn; 15] = [
    PUT,
    GET,
    PUT_WARP,
    GET_WARP,
    QUIET,
    WAITED,
    FETCH32,
    FETCH64,
    SET32,
    SET64,
    ADD32,
    ADD64,
    ADDF32,
    FETCH_ADD32,
    FETCH_ADD64,
];

impl ShimFn {
    /// The module-scope `.extern .func` declaration.
    pub(crate) fn declaration(&self) -> String {
        let ret = self
            .ret
            .map(|t| format!("(.param .{t} {}_ret) ", self.name))
            .unwrap_or_default();
        let params: Vec<String> = self
            .params
            .iter()
            .enumerate()
            .map(|(i, t)| format!(".param .{t} {}_param_{i}", self.name))
            .collect();
        format!(".extern .func {ret}{}({});\n", self.name, params.join(", "))
    }
}

/// The shim function of `kind` on a `dt` element (`None`: NVSHMEM has no such operation).
fn by_width(dt: DType, narrow: ShimFn, wide: ShimFn) -> R<(ShimFn, Class)> {
    match dt {
        DType::I32 | DType::U32 => Ok((narrow, Class::B32)),
        DType::I64 | DType::U64 => Ok((wide, Class::B64)),
        DType::F32 => Ok((narrow, Class::F32)),
        other => Err(format!(
            "an NVSHMEM access of a {other} element (32- and 64-bit only)"
        )),
    }
}

impl Emitter {
    /// Whether peer accesses go through NVSHMEM.
    pub(in super::super) fn nvshmem(&self) -> bool {
        self.dist.as_ref().is_some_and(|d| d.nvshmem)
    }

    /// Call `func` with `args` (registers or immediates of its parameter types); its result
    /// in a fresh register of `ret`.
    fn call_shim(
        &mut self,
        func: ShimFn,
        args: &[String],
        ret: Option<Class>,
    ) -> R<Option<String>> {
        if args.len() != func.params.len() {
            return Err(format!("{} with {} arguments", func.name, args.len()));
        }
        self.externs.insert(func.name, func.declaration());
        self.out.push_str("  {\n");
        let mut names = vec![];
        for (i, (a, t)) in args.iter().zip(func.params).enumerate() {
            let p = format!("tl_shmem_arg{i}");
            self.out
                .push_str(&format!("  .param .{t} {p};\n  st.param.{t} [{p}], {a};\n"));
            names.push(p);
        }
        let d = match (func.ret, ret) {
            (Some(_), None) | (None, Some(_)) => {
                return Err(format!(
                    "{}: the call's result and the function's return disagree",
                    func.name
                ))
            }
            (Some(t), Some(class)) => {
                let d = self.fresh(class);
                self.out.push_str(&format!(
                    "  .param .{t} tl_shmem_ret;\n  call (tl_shmem_ret), {}, ({});\n  ld.param.{t} {d}, [tl_shmem_ret];\n",
                    func.name,
                    names.join(", ")
                ));
                Some(d)
            }
            _ => {
                self.out
                    .push_str(&format!("  call {}, ({});\n", func.name, names.join(", ")));
                None
            }
        };
        self.out.push_str("  }\n");
        Ok(d)
    }

    /// The generic address of global `a`, in a register (NVSHMEM takes generic pointers).
    fn generic(&mut self, a: &Addr) -> String {
        let g = self.fresh(Class::B64);
        if a.off == 0 {
            self.ins(&format!("cvta.global.u64 {g}, {}", a.base));
        } else {
            let t = self.fresh(Class::B64);
            self.ins(&format!("add.s64 {t}, {}, {}", a.base, a.off));
            self.ins(&format!("cvta.global.u64 {g}, {t}"));
        }
        g
    }

    fn peer_rank(&mut self, peer: &Expr) -> R<String> {
        let v = self.expr(&peer.cast(DType::I32))?;
        Ok(self.reg(&v, Class::B32))
    }

    /// Before a release: this thread's plain stores ordered (`fence.acq_rel.sys`) and its
    /// NVSHMEM operations complete (`nvshmem_quiet`).
    pub(in super::super) fn shmem_release(&mut self) -> R<()> {
        self.ins("fence.acq_rel.sys");
        self.call_shim(QUIET, &[], None)?;
        Ok(())
    }

    /// After an acquire of this rank's own flag `a` (a satisfied wait, an acquiring load):
    /// NVSHMEM's consistency step for data peers delivered before it.
    pub(in super::super) fn shmem_waited(&mut self, a: &Addr) -> R<()> {
        let p = self.generic(a);
        self.call_shim(WAITED, &[p], None)?;
        Ok(())
    }

    /// `ld{sem}` of a peer's element: an NVSHMEM atomic fetch (then a fence, to acquire).
    pub(in super::super) fn shmem_load(
        &mut self,
        a: &Addr,
        dt: DType,
        sem: MemSem,
        peer: &Expr,
    ) -> R<Val> {
        let (func, class) = by_width(dt, FETCH32, FETCH64)?;
        let (p, pe) = (self.generic(a), self.peer_rank(peer)?);
        let d = self
            .call_shim(func, &[p, pe], Some(class))?
            .unwrap_or_default();
        if sem.acquires() {
            self.ins("fence.acq_rel.sys");
        }
        Ok(Val::Reg(d, class))
    }

    /// `st{sem}` (`add`: `red{sem}.add`) of `v` to a peer's element.
    pub(in super::super) fn shmem_store(
        &mut self,
        a: &Addr,
        dt: DType,
        v: &Expr,
        (sem, add): (MemSem, bool),
        peer: &Expr,
    ) -> R<()> {
        let (func, class) = match (add, dt) {
            (true, DType::F32) => (ADDF32, Class::F32),
            (true, _) => by_width(dt, ADD32, ADD64)?,
            (false, _) => by_width(dt, SET32, SET64)?,
        };
        if sem.releases() {
            self.shmem_release()?;
        }
        let val = self.expr(v)?;
        let val = self.reg(&val, class);
        let (p, pe) = (self.generic(a), self.peer_rank(peer)?);
        self.call_shim(func, &[p, val, pe], None)?;
        Ok(())
    }

    /// `atom{sem}.add` on a peer's integer element: its old value.
    pub(in super::super) fn shmem_fetch_add(
        &mut self,
        a: &Addr,
        dt: DType,
        v: &Expr,
        sem: MemSem,
        peer: &Expr,
    ) -> R<Val> {
        if dt == DType::F32 {
            return Err("an NVSHMEM fetch-and-add of f32".into());
        }
        let (func, class) = by_width(dt, FETCH_ADD32, FETCH_ADD64)?;
        if sem.releases() {
            self.shmem_release()?;
        }
        let val = self.expr(v)?;
        let val = self.reg(&val, class);
        let (p, pe) = (self.generic(a), self.peer_rank(peer)?);
        let d = self
            .call_shim(func, &[p, val, pe], Some(class))?
            .unwrap_or_default();
        if sem.acquires() {
            self.ins("fence.acq_rel.sys");
        }
        Ok(Val::Reg(d, class))
    }

    /// A fetch of a peer's flag for a wait loop (the loop compares and branches).
    pub(in super::super) fn shmem_poll(&mut self, a: &Addr, dt: DType, peer: &Expr) -> R<String> {
        let (func, class) = by_width(dt, FETCH32, FETCH64)?;
        let (p, pe) = (self.generic(a), self.peer_rank(peer)?);
        Ok(self
            .call_shim(func, &[p, pe], Some(class))?
            .unwrap_or_default())
    }

    /// A warp's copy of `bytes` (a register) from `src` to `dst`, one of which is on `peer`:
    /// one NVSHMEM call its lanes make together.
    pub(in super::super) fn shmem_copy_warp(
        &mut self,
        (dst, src): (&Addr, &Addr),
        put: bool,
        bytes: String,
        peer: &Expr,
    ) -> R<()> {
        let (d, s) = (self.generic(dst), self.generic(src));
        let pe = self.peer_rank(peer)?;
        let func = if put { PUT_WARP } else { GET_WARP };
        self.call_shim(func, &[d, s, bytes, pe], None)?;
        Ok(())
    }

    /// A peer copy of `count` chunks of `bytes`, `stride` bytes apart (registers or
    /// immediates), from `src` to `dst`, one of which is on `peer` (`put`: the destination).
    pub(in super::super) fn shmem_copy(
        &mut self,
        (dst, src): (&Addr, &Addr),
        put: bool,
        (bytes, stride, count): (usize, String, String),
        peer: &Expr,
    ) -> R<()> {
        let (d, s) = (self.generic(dst), self.generic(src));
        let pe = self.peer_rank(peer)?;
        let func = if put { PUT } else { GET };
        self.call_shim(func, &[d, s, bytes.to_string(), stride, count, pe], None)?;
        Ok(())
    }
}
