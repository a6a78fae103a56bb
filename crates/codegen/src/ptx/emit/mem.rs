//! Memory: addresses (linear forms of offsets, 32×32→64 multiplies), loads and stores of
//! global and shared memory, and per-thread buffers held in registers.

use tl_ir::{BinOp, Buffer, DType, Expr, ExprKind, Scope};

use super::super::linear::linearize;
use super::super::regs::{Class, Val};
use super::{bits_type, class_of, Addr, Emitter, Local, R};

/// Where a per-thread element lives: a whole register of its class, or one half of a packed
/// 32-bit register.
enum Slot {
    Whole(String, Class),
    Half {
        reg: String,
        high: bool,
        dtype: DType,
    },
}

impl Emitter {
    /// The row-major element offset of `idx` in `buf`, with the unrolled loop variables
    /// substituted and the result simplified (64-bit for global tensors, as the CUDA
    /// printer computes it).
    fn offset_expr(&self, buf: &Buffer, idx: &[Expr]) -> Expr {
        let wide = buf.scope() == Scope::Global;
        let e = crate::cfamily::row_major_offset(buf, idx);
        let e = if self.unrolled.is_empty() {
            e
        } else {
            e.substitute(&self.unrolled)
        };
        let e = tl_ir::simplify(&e);
        if wide && e.dtype() != DType::I64 {
            e.cast(DType::I64)
        } else {
            e
        }
    }

    /// The address of `buf[idx]` in global or shared memory: the base register plus the
    /// offset's linear terms (see [`linearize`]) in bytes, each one `add` or `mad`, with the
    /// constant left in the instruction's `[reg+imm]` form. Terms are added invariant ones
    /// first and those of open serial loops last, so the copies of an unrolled tile share
    /// every partial sum but their own last term, and ptxas can hoist the shared part out of
    /// the loop.
    pub fn address(&mut self, buf: &Buffer, idx: &[Expr]) -> R<Addr> {
        let size = buf.dtype().bytes() as i64;
        let off = self.offset_expr(buf, idx);
        let mut terms = vec![];
        let mut c = 0i64;
        linearize(&off, 1, &mut terms, &mut c);
        let (class, space, base, extra) = match buf.scope() {
            Scope::Global => {
                let Some((base, _)) = self.globals.get(&buf.id()).cloned() else {
                    return Err(format!("the tensor `{}` is not a parameter", buf.name()));
                };
                (Class::B64, "global", base, 0)
            }
            Scope::Shared => {
                let Some(&boff) = self.smem_offsets.get(&buf.id()) else {
                    return Err(format!(
                        "the shared buffer `{}` was not planned",
                        buf.name()
                    ));
                };
                let Some(base) = self.smem_base.clone() else {
                    return Err("shared memory without a shared block".into());
                };
                (Class::B32, "shared", base, boff as i64)
            }
            other => return Err(format!("an address in {other} memory")),
        };
        // Copies of an unrolled tile differ mostly in the coefficient of a bare row stride
        // (`(r + i)·K` gives `K` the coefficient `i`), so bare variables go last, after the
        // terms of open loops: everything before them is one shared partial sum.
        let loops = self.loop_vars.clone();
        let rank = |e: &Expr| -> u8 {
            let in_loop = e.any(&mut |x| matches!(x.as_var(), Some(v) if loops.contains(&v.id())));
            let bare = matches!(e.kind(), ExprKind::Var(_))
                || matches!(e.kind(), ExprKind::Cast(a) if matches!(a.kind(), ExprKind::Var(_)));
            match (bare, in_loop) {
                (false, false) => 0,
                (false, true) => 1,
                (true, true) => 2,
                (true, false) => 3,
            }
        };
        terms.sort_by_cached_key(|(atom, coef)| (rank(atom), *coef != 1, format!("{atom:?}")));
        // The leading terms that do not change in the innermost serial loop are summed before
        // it: a refill of a pipelined loop sits in a conditional block, out of which ptxas
        // does not hoist them.
        let hoisted = terms
            .iter()
            .take_while(|(atom, _)| rank(atom) == 0 && self.invariant_in_loop(atom))
            .count();
        let rest = terms.split_off(hoisted);
        let base = Val::Reg(base, class);
        // (Splicing into the preheader copies the loop's text so far: only when there is
        // something to hoist.)
        let (acc, c0) = if terms.is_empty() {
            (base, 0)
        } else {
            self.in_preheader(|s| s.sum_terms(base, &terms, size, class))?
        };
        let (acc, c1) = self.sum_terms(acc, &rest, size, class)?;
        let c = c.wrapping_add(c0).wrapping_add(c1);
        Ok(Addr {
            base: acc.to_string(),
            off: c.wrapping_mul(size).wrapping_add(extra),
            space,
        })
    }

