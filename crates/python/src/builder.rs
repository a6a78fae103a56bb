//! The tracer's builder: the imperative form of the Rust DSL (`KernelBuilder::open_launch`,
//! `TileScope::open_loop` …) behind a stack of open scopes. The Python tracer sets the
//! user's line with `set_span` before each statement and calls one method per construct, so
//! every check and diagnostic of a tile op is the Rust DSL's own.

use pyo3::prelude::*;
use tilelang::dsl::{KernelBuilder, OpenIf, OpenLaunch, OpenLoop, Tile, TileScope};
use tilelang::ir::{ExprKind, ForKind, Param, Role, Span, WarpPolicy};
use tilelang::Kernel;

use crate::error::{diagnostics, type_error};
use crate::expr::{dtype_arg, to_expr, to_exprs, PyBuffer, PyExpr, PyRegion};
use crate::kernel::PyKernel;
use crate::span::span;

enum Frame {
    Launch {
        open: OpenLaunch,
        scope: TileScope,
    },
    Loop {
        open: OpenLoop,
        body: TileScope,
    },
    If {
        open: OpenIf,
        then: TileScope,
        else_: Option<TileScope>,
    },
}

/// Builds one kernel; made by the tracer for each `@T.prim_func`.
#[pyclass(name = "Builder", module = "tilelang_rs._native", unsendable)]
pub struct Builder {
    k: Option<KernelBuilder>,
    frames: Vec<Frame>,
    span: Span,
}

fn internal(what: &str) -> PyErr {
    diagnostics(format!(
        "error[internal]: the tracer {what}\n  help: this is a bug of tilelang's Python front end; please report it with the kernel"
    ))
}

/// A tile op argument: a whole buffer, a region `A[i:i+n, :]`, or a tile start `A[i, j]`
/// (an element load, whose extents come from the op's other operand, as in TileLang).
fn to_tile(obj: &Bound<'_, PyAny>, span: Span) -> PyResult<Tile> {
    if let Ok(b) = obj.cast::<PyBuffer>() {
        let mut t = Tile::from(&b.get().b);
        t.span = span;
        return Ok(t);
    }
    if let Ok(r) = obj.cast::<PyRegion>() {
        let r = r.get();
        return Ok(Tile {
            buffer: r.buffer.clone(),
            offsets: r.offsets.clone(),
            extents: Some(r.extents.clone()),
            span,
        });
    }
    if let Ok(e) = obj.cast::<PyExpr>() {
        if let ExprKind::Load(b, idx) = e.get().e.kind() {
            return Ok(Tile {
                buffer: b.clone(),
                offsets: idx.clone(),
                extents: None,
                span,
            });
        }
    }
    Err(type_error(format!(
        "expected a buffer, a tile start `A[i, j]` or a region `A[i:i+n, :]`, got `{}`",
        obj.repr()?
    )))
}

fn policy(name: &str) -> PyResult<WarpPolicy> {
    Ok(match name {
        "auto" | "Auto" => WarpPolicy::Auto,
        "square" | "Square" => WarpPolicy::Square,
        "full_row" | "FullRow" => WarpPolicy::FullRow,
        "full_col" | "FullCol" => WarpPolicy::FullCol,
        other => {
            return Err(type_error(format!(
            "unknown gemm warp policy `{other}`; use T.GemmWarpPolicy.Square, FullRow or FullCol"
        )))
        }
    })
}

impl Builder {
    fn kb(&mut self) -> PyResult<&mut KernelBuilder> {
        self.k
            .as_mut()
            .ok_or_else(|| internal("used a finished builder"))
    }

    /// The scope statements go to now.
    fn scope(&mut self) -> PyResult<&mut TileScope> {
        match self.frames.last_mut() {
            Some(Frame::Launch { scope, .. }) => Ok(scope),
            Some(Frame::Loop { body, .. }) => Ok(body),
            Some(Frame::If {
                else_: Some(e), ..
            }) => Ok(e),
            Some(Frame::If { then, .. }) => Ok(then),
            None => Err(diagnostics(format!(
                "error[invalid-argument]: tile operations, loops and allocations belong inside `with T.Kernel(...)`\n  --> {}\n  help: open the launch first: `with T.Kernel(grid..., threads=128) as (bx, by):`",
                self.span
            ))),
        }
    }

    fn tile(&self, obj: &Bound<'_, PyAny>) -> PyResult<Tile> {
        to_tile(obj, self.span)
    }
}

/// Symbolic sizes in a parameter's shape become the kernel's dims.
fn register_dims(kb: &mut KernelBuilder, shape: &[tilelang::ir::Expr]) {
    for e in shape {
        let mut vars = vec![];
        e.visit(&mut |x| {
            if let Some(v) = x.as_var() {
                vars.push(v.clone());
            }
        });
        for v in vars {
            kb.dim_var(&v);
        }
    }
}

/// Which parameters a kernel writes (by buffer id): stores, and the destinations of tile ops.
#[pymethods]
impl Builder {
    #[new]
    fn new(name: &str, file: &str, line: u32) -> Builder {
        let sp = span(file, line, 1);
        Builder {
            k: Some(Kernel::builder(name, sp)),
            frames: vec![],
            span: sp,
        }
    }

    /// The user's location of what comes next.
    fn set_span(&mut self, file: &str, line: u32, col: u32) -> PyResult<()> {
        self.span = span(file, line, col);
        let sp = self.span;
        self.kb()?.set_span(Some(sp));
        Ok(())
    }

    /// A tensor parameter; symbolic sizes in its shape become the kernel's dims. Its role is
    /// settled by [`finish`](Self::finish) from what the body writes.
    fn param(&mut self, name: &str, shape: &Bound<'_, PyAny>, dtype: &str) -> PyResult<PyBuffer> {
        let shape = to_exprs(shape)?;
        let dtype = dtype_arg(dtype)?;
        let kb = self.kb()?;
        register_dims(kb, &shape);
        Ok(PyBuffer {
            b: kb.param(name, shape, dtype, Role::InOut),
        })
    }

    /// A scalar parameter.
    fn scalar(&mut self, name: &str, dtype: &str) -> PyResult<PyExpr> {
        let dtype = dtype_arg(dtype)?;
        Ok(PyExpr::new(self.kb()?.scalar(name, dtype)))
    }

    /// Open the launch; the block indices, one per name (None when the kernel already has a
    /// launch: the diagnostic is recorded and reported by `finish`).
    fn begin_launch(
        &mut self,
        grid: &Bound<'_, PyAny>,
        threads: u32,
        names: Vec<String>,
    ) -> PyResult<Option<Vec<PyExpr>>> {
        if !self.frames.is_empty() {
            return Err(diagnostics(format!(
                "error[invalid-argument]: `T.Kernel` inside a launch\n  --> {}\n  help: a kernel has one `with T.Kernel(...)` block, at the top of its body",
                self.span
            )));
        }
        let grid = to_exprs(grid)?;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let kb = self.kb()?;
        match kb.open_launch(grid, threads, &names) {
            Some((open, scope)) => {
                let idx = open.block_indices();
                self.frames.push(Frame::Launch { open, scope });
                Ok(Some(idx.into_iter().map(PyExpr::new).collect()))
            }
            // A second launch: the diagnostic is recorded, and the tracer skips the body.
            None => Ok(None),
        }
    }

    fn end_launch(&mut self) -> PyResult<()> {
        match self.frames.pop() {
            Some(Frame::Launch { open, scope }) => {
                self.kb()?.close_launch(open, scope);
                Ok(())
            }
            _ => Err(internal("closed a launch that was not open")),
        }
    }

    /// An on-chip buffer: `shared`, `fragment`, `local` or `var`.
    #[pyo3(signature = (scope, shape, dtype, name=None))]
    fn alloc(
        &mut self,
        scope: &str,
        shape: &Bound<'_, PyAny>,
        dtype: &str,
        name: Option<&str>,
    ) -> PyResult<PyBuffer> {
        let shape = to_exprs(shape)?;
        let dtype = dtype_arg(dtype)?;
        let t = self.scope()?;
        let name = name.unwrap_or(match scope {
            "shared" => "shared",
            "fragment" => "frag",
            "var" => "var",
            _ => "local",
        });
        let b = match scope {
            "shared" => t.alloc_shared_named(name, shape, dtype),
            "fragment" => t.alloc_fragment_named(name, shape, dtype),
            "local" => t.alloc_local_named(name, shape, dtype),
            "var" => t.alloc_var(dtype),
            other => return Err(internal(&format!("asked for a `{other}` buffer"))),
        };
        Ok(PyBuffer { b })
    }