    /// `acc + Σ coef·atom·size` in bytes, each term one `add`, `mad` or `mad.wide`, and the
    /// sum of the terms that turn out constant (in elements, for the instruction's offset).
    fn sum_terms(
        &mut self,
        mut acc: Val,
        terms: &[(Expr, i64)],
        size: i64,
        class: Class,
    ) -> R<(Val, i64)> {
        let (add, mad) = if class == Class::B64 {
            ("add.s64", "mad.lo.s64")
        } else {
            ("add.s32", "mad.lo.s32")
        };
        let mut c = 0i64;
        for (atom, coef) in terms {
            let bytes = coef.wrapping_mul(size);
            if class == Class::B64 {
                if let Some(next) = self.wide_term(atom, bytes, &acc)? {
                    match next {
                        Val::Int(k) => c = c.wrapping_add(k / size.max(1)),
                        v => acc = v,
                    }
                    continue;
                }
            }
            let v = self.expr(atom)?;
            let v = match (&v, class) {
                (Val::Reg(r, Class::B32), Class::B64) => {
                    let rv = Val::Reg(r.clone(), Class::B32);
                    self.pure(Class::B64, "cvt.s64.s32", &[&rv])
                }
                (Val::Reg(_, Class::B64), Class::B32) => {
                    return Err("a 64-bit shared-memory offset".into())
                }
                _ => v,
            };
            if let Some(k) = v.as_int() {
                c = c.wrapping_add(k.wrapping_mul(*coef));
                continue;
            }
            acc = if bytes == 1 {
                self.pure(class, add, &[&acc, &v])
            } else {
                self.pure(class, mad, &[&v, &Val::Int(bytes), &acc])
            };
        }
        Ok((acc, c))
    }

    /// `acc + bytes·atom` for a 64-bit atom that is a widened 32-bit value (one
    /// `mad.wide.s32`) or a product of two (one `mul.wide.s32`, then a shift-add): the
    /// 32×32→64 forms ptxas turns into single IMAD.WIDE / LEA instructions, where general
    /// 64-bit multiplies cost several. `None` for any other atom; `Some(Int(k))` when the
    /// term is the constant `k` bytes.
    fn wide_term(&mut self, atom: &Expr, bytes: i64, acc: &Val) -> R<Option<Val>> {
        let widened = |e: &Expr| match e.kind() {
            ExprKind::Cast(x) if e.dtype() == DType::I64 && x.dtype() == DType::I32 => {
                Some(x.clone())
            }
            _ => None,
        };
        let fits = |k: i64| i32::try_from(k).is_ok();
        if let Some(x) = widened(atom) {
            let xv = self.expr(&x)?;
            if let Some(k) = xv.as_int() {
                return Ok(Some(Val::Int(k.wrapping_mul(bytes))));
            }
            if !fits(bytes) {
                return Ok(None);
            }
            return Ok(Some(self.pure(
                Class::B64,
                "mad.wide.s32",
                &[&xv, &Val::Int(bytes), acc],
            )));
        }
        let ExprKind::Bin(BinOp::Mul, a, b) = atom.kind() else {
            return Ok(None);
        };
        let (Some(x), Some(y)) = (widened(a), widened(b)) else {
            return Ok(None);
        };
        let (xv, yv) = (self.expr(&x)?, self.expr(&y)?);
        let (v, k) = match (xv.as_int(), yv.as_int()) {
            (Some(p), Some(q)) => return Ok(Some(Val::Int(p.wrapping_mul(q).wrapping_mul(bytes)))),
            (Some(p), None) => (yv, p.wrapping_mul(bytes)),
            (None, Some(q)) => (xv, q.wrapping_mul(bytes)),
            (None, None) => {
                let p = self.pure(Class::B64, "mul.wide.s32", &[&xv, &yv]);
                let shifted = match bytes {
                    1 => p,
                    b if b > 0 && (b as u64).is_power_of_two() => self.pure(
                        Class::B64,
                        "shl.b64",
                        &[&p, &Val::Int(b.trailing_zeros() as i64)],
                    ),
                    b => self.pure(Class::B64, "mul.lo.s64", &[&p, &Val::Int(b)]),
                };
                return Ok(Some(self.pure(Class::B64, "add.s64", &[acc, &shifted])));
            }
        };
        if !fits(k) {
            return Ok(None);
        }
        Ok(Some(self.pure(
            Class::B64,
            "mad.wide.s32",
            &[&v, &Val::Int(k), acc],
        )))
    }

    /// The constant element index of `buf[idx]` in a register-held buffer.
    pub fn local_index(&mut self, buf: &Buffer, idx: &[Expr]) -> R<usize> {
        let shape = buf.const_shape().ok_or_else(|| {
            format!(
                "the per-thread buffer `{}` has no constant shape",
                buf.name()
            )
        })?;
        let mut lin: i64 = 0;
        for (i, e) in idx.iter().enumerate() {
            let v = self.expr(e)?.as_int().ok_or_else(|| {
                format!(
                    "the per-thread buffer `{}` indexed by a run-time value",
                    buf.name()
                )
            })?;
            lin = lin * shape.get(i).copied().unwrap_or(1) + v;
        }
        let numel = self.locals.get(&buf.id()).map_or(0, |l| l.numel);
        if lin < 0 || lin as usize >= numel.max(1) {
            return Err(format!(
                "index {lin} outside the per-thread buffer `{}` of {numel} elements",
                buf.name()
            ));
        }
        Ok(lin as usize)
    }

    pub(super) fn load(&mut self, buf: &Buffer, idx: &[Expr]) -> R<Val> {
        let dt = buf.dtype();
        match buf.scope() {
            Scope::Local | Scope::Var => {
                let i = if buf.scope() == Scope::Var {
                    0
                } else {
                    self.local_index(buf, idx)?
                };
                self.local_read(buf, i)
            }
            Scope::Global | Scope::Shared => {
                let a = self.address(buf, idx)?;
                let nc = buf.scope() == Scope::Global
                    && self.globals.get(&buf.id()).is_some_and(|g| g.1);
                let ld = format!("ld.{}{}", a.space, if nc { ".nc" } else { "" });
                match dt {
                    DType::F32 => {
                        let d = self.fresh(Class::F32);
                        self.ins(&format!("{ld}.f32 {d}, {}", a.operand()));
                        Ok(Val::Reg(d, Class::F32))
                    }
                    DType::I32 | DType::U32 | DType::I64 | DType::U64 => {
                        let c = class_of(dt)?;
                        let d = self.fresh(c);
                        self.ins(&format!("{ld}.{} {d}, {}", bits_type(dt), a.operand()));
                        Ok(Val::Reg(d, c))
                    }
                    DType::BF16 | DType::F16 => {
                        let h = self.fresh(Class::B16);
                        self.ins(&format!("{ld}.b16 {h}, {}", a.operand()));
                        let hv = Val::Reg(h, Class::B16);
                        Ok(self.half_to_f32(&hv, dt))
                    }
                    other => Err(format!("loads of {other}")),
                }
            }
            other => Err(format!("a load from {other} memory")),
        }
    }