    fn copy(&mut self, src: &Bound<'_, PyAny>, dst: &Bound<'_, PyAny>) -> PyResult<()> {
        let (s, d) = (self.tile(src)?, self.tile(dst)?);
        self.scope()?.copy(s, d);
        Ok(())
    }

    #[pyo3(signature = (a, b, c, transpose_a=false, transpose_b=false, policy_name="auto", clear_accum=false, wg_wait=0, overlap=false))]
    #[allow(clippy::too_many_arguments)] // one per keyword of T.gemm
    fn gemm(
        &mut self,
        a: &Bound<'_, PyAny>,
        b: &Bound<'_, PyAny>,
        c: &Bound<'_, PyAny>,
        transpose_a: bool,
        transpose_b: bool,
        policy_name: &str,
        clear_accum: bool,
        wg_wait: i32,
        overlap: bool,
    ) -> PyResult<()> {
        if wg_wait < -1 {
            return Err(crate::error::value_error(format!(
                "wg_wait must be -1 (do not wait) or the number of wgmma groups left pending (≥ 0), got {wg_wait}"
            )));
        }
        let p = policy(policy_name)?;
        let (a, b, c) = (self.tile(a)?, self.tile(b)?, self.tile(c)?);
        let mut g = self.scope()?.gemm(a, b, c).policy(p);
        if transpose_a {
            g = g.transpose_a();
        }
        if transpose_b {
            g = g.transpose_b();
        }
        if clear_accum {
            g = g.clear_accum();
        }
        if overlap {
            g = g.overlap();
        }
        // TileLang's default, 0, waits for everything: the compiler's own choice.
        if wg_wait != 0 {
            g.wg_wait(wg_wait);
        }
        Ok(())
    }

    #[pyo3(signature = (n, pinned=false))]
    fn wait_wgmma(&mut self, n: u32, pinned: bool) -> PyResult<()> {
        if pinned {
            self.scope()?.wait_wgmma_pinned(n);
        } else {
            self.scope()?.wait_wgmma(n);
        }
        Ok(())
    }

    fn fill(&mut self, dst: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let (d, v) = (self.tile(dst)?, to_expr(value)?);
        self.scope()?.fill(d, v);
        Ok(())
    }

    fn clear(&mut self, dst: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = self.tile(dst)?;
        self.scope()?.clear(d);
        Ok(())
    }

    /// `kind`: sum, max, min, abssum, absmax.
    fn reduce(
        &mut self,
        kind: &str,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        dim: i64,
        clear: bool,
    ) -> PyResult<()> {
        let (s, d) = (self.tile(src)?, self.tile(dst)?);
        let rank = s.buffer.rank() as i64;
        // TileLang allows dim=-1 for the last dimension.
        let dim = if dim < 0 { dim + rank } else { dim };
        if dim < 0 {
            return Err(type_error(format!(
                "reduce: dim must be in -{rank}..{rank}"
            )));
        }
        let t = self.scope()?;
        let h = match kind {
            "sum" => t.reduce_sum(s, d, dim as usize),
            "max" => t.reduce_max(s, d, dim as usize),
            "min" => t.reduce_min(s, d, dim as usize),
            "abssum" => t.reduce_abssum(s, d, dim as usize),
            "absmax" => t.reduce_absmax(s, d, dim as usize),
            other => return Err(internal(&format!("asked for a `{other}` reduction"))),
        };
        h.clear(clear);
        Ok(())
    }

    /// `T.atomic_add/max/min(dst_tile, src_tile)`: an element-wise atomic update of a tile.
    fn atomic(
        &mut self,
        kind: &str,
        dst: &Bound<'_, PyAny>,
        src: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (d, s) = (self.tile(dst)?, self.tile(src)?);
        let t = self.scope()?;
        match kind {
            "add" => t.atomic_add(d, s),
            "max" => t.atomic_max(d, s),
            "min" => t.atomic_min(d, s),
            other => return Err(type_error(format!("an atomic {other:?}"))),
        }
        Ok(())
    }