    /// Where element `i` of a register-held buffer lives.
    fn slot(&self, buf: &Buffer, i: usize) -> R<Slot> {
        let Some(l) = self.locals.get(&buf.id()) else {
            return Err(format!(
                "the buffer `{}` used before its allocation",
                buf.name()
            ));
        };
        if l.packed {
            return Ok(Slot::Half {
                reg: l.regs[i / 2].clone(),
                high: !i.is_multiple_of(2),
                dtype: l.dtype,
            });
        }
        // `var` scalars hold their compute type, array elements their storage type.
        let dt = if buf.scope() == Scope::Var {
            l.dtype.compute_type()
        } else {
            l.dtype
        };
        Ok(Slot::Whole(l.regs[i].clone(), class_of(dt)?))
    }

    /// Element `i` of a register-held buffer, as its compute value.
    pub fn local_read(&mut self, buf: &Buffer, i: usize) -> R<Val> {
        let (reg, high, dt) = match self.slot(buf, i)? {
            Slot::Whole(reg, c) => return Ok(self.element_value(&reg, c)),
            Slot::Half { reg, high, dtype } => (reg, high, dtype),
        };
        if dt == DType::BF16 {
            // A bf16 is the high half of the f32 with the same bits.
            let d = self.fresh(Class::F32);
            if high {
                self.ins(&format!("and.b32 {d}, {reg}, -65536"));
            } else {
                self.ins(&format!("shl.b32 {d}, {reg}, 16"));
            }
            return Ok(Val::Reg(d, Class::F32));
        }
        let (lo, hi) = (self.fresh(Class::B16), self.fresh(Class::B16));
        self.ins(&format!("mov.b32 {{{lo}, {hi}}}, {reg}"));
        let h = Val::Reg(if high { hi } else { lo }, Class::B16);
        Ok(self.half_to_f32(&h, dt))
    }

    /// Write compute value `v` to element `i` of a register-held buffer.
    pub fn local_write(&mut self, buf: &Buffer, i: usize, v: &Val) -> R<()> {
        let (reg, high, dt) = match self.slot(buf, i)? {
            Slot::Whole(dst, c) => {
                let src = match (c, v) {
                    (Class::Pred, Val::Int(k)) => {
                        let t = if *k != 0 {
                            "setp.eq.s32"
                        } else {
                            "setp.ne.s32"
                        };
                        self.pending.remove(&dst);
                        self.ins(&format!("{t} {dst}, 0, 0"));
                        return Ok(());
                    }
                    (Class::F32, Val::Int(k)) => Val::F32(*k as f32),
                    _ => v.clone(),
                };
                self.write_element(&dst, c, src);
                return Ok(());
            }
            Slot::Half { reg, high, dtype } => (reg, high, dtype),
        };
        let h = self.half_of(v, dt);
        let (lo, hi) = (self.fresh(Class::B16), self.fresh(Class::B16));
        self.ins(&format!("mov.b32 {{{lo}, {hi}}}, {reg}"));
        if high {
            self.ins(&format!("mov.b32 {reg}, {{{lo}, {h}}}"));
        } else {
            self.ins(&format!("mov.b32 {reg}, {{{h}, {hi}}}"));
        }
        Ok(())
    }

    /// Store a value computed as `value` into `buf[idx]` (rounding narrow floats once).
    pub(super) fn store(&mut self, buf: &Buffer, idx: &[Expr], value: &Expr) -> R<()> {
        let dt = buf.dtype();
        // Storing a narrow float rounds it: an explicit cast to the same type just before the
        // store would round twice.
        let value = match value.kind() {
            ExprKind::Cast(inner)
                if buf.scope() != Scope::Var
                    && value.dtype() == dt
                    && matches!(dt, DType::BF16 | DType::F16)
                    && inner.dtype().is_float() =>
            {
                inner
            }
            _ => value,
        };
        let v = self.expr(value)?;
        match buf.scope() {
            Scope::Var => self.local_write(buf, 0, &v),
            Scope::Local => {
                let i = self.local_index(buf, idx)?;
                self.local_write(buf, i, &v)
            }
            Scope::Global | Scope::Shared => {
                let a = self.address(buf, idx)?;
                let st = format!("st.{}", a.space);
                match dt {
                    DType::F32 => {
                        let r = self.reg(&v, Class::F32);
                        self.ins(&format!("{st}.f32 {}, {r}", a.operand()));
                    }
                    DType::I32 | DType::U32 | DType::I64 | DType::U64 => {
                        let c = class_of(dt)?;
                        let r = self.reg(&v, c);
                        self.ins(&format!("{st}.{} {}, {r}", bits_type(dt), a.operand()));
                    }
                    DType::BF16 | DType::F16 => {
                        let h = self.half_of(&v, dt);
                        self.ins(&format!("{st}.b16 {}, {h}", a.operand()));
                    }
                    other => return Err(format!("stores of {other}")),
                }
                Ok(())
            }
            other => Err(format!("a store to {other} memory")),
        }
    }

    /// Two f32 values converted and stored as elements `i`, `i + 1` (even `i`) of a 16-bit
    /// per-thread array: one `cvt.rn.{bf16,f16}x2.f32` straight into its register.
    pub(super) fn store_pair(&mut self, buf: &Buffer, i: usize, lo: &Expr, hi: &Expr) -> R<()> {
        let (x, y) = (self.expr(lo)?, self.expr(hi)?);
        let (x, y) = (self.reg(&x, Class::F32), self.reg(&y, Class::F32));
        let Some(l) = self.locals.get(&buf.id()).filter(|l| l.packed) else {
            return Err(format!("a packed store into `{}`", buf.name()));
        };
        let reg = l.regs[i / 2].clone();
        let t = if l.dtype == DType::F16 {
            "f16x2"
        } else {
            "bf16x2"
        };
        // PTX packs the first source into the high half.
        self.ins(&format!("cvt.rn.{t}.f32 {reg}, {y}, {x}"));
        Ok(())
    }

    pub(super) fn alloc(&mut self, b: &Buffer) -> R<()> {
        match b.scope() {
            Scope::Shared => {
                if self.smem_offsets.contains_key(&b.id()) {
                    Ok(())
                } else {
                    Err(format!("the shared buffer `{}` was not planned", b.name()))
                }
            }
            Scope::Var => {
                let c = class_of(b.dtype().compute_type())?;
                let r = self.fresh_mutable(c);
                self.locals.insert(
                    b.id(),
                    Local {
                        regs: vec![r],
                        dtype: b.dtype(),
                        packed: false,
                        numel: 1,
                    },
                );
                Ok(())
            }
            Scope::Local => {
                let n = b.const_numel().filter(|&n| n >= 0).ok_or_else(|| {
                    format!("the per-thread buffer `{}` has no constant size", b.name())
                })? as usize;
                let (class, count, packed) = local_registers(b.dtype(), n)?;
                if count > 1024 {
                    return Err(format!(
                        "the per-thread buffer `{}` of {n} elements",
                        b.name()
                    ));
                }
                let regs = (0..count.max(1))
                    .map(|_| self.fresh_mutable(class))
                    .collect();
                self.locals.insert(
                    b.id(),
                    Local {
                        regs,
                        dtype: b.dtype(),
                        packed,
                        numel: n,
                    },
                );
                Ok(())
            }
            other => Err(format!("an allocation in {other} memory")),
        }
    }
}

/// The registers of a per-thread array of `n` elements of `dt`: their class, how many, and
/// whether 16-bit elements are packed two to one.
pub(crate) fn local_registers(dt: DType, n: usize) -> R<(Class, usize, bool)> {
    Ok(match dt {
        DType::F32 => (Class::F32, n, false),
        DType::I32 | DType::U32 => (Class::B32, n, false),
        DType::BF16 | DType::F16 => (Class::B32, n.div_ceil(2), true),
        other => return Err(format!("a per-thread buffer of {other}")),
    })
}