    /// `T.print(value, msg)`: debug output of a value from every thread that runs it.
    fn print_value(&mut self, msg: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = to_expr(value)?;
        self.scope()?.print(msg, v);
        Ok(())
    }

    /// `T.atomic_add/max/min(C[i, j], v)`: an atomic update of one element.
    fn atomic_at(
        &mut self,
        kind: &str,
        elem: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (e, v) = (to_expr(elem)?, to_expr(value)?);
        let t = self.scope()?;
        match kind {
            "add" => t.atomic_add_at(e, v),
            "max" => t.atomic_max_at(e, v),
            "min" => t.atomic_min_at(e, v),
            other => return Err(type_error(format!("an atomic {other:?}"))),
        }
        Ok(())
    }

    fn cumsum(
        &mut self,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        dim: i64,
        reverse: bool,
    ) -> PyResult<()> {
        let (s, d) = (self.tile(src)?, self.tile(dst)?);
        let rank = s.buffer.rank() as i64;
        let dim = if dim < 0 { dim + rank } else { dim };
        if dim < 0 {
            return Err(type_error(format!(
                "cumsum: dim must be in -{rank}..{rank}"
            )));
        }
        let h = self.scope()?.cumsum(s, d, dim as usize);
        if reverse {
            h.reverse();
        }
        Ok(())
    }

    /// `buf[indices] = value` (the value is converted to the buffer's type).
    fn store(
        &mut self,
        buf: &Bound<'_, PyBuffer>,
        indices: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let b = buf.get().b.clone();
        let idx = to_exprs(indices)?;
        if idx.len() != b.rank() {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "`{}` has {} dimensions, but {} indices were given",
                b.name(),
                b.rank(),
                idx.len()
            )));
        }
        let v = to_expr(value)?;
        self.scope()?.store(&b, idx, v);
        Ok(())
    }

    /// Bind `value` to a new variable (a snapshot: later stores do not change it).
    fn let_(&mut self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        let v = to_expr(value)?;
        Ok(PyExpr::new(self.scope()?.let_(name, v)))
    }

    /// Open a loop: `kind` is serial, unroll or pipelined; returns the index.
    #[pyo3(signature = (kind, name, start, extent, stages=0, order=None, stage=None))]
    #[allow(clippy::too_many_arguments)] // one per keyword of T.Pipelined
    fn begin_for(
        &mut self,
        kind: &str,
        name: &str,
        start: &Bound<'_, PyAny>,
        extent: &Bound<'_, PyAny>,
        stages: u32,
        order: Option<Vec<i32>>,
        stage: Option<Vec<i32>>,
    ) -> PyResult<PyExpr> {
        let (start, extent) = (to_expr(start)?, to_expr(extent)?);
        let kind = match kind {
            "serial" => ForKind::Serial,
            "unroll" => ForKind::Unrolled,
            "pipelined" => ForKind::Pipelined {
                stages,
                order,
                stage,
            },
            other => return Err(internal(&format!("asked for a `{other}` loop"))),
        };
        let t = self.scope()?;
        let open = t.open_loop(name, start, extent, kind);
        let body = t.child();
        let var = open.indices().remove(0);
        self.frames.push(Frame::Loop { open, body });
        Ok(PyExpr::new(var))
    }

    /// Open a parallel nest; its indices, or None (with a diagnostic recorded) when the names
    /// and extents do not match.
    fn begin_parallel(
        &mut self,
        extents: &Bound<'_, PyAny>,
        names: Vec<String>,
    ) -> PyResult<Option<Vec<PyExpr>>> {
        let extents = to_exprs(extents)?;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let t = self.scope()?;
        let Some(open) = t.open_parallel(extents, &names) else {
            return Ok(None);
        };
        let body = t.child();
        let idx = open.indices();
        self.frames.push(Frame::Loop { open, body });
        Ok(Some(idx.into_iter().map(PyExpr::new).collect()))
    }

    fn end_for(&mut self) -> PyResult<()> {
        match self.frames.pop() {
            Some(Frame::Loop { open, body }) => {
                self.scope()?.close_loop(open, body);
                Ok(())
            }
            _ => Err(internal("closed a loop that was not open")),
        }
    }

    fn begin_if(&mut self, cond: &Bound<'_, PyAny>) -> PyResult<()> {
        let c = to_expr(cond)?;
        let t = self.scope()?;
        let open = t.open_if(c);
        let then = t.child();
        self.frames.push(Frame::If {
            open,
            then,
            else_: None,
        });
        Ok(())
    }

    fn begin_else(&mut self) -> PyResult<()> {
        match self.frames.last_mut() {
            Some(Frame::If { then, else_, .. }) if else_.is_none() => {
                *else_ = Some(then.child());
                Ok(())
            }
            _ => Err(internal("opened an else without an if")),
        }
    }

    fn end_if(&mut self) -> PyResult<()> {
        match self.frames.pop() {
            Some(Frame::If { open, then, else_ }) => {
                self.scope()?.close_if(open, then, else_);
                Ok(())
            }
            _ => Err(internal("closed an if that was not open")),
        }
    }

    /// Rasterize blocks in panels (TileLang's `T.use_swizzle`).
    fn use_swizzle(&mut self, panel: u32) -> PyResult<()> {
        self.scope()?.use_swizzle(panel);
        Ok(())
    }

    /// Give a shared or fragment buffer a layout (CuTe notation).
    fn annotate_layout(&mut self, buf: &Bound<'_, PyBuffer>, layout: &str) -> PyResult<()> {
        let b = buf.get().b.clone();
        self.scope()?.annotate_layout(&b, layout);
        Ok(())
    }

    /// The kernel, verified (a `TileLangError` with every diagnostic otherwise). Parameters
    /// the body never writes become inputs (read-only in generated code), the rest in-out.
    /// A tensor parameter in the symmetric heap (`T.SymmTensor`): every rank has one, peers
    /// may read and write it. Makes the kernel distributed.
    fn symmetric_param(
        &mut self,
        name: &str,
        shape: &Bound<'_, PyAny>,
        dtype: &str,
    ) -> PyResult<PyBuffer> {
        let shape = to_exprs(shape)?;
        let dtype = dtype_arg(dtype)?;
        let kb = self.kb()?;
        register_dims(kb, &shape);
        Ok(PyBuffer {
            b: kb.symmetric(name, shape, dtype),
        })
    }

    /// (rank, num_ranks) of a distributed kernel (makes the kernel distributed).
    fn ranks(&mut self) -> PyResult<(PyExpr, PyExpr)> {
        let d = self.kb()?.distributed();
        Ok((PyExpr::new(d.rank), PyExpr::new(d.num_ranks)))
    }

    /// `T.ld`: a memory-model load (of `peer`'s copy when given).
    #[pyo3(signature = (elem, sem, scope, peer=None))]
    fn mem_ld(
        &mut self,
        elem: &Bound<'_, PyAny>,
        sem: &str,
        scope: &str,
        peer: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyExpr> {
        let (e, p) = (to_expr(elem)?, peer.map(to_expr).transpose()?);
        let (sem, scope) = (mem_sem(sem)?, mem_scope(scope)?);
        Ok(PyExpr::new(self.scope()?.ld(e, p, sem, scope)))
    }

    /// `T.st` / `T.red_add` (`add`): a memory-model store or reduction.
    #[pyo3(signature = (elem, value, sem, scope, peer=None, add=false))]
    fn mem_st(
        &mut self,
        elem: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        sem: &str,
        scope: &str,
        peer: Option<&Bound<'_, PyAny>>,
        add: bool,
    ) -> PyResult<()> {
        let (e, v, p) = (
            to_expr(elem)?,
            to_expr(value)?,
            peer.map(to_expr).transpose()?,
        );
        let (sem, scope) = (mem_sem(sem)?, mem_scope(scope)?);
        let t = self.scope()?;
        if add {
            t.red_add(e, p, v, sem, scope);
        } else {
            t.st(e, p, v, sem, scope);
        }
        Ok(())
    }

    /// `T.atom_add`: an atomic add; the old value.
    #[pyo3(signature = (elem, value, sem, scope, peer=None))]
    fn mem_atom_add(
        &mut self,
        elem: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        sem: &str,
        scope: &str,
        peer: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyExpr> {
        let (e, v, p) = (
            to_expr(elem)?,
            to_expr(value)?,
            peer.map(to_expr).transpose()?,
        );
        let (sem, scope) = (mem_sem(sem)?, mem_scope(scope)?);
        Ok(PyExpr::new(self.scope()?.atom_add(e, p, v, sem, scope)))
    }

    fn fence(&mut self, scope: &str) -> PyResult<()> {
        let scope = mem_scope(scope)?;
        self.scope()?.fence(scope);
        Ok(())
    }

    /// `T.signal`: a release store (`set`) or add (`add`) of `value` into `peer`'s flag.
    fn signal(
        &mut self,
        flag: &Bound<'_, PyAny>,
        peer: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        op: &str,
    ) -> PyResult<()> {
        let op = match op {
            "set" => tilelang::dsl::SignalOp::Set,
            "add" => tilelang::dsl::SignalOp::Add,
            other => {
                return Err(type_error(format!(
                    "T.signal op={other:?}: \"set\" or \"add\""
                )))
            }
        };
        let (f, p, v) = (to_expr(flag)?, to_expr(peer)?, to_expr(value)?);
        self.scope()?.signal(f, p, v, op);
        Ok(())
    }

    /// `T.wait_{cmp}`: spin until this rank's flag compares true (an acquire).
    fn wait(
        &mut self,
        flag: &Bound<'_, PyAny>,
        cmp: &str,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        use tilelang::ir::CmpOp;
        let cmp = match cmp {
            "eq" => CmpOp::Eq,
            "ne" => CmpOp::Ne,
            "lt" => CmpOp::Lt,
            "le" => CmpOp::Le,
            "gt" => CmpOp::Gt,
            "ge" => CmpOp::Ge,
            other => return Err(type_error(format!("a wait with comparison {other:?}"))),
        };
        let (f, v) = (to_expr(flag)?, to_expr(value)?);
        self.scope()?.wait(f, cmp, v);
        Ok(())
    }

    /// `T.wait_counter`: until the counter has reached the value, modulo 2^bits.
    fn wait_counter(&mut self, flag: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let (f, v) = (to_expr(flag)?, to_expr(value)?);
        self.scope()?.wait_counter(f, v);
        Ok(())
    }

    /// `T.put_block` (`put`) / `T.get_block`: the block copies `count` elements to or from a
    /// peer.
    /// `T.put_block` / `T.get_block`, or with `warp` `T.put_warp` / `T.get_warp`.
    #[pyo3(signature = (src, dst, count, peer, put, warp=false))]
    fn block_copy(
        &mut self,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        count: &Bound<'_, PyAny>,
        peer: &Bound<'_, PyAny>,
        put: bool,
        warp: bool,
    ) -> PyResult<()> {
        let (s, d, n, p) = (
            to_expr(src)?,
            to_expr(dst)?,
            to_expr(count)?,
            to_expr(peer)?,
        );
        let t = self.scope()?;
        match (put, warp) {
            (true, false) => t.put_block(s, d, n, p),
            (false, false) => t.get_block(s, d, n, p),
            (true, true) => t.put_warp(s, d, n, p),
            (false, true) => t.get_warp(s, d, n, p),
        }
        Ok(())
    }

    fn sync_warp(&mut self) -> PyResult<()> {
        self.scope()?.sync_warp();
        Ok(())
    }

    /// Address peers through per-buffer tables (`T.use_peer_tables()`).
    fn peer_tables(&mut self) -> PyResult<()> {
        self.kb()?.peer_tables();
        Ok(())
    }

    /// `threadIdx.x` (TileLang's `T.get_thread_binding()`).
    fn thread_idx(&mut self) -> PyResult<PyExpr> {
        Ok(PyExpr::new(self.scope()?.thread_idx()))
    }

    /// A warp shuffle of `value` by `arg` over the whole warp: `kind` is `xor` (lane ^ arg),
    /// `down` (lane + arg) or `idx` (lane arg).
    fn shfl(
        &mut self,
        kind: &str,
        value: &Bound<'_, PyAny>,
        arg: &Bound<'_, PyAny>,
    ) -> PyResult<PyExpr> {
        let (v, a) = (to_expr(value)?, to_expr(arg)?);
        if v.dtype().is_bool() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a shuffle moves numbers, not booleans: cast the value to an integer first",
            ));
        }
        let s = self.scope()?;
        let e = match kind {
            "xor" => s.shfl_xor(v, a),
            "down" => s.shfl_down(v, a),
            "idx" => s.shfl_idx(v, a),
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown shuffle `{other}` (xor, down or idx)"
                )))
            }
        };
        Ok(PyExpr::new(e))
    }

    /// Call the device function `name` on `args`: an expression of `dtype`, or (`dtype`
    /// None) a statement run for its effect.
    #[pyo3(signature = (name, args, dtype=None))]
    fn call_extern(
        &mut self,
        name: &str,
        args: &Bound<'_, PyAny>,
        dtype: Option<&str>,
    ) -> PyResult<Option<PyExpr>> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "`{name}` is not a function name (letters, digits, `_` and `::` only)"
            )));
        }
        let args = to_exprs(args)?;
        match dtype {
            Some(d) => {
                let dt = dtype_arg(d)?;
                Ok(Some(PyExpr::new(self.scope()?.call_extern(name, args, dt))))
            }
            None => {
                let call = tilelang::ir::Expr::call(
                    tilelang::ir::Intrinsic::Extern {
                        name: name.to_string(),
                        pure: false,
                    },
                    args,
                    tilelang::ir::DType::Bool,
                );
                self.scope()?.evaluate(call);
                Ok(None)
            }
        }
    }

    fn sync_threads(&mut self) -> PyResult<()> {
        self.scope()?.sync_threads();
        Ok(())
    }

    fn barrier_blocks(
        &mut self,
        counter: &Bound<'_, PyAny>,
        blocks: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (c, n) = (to_expr(counter)?, to_expr(blocks)?);
        self.scope()?.barrier_blocks(c, n);
        Ok(())
    }

    fn barrier_ranks(&mut self, bar: &Bound<'_, PyBuffer>, row: &Bound<'_, PyAny>) -> PyResult<()> {
        let (b, r) = (bar.get().b.clone(), to_expr(row)?);
        self.scope()?.barrier_ranks(&b, r);
        Ok(())
    }

    fn finish(&mut self) -> PyResult<PyKernel> {
        if !self.frames.is_empty() {
            return Err(internal("finished with scopes still open"));
        }
        let kb = self
            .k
            .take()
            .ok_or_else(|| internal("finished a builder twice"))?;
        let kernel = Kernel::from_builder(kb);
        kernel.verify().map_err(diagnostics)?;
        let mut ir = kernel.ir().clone();
        let w = ir.body.written_buffers();
        // Peers write symmetric buffers: never read-only.
        let symmetric: Vec<u64> = ir
            .attrs
            .dist
            .as_ref()
            .map(|d| d.symmetric.clone())
            .unwrap_or_default();
        for p in &mut ir.params {
            if let Param::Tensor { buffer, role } = p {
                *role = if w.contains(&buffer.id()) || symmetric.contains(&buffer.id()) {
                    Role::InOut
                } else {
                    Role::Input
                };
            }
        }
        Ok(PyKernel::new(Kernel::from_ir(ir)))
    }
}

fn mem_sem(s: &str) -> PyResult<tilelang::ir::MemSem> {
    use tilelang::ir::MemSem::*;
    Ok(match s {
        "weak" => Weak,
        "volatile" => Volatile,
        "relaxed" => Relaxed,
        "acquire" => Acquire,
        "release" => Release,
        "acq_rel" => AcqRel,
        other => {
            return Err(type_error(format!(
                "sem={other:?}: weak, volatile, relaxed, acquire, release or acq_rel"
            )))
        }
    })
}

fn mem_scope(s: &str) -> PyResult<tilelang::ir::MemScope> {
    use tilelang::ir::MemScope::*;
    Ok(match s {
        "cta" => Cta,
        "gpu" => Gpu,
        "sys" => Sys,
        other => return Err(type_error(format!("scope={other:?}: cta, gpu or sys"))),
    })
}

/// The dtype of an expression's value, by name (for the tracer's constant folding).
#[pyfunction]
fn expr_dtype(x: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    Ok(crate::expr::dtype_name(to_expr(x)?.dtype()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Builder>()?;
    m.add_function(wrap_pyfunction!(expr_dtype, m)?)?;
    Ok(())
}
