//! Thread-level IR → PTX instructions: expressions and control flow (memory and per-thread
//! buffers in [`mem`]).
//!
//! The printer follows the CUDA printer's semantics exactly (narrow floats computed in f32,
//! rounded at stores and explicit casts; C's truncating `/` and `%`; global offsets in 64
//! bits), with three choices of its own that make the output small enough for ptxas alone:
//! - `Unrolled` and `Vectorized` loops with constant bounds are unrolled here, so per-thread
//!   arrays are indexed by constants and live in registers (16-bit arrays two to a 32-bit
//!   register, the layout ldmatrix, mma and packed conversions use);
//! - pure instructions are value-numbered within the structured scope they are emitted in
//!   (the address arithmetic that many copies share is computed once);
//! - anything it does not cover is reported as unsupported, and the caller falls back to
//!   CUDA C++ — never a guess.

use std::collections::{HashMap, HashSet};

use tl_ir::{BinOp, CmpOp, DType, Expr, ExprKind, ForKind, Scope, Stmt, StmtKind, UnOp};

use super::regs::{Class, Regs, Val};

/// Why the PTX printer cannot print a kernel (the caller falls back to CUDA C++).
pub type R<T> = Result<T, String>;

/// A per-thread array or scalar held in registers.
pub(super) struct Local {
    pub regs: Vec<String>,
    pub dtype: DType,
    /// 16-bit elements, two per 32-bit register (element `2k` in the low half).
    pub packed: bool,
    pub numel: usize,
}

/// A memory address: a register plus a constant byte offset.
#[derive(Clone)]
pub(super) struct Addr {
    pub base: String,
    pub off: i64,
    pub space: &'static str,
}

impl Addr {
    pub fn operand(&self) -> String {
        match self.off {
            0 => format!("[{}]", self.base),
            // PTX writes a negative displacement as `+-n`.
            o => format!("[{}+{o}]", self.base),
        }
    }
}

mod mem;
pub(crate) use mem::local_registers;

pub(super) struct Emitter {
    pub regs: Regs,
    pub out: String,
    labels: u32,
    /// Variables: lets, loop counters, parameters, dims, block indices.
    pub env: HashMap<u64, Val>,
    /// Unrolled loop variables, as constants (substituted before address simplification).
    unrolled: HashMap<u64, Expr>,
    pub locals: HashMap<u64, Local>,
    /// Registers that statements reassign (array elements, `var` scalars): never keys of the
    /// value table.
    mutable: HashSet<String>,
    /// Value numbering, one table per open structured scope.
    cse: Vec<HashMap<String, Val>>,
    /// Global tensors: the generic-to-global converted base register, and whether the kernel
    /// only reads it (`ld.global.nc`).
    pub globals: HashMap<u64, (String, bool)>,
    pub smem_base: Option<String>,
    pub smem_offsets: HashMap<u64, u64>,
    /// Tensor-map parameter names, by (tensor buffer id, box, swizzle).
    pub tmaps: HashMap<(u64, Vec<u32>, u32), String>,
    pub tid: String,
    pub sm: u32,
    /// A multi-rank kernel's rank and heap-stride parameters, for peer addresses.
    pub dist: Option<tl_ir::DistAttrs>,
    /// Functions defined elsewhere that the kernel calls (NVSHMEM's shim), by name: their
    /// module-scope declarations.
    pub externs: std::collections::BTreeMap<&'static str, String>,
    /// Use only division and square-root forms that ptxas expands inline. IEEE `div.rn`,
    /// `rcp.rn` and `sqrt.rn` have a slow path that nvJitLink links as an external subroutine,
    /// and ptxas serializes every wgmma of a function that makes any external call (C7509:
    /// an arrive and a wait around each one). Kernels with wgmma trade correct rounding of
    /// those operations for the pipeline: `div.full.f32` (within 2 ulp) and
    /// `sqrt.approx.f32`.
    pub inline_math: bool,
    /// Variables of the serial loops open at this point (addresses add their terms last).
    loop_vars: HashSet<u64>,
    /// Registers known to hold non-negative values (see [`Emitter::non_negative`]).
    pub nonneg: HashSet<String>,
    /// The open serial loops' preheaders, innermost last (see [`Emitter::in_preheader`]).
    preheaders: Vec<Preheader>,
    /// Writes to register-held elements (array elements, `var` scalars) not yet emitted: the
    /// element's register → (when it was written, its class, the value it holds now: a
    /// constant or a register no statement reassigns). Reads take the value itself, so
    /// straight-line code is in SSA form for ptxas: an element rewritten in place (`s[i] =
    /// exp2(s[i] − m)` over a wgmma accumulator) otherwise ties each new value to the
    /// accumulator's register, and under a register bound ptxas then spilled and serialized
    /// the wgmmas (d64 attention, 36 bytes). The writes are emitted where control flow joins
    /// and before a `wgmma.fence` ([`Emitter::flush_writes`]), and before an instruction names
    /// the registers ([`Emitter::flush_registers`]).
    pending: HashMap<String, (u64, Class, Val)>,
    /// The order of `pending`'s writes, for a deterministic listing.
    writes: u64,
    /// Hoist loop-invariant address arithmetic out of serial loops. Off under a register
    /// bound (`.minnctapersm`): the hoisted sums stay live across the loop, and there they
    /// cost spills or serialized wgmmas more than the instructions they save.
    pub hoist_invariants: bool,
}

/// Where an open serial loop's invariant address arithmetic goes: before the loop's first
/// instruction, in the value table of the scope around the loop.
struct Preheader {
    /// Byte offset in `out` of the loop's top.
    at: usize,
    /// Value tables open around the loop.
    depth: usize,
    /// Variables bound before the loop: an expression of these alone is loop-invariant.
    outside: HashSet<u64>,
}

fn class_of(dt: DType) -> R<Class> {
    Ok(match dt {
        DType::Bool => Class::Pred,
        DType::I32 | DType::U32 => Class::B32,
        DType::I64 | DType::U64 => Class::B64,
        DType::F32 | DType::F16 | DType::BF16 => Class::F32,
        other => return Err(format!("arithmetic on {other}")),
    })
}

fn int_type(dt: DType) -> &'static str {
    match dt {
        DType::U32 => "u32",
        DType::I64 => "s64",
        DType::U64 => "u64",
        _ => "s32",
    }
}

fn bits_type(dt: DType) -> &'static str {
    if dt.bytes() > 4 {
        "b64"
    } else {
        "b32"
    }
}

/// Wrap an integer result to the width and signedness of `dt`.
fn wrap(v: i64, dt: DType) -> i64 {
    match dt {
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        _ => v,
    }
}

fn fold_int(op: BinOp, a: i64, b: i64, dt: DType) -> Option<i64> {
    let unsigned = dt.is_unsigned_int();
    let r = match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::Div | BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod if b == 0 => return None,
        BinOp::Div if unsigned => ((a as u64) / (b as u64)) as i64,
        BinOp::Mod if unsigned => ((a as u64) % (b as u64)) as i64,
        BinOp::Div => a.wrapping_div(b),
        BinOp::Mod => a.wrapping_rem(b),
        BinOp::FloorDiv => a.div_euclid(b) - i64::from(b < 0 && a.rem_euclid(b) != 0),
        BinOp::FloorMod => a - b * (a.div_euclid(b) - i64::from(b < 0 && a.rem_euclid(b) != 0)),
        BinOp::Min => a.min(b),
        BinOp::Max => a.max(b),
        BinOp::BitAnd => a & b,
        BinOp::BitOr => a | b,
        BinOp::BitXor => a ^ b,
        BinOp::Shl if (0..64).contains(&b) => a.wrapping_shl(b as u32),
        BinOp::Shr if (0..64).contains(&b) => {
            if unsigned {
                ((a as u64) >> b) as i64
            } else {
                a >> b
            }
        }
        _ => return None,
    };
    Some(wrap(r, dt))
}

/// Whether evaluating `e` reads memory or has effects: such an operand of `&&`, `||` or a
/// select may not be evaluated when C would skip it.
fn reads_memory(e: &Expr) -> bool {
    e.any(&mut |x| match x.kind() {
        ExprKind::Load(b, _) => matches!(b.scope(), Scope::Global | Scope::Shared),
        ExprKind::Call(op, _) => !op.is_pure(),
        _ => false,
    })
}

impl Emitter {
    pub fn new(sm: u32) -> Emitter {
        Emitter {
            regs: Regs::default(),
            out: String::new(),
            labels: 0,
            env: HashMap::new(),
            unrolled: HashMap::new(),
            locals: HashMap::new(),
            mutable: HashSet::new(),
            cse: vec![HashMap::new()],
            globals: HashMap::new(),
            smem_base: None,
            smem_offsets: HashMap::new(),
            tmaps: HashMap::new(),
            tid: String::new(),
            sm,
            inline_math: false,
            loop_vars: HashSet::new(),
            nonneg: HashSet::new(),
            preheaders: vec![],
            hoist_invariants: false,
            dist: None,
            externs: Default::default(),
            pending: HashMap::new(),
            writes: 0,
        }
    }

    /// Emit every deferred write (see `pending`): before a branch, and at the end of a
    /// branch arm or a loop body, so each path into a join holds the values in the elements'
    /// own registers.
    pub(super) fn flush_writes(&mut self) {
        let mut w: Vec<_> = self.pending.drain().collect();
        w.sort_by_key(|(_, (at, ..))| *at);
        for (dst, (_, c, v)) in w {
            self.move_into(&dst, c, &v);
        }
    }

    /// `mov` of `v` into the element register `reg`: a deferred write come due, or one that
    /// cannot wait.
    fn move_into(&mut self, reg: &str, class: Class, v: &Val) {
        self.ins(&format!("mov.{} {reg}, {v}", mov_type(class)));
    }

    /// Emit the deferred writes of `regs`: an instruction is about to name them.
    pub(super) fn flush_registers(&mut self, regs: &[String]) {
        for r in regs {
            if let Some((_, c, v)) = self.pending.remove(r) {
                self.move_into(r, c, &v);
            }
        }
    }

    /// The value a register-held element holds now: a deferred write's, or its register.
    pub(super) fn element_value(&self, reg: &str, class: Class) -> Val {
        match self.pending.get(reg) {
            Some((_, _, v)) => v.clone(),
            None => Val::Reg(reg.to_string(), class),
        }
    }

    /// Write `v` to the register-held element `reg`: deferred where `v` is a constant or a
    /// register of `class` that no statement reassigns, else at once.
    pub(super) fn write_element(&mut self, reg: &str, class: Class, v: Val) {
        let deferrable = match &v {
            Val::Reg(r, c) => *c == class && !self.mutable.contains(r),
            Val::Int(_) | Val::F32(_) => class != Class::Pred,
        };
        if deferrable {
            self.writes += 1;
            self.pending
                .insert(reg.to_string(), (self.writes, class, v));
        } else {
            self.pending.remove(reg);
            self.move_into(reg, class, &v);
        }
    }

    /// Whether `e` is invariant in the innermost open serial loop (it reads no memory, not
    /// even a local array the loop may write — a warp-specialized pipeline's iteration count
    /// — and only variables bound before the loop); false outside loops and when not
    /// hoisting.
    pub fn invariant_in_loop(&self, e: &Expr) -> bool {
        let Some(ph) = self.preheaders.last().filter(|_| self.hoist_invariants) else {
            return false;
        };
        !reads_memory(e)
            && !e.any(&mut |x| match x.kind() {
                ExprKind::Load(..) => true,
                _ => x.as_var().is_some_and(|v| !ph.outside.contains(&v.id())),
            })
    }

    /// Run `f` with its instructions placed before the innermost open serial loop and its
    /// values numbered in the scope around the loop, so the body (and what follows the loop)
    /// reuses them: hoisting, for arithmetic ptxas leaves in the loop because it sits in a
    /// conditional block. `f` may only evaluate loop-invariant expressions.
    pub fn in_preheader<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let Some(ph) = self.preheaders.last() else {
            return f(self);
        };
        let (at, depth) = (ph.at, ph.depth);
        let tail = self.out.split_off(at);
        let inner = self.cse.split_off(depth);
        let r = f(self);
        if let Some(ph) = self.preheaders.last_mut() {
            ph.at = self.out.len();
        }
        self.out.push_str(&tail);
        self.cse.extend(inner);
        r
    }

    pub fn ins(&mut self, s: &str) {
        self.out.push_str("  ");
        self.out.push_str(s);
        self.out.push_str(";\n");
    }

    pub(super) fn place(&mut self, label: &str) {
        self.out.push_str(label);
        self.out.push_str(":\n");
    }

    pub(super) fn label(&mut self) -> String {
        self.labels += 1;
        format!("$L{}", self.labels)
    }

    pub fn fresh(&mut self, c: Class) -> String {
        self.regs.fresh(c)
    }

    /// A register that statements will reassign.
    pub fn fresh_mutable(&mut self, c: Class) -> String {
        let r = self.regs.fresh(c);
        self.mutable.insert(r.clone());
        r
    }

    fn push_scope(&mut self) {
        self.cse.push(HashMap::new());
    }

    fn pop_scope(&mut self) {
        self.cse.pop();
    }

    /// A pure instruction `op dst, args…`: reused when the same instruction on the same
    /// unchanging operands was already emitted in an enclosing scope.
    pub fn pure(&mut self, class: Class, op: &str, args: &[&Val]) -> Val {
        let text: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let text = text.join(", ");
        let stable = args
            .iter()
            .all(|a| !matches!(a, Val::Reg(r, _) if self.mutable.contains(r)));
        let key = format!("{op} {text}");
        if stable {
            for table in self.cse.iter().rev() {
                if let Some(v) = table.get(&key) {
                    return v.clone();
                }
            }
        }
        let d = self.fresh(class);
        self.ins(&format!("{op} {d}, {text}"));
        let v = Val::Reg(d, class);
        if stable {
            if let Some(t) = self.cse.last_mut() {
                t.insert(key, v.clone());
            }
        }
        v
    }

    /// `v` in a register of `class` (immediates are moved in).
    pub fn reg(&mut self, v: &Val, class: Class) -> String {
        match v {
            Val::Reg(r, _) => r.clone(),
            Val::Int(i) => match class {
                Class::Pred => {
                    let p = self.pure(Class::Pred, "setp.ne.s32", &[&Val::Int(*i), &Val::Int(0)]);
                    p.to_string()
                }
                Class::F32 => self
                    .pure(class, "mov.f32", &[&Val::F32(*i as f32)])
                    .to_string(),
                Class::B64 => self.pure(class, "mov.b64", &[v]).to_string(),
                Class::B16 => self.pure(class, "mov.b16", &[v]).to_string(),
                Class::B32 => self.pure(class, "mov.b32", &[v]).to_string(),
            },
            Val::F32(_) => self.pure(Class::F32, "mov.f32", &[v]).to_string(),
        }
    }

    /// A copy of `v` that later statements cannot change (for `let` bindings of array
    /// elements).
    fn stable(&mut self, v: Val, class: Class) -> Val {
        match &v {
            Val::Reg(r, c) if self.mutable.contains(r) => {
                let d = self.fresh(*c);
                self.ins(&format!("mov.{} {d}, {r}", mov_type(*c)));
                Val::Reg(d, class)
            }
            _ => v,
        }
    }

    // ---- expressions ----

    pub fn expr(&mut self, e: &Expr) -> R<Val> {
        let dt = e.dtype();
        match e.kind() {
            ExprKind::Int(v) if dt.is_float() => Ok(Val::F32(*v as f32)),
            ExprKind::Int(v) => Ok(Val::Int(*v)),
            ExprKind::Float(v) => {
                class_of(dt)?;
                Ok(Val::F32(*v as f32))
            }
            ExprKind::Bool(b) => Ok(Val::Int(i64::from(*b))),
            ExprKind::Var(v) => self
                .env
                .get(&v.id())
                .cloned()
                .ok_or_else(|| format!("the unbound variable `{}`", v.name())),
            ExprKind::Bin(op, a, b) => self.binary(*op, a, b),
            ExprKind::Cmp(op, a, b) => self.compare(*op, a, b),
            ExprKind::And(a, b) | ExprKind::Or(a, b) => {
                if reads_memory(b) {
                    return Err("`&&`/`||` whose right side reads memory".into());
                }
                let is_and = matches!(e.kind(), ExprKind::And(..));
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                match (x.as_int(), y.as_int()) {
                    (Some(p), Some(q)) => Ok(Val::Int(i64::from(if is_and {
                        p != 0 && q != 0
                    } else {
                        p != 0 || q != 0
                    }))),
                    (Some(p), None) | (None, Some(p)) => {
                        let other = if x.as_int().is_some() { y } else { x };
                        Ok(match (is_and, p != 0) {
                            (true, true) | (false, false) => other,
                            (true, false) => Val::Int(0),
                            (false, true) => Val::Int(1),
                        })
                    }
                    _ => {
                        let op = if is_and { "and.pred" } else { "or.pred" };
                        Ok(self.pure(Class::Pred, op, &[&x, &y]))
                    }
                }
            }
            ExprKind::Unary(op, a) => self.unary(*op, a, dt),
            ExprKind::Select(c, a, b) | ExprKind::IfThenElse(c, a, b) => {
                let cv = self.expr(c)?;
                if let Some(k) = cv.as_int() {
                    return self.expr(if k != 0 { a } else { b });
                }
                let class = class_of(dt)?;
                if class == Class::Pred {
                    return Err("a select of booleans".into());
                }
                if reads_memory(a) || reads_memory(b) {
                    return self.branchy_select(&cv, a, b, class);
                }
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                let ty = match class {
                    Class::F32 => "f32",
                    Class::B64 => "b64",
                    _ => "b32",
                };
                Ok(self.pure(class, &format!("selp.{ty}"), &[&x, &y, &cv]))
            }
            ExprKind::Cast(a) => self.cast(a, dt),
            ExprKind::Load(buf, idx) => self.load(buf, idx),
            ExprKind::Call(op, args) => self.value_call(op, args),
        }
    }

    /// `c ? a : b` where an arm reads memory (a bounds-checked load of a tail, say): only the
    /// chosen arm may run, so it is a branch with each arm in its own scope, into a register
    /// that is not a value-table key. ptxas predicates short arms.
    fn branchy_select(&mut self, cv: &Val, a: &Expr, b: &Expr, class: Class) -> R<Val> {
        let p = self.reg(cv, Class::Pred);
        let r = self.fresh_mutable(class);
        let (other, end) = (self.label(), self.label());
        self.flush_writes();
        self.ins(&format!("@!{p} bra {other}"));
        self.arm_into(&r, a, class)?;
        self.ins(&format!("bra.uni {end}"));
        self.place(&other);
        self.arm_into(&r, b, class)?;
        self.place(&end);
        Ok(Val::Reg(r, class))
    }

    /// `r = arm`, with what `arm` computes kept to its own scope.
    fn arm_into(&mut self, r: &str, arm: &Expr, class: Class) -> R<()> {
        self.push_scope();
        let v = self.expr(arm).map(|v| self.reg(&v, class));
        self.pop_scope();
        self.ins(&format!("mov.{} {r}, {}", mov_type(class), v?));
        Ok(())
    }

    fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr) -> R<Val> {
        let odt = a.dtype();
        let x = self.expr(a)?;
        let y = self.expr(b)?;
        if odt.is_bool() {
            let ins = match op {
                BinOp::BitAnd | BinOp::Min => "and.pred",
                BinOp::BitOr | BinOp::Max => "or.pred",
                BinOp::BitXor => "xor.pred",
                _ => return Err(format!("`{}` on booleans", op.symbol())),
            };
            if let (Some(p), Some(q)) = (x.as_int(), y.as_int()) {
                let r = match op {
                    BinOp::BitAnd | BinOp::Min => p & q,
                    BinOp::BitOr | BinOp::Max => p | q,
                    _ => p ^ q,
                };
                return Ok(Val::Int(r & 1));
            }
            let (xr, yr) = (self.reg(&x, Class::Pred), self.reg(&y, Class::Pred));
            return Ok(self.pure(
                Class::Pred,
                ins,
                &[&Val::Reg(xr, Class::Pred), &Val::Reg(yr, Class::Pred)],
            ));
        }
        if odt.is_float() {
            class_of(odt)?;
            let class = Class::F32;
            return match op {
                BinOp::Add => Ok(self.commutative(class, "add.f32", x, y)),
                BinOp::Sub => {
                    let xr = Val::Reg(self.reg(&x, class), class);
                    Ok(self.pure(class, "sub.f32", &[&xr, &y]))
                }
                BinOp::Mul => Ok(self.commutative(class, "mul.f32", x, y)),
                BinOp::Div => {
                    let yr = Val::Reg(self.reg(&y, class), class);
                    if self.inline_math {
                        let xr = Val::Reg(self.reg(&x, class), class);
                        Ok(self.pure(class, "div.full.f32", &[&xr, &yr]))
                    } else if x == Val::F32(1.0) {
                        // 1/y correctly rounded, as NVVM selects for `1.0f / y`.
                        Ok(self.pure(class, "rcp.rn.f32", &[&yr]))
                    } else {
                        let xr = Val::Reg(self.reg(&x, class), class);
                        Ok(self.pure(class, "div.rn.f32", &[&xr, &yr]))
                    }
                }
                // PTX min/max return the other operand for one NaN, as fminf/fmaxf do.
                BinOp::Min => Ok(self.commutative(class, "min.f32", x, y)),
                BinOp::Max => Ok(self.commutative(class, "max.f32", x, y)),
                other => Err(format!("`{}` on floats", other.symbol())),
            };
        }
        if !odt.is_int() || odt.bytes() < 4 {
            return Err(format!("arithmetic on {odt}"));
        }
        let class = class_of(odt)?;
        if let (Some(p), Some(q)) = (x.as_int(), y.as_int()) {
            if let Some(r) = fold_int(op, p, q, odt) {
                return Ok(Val::Int(r));
            }
        }
        // Identities that unrolled indices hit constantly.
        match (op, x.as_int(), y.as_int()) {
            (BinOp::Add | BinOp::BitOr | BinOp::BitXor, Some(0), _) => return Ok(y),
            (
                BinOp::Add | BinOp::Sub | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr,
                _,
                Some(0),
            ) => return Ok(x),
            (BinOp::Mul, Some(1), _) => return Ok(y),
            (BinOp::Mul | BinOp::Div, _, Some(1)) => return Ok(x),
            (BinOp::Mul | BinOp::BitAnd, Some(0), _) | (BinOp::Mul | BinOp::BitAnd, _, Some(0)) => {
                return Ok(Val::Int(0))
            }
            _ => {}
        }
        let t = int_type(odt);
        let bt = bits_type(odt);
        let (xs, ys) = (x.clone(), y.clone());
        let lhs = |s: &mut Emitter, v: &Val| Val::Reg(s.reg(v, class), class);
        let r = match op {
            BinOp::Add => self.commutative(class, &format!("add.{t}"), x, y),
            BinOp::Sub => {
                let xr = lhs(self, &x);
                self.pure(class, &format!("sub.{t}"), &[&xr, &y])
            }
            BinOp::Mul => self.commutative(class, &format!("mul.lo.{t}"), x, y),
            BinOp::Div | BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod
                if odt == DType::I32 && self.non_negative(&x) =>
            {
                // A non-negative dividend, where truncating and flooring agree: a positive
                // constant divisor becomes a multiply-high (ptxas computes the reciprocal of
                // `div.u32 x, 3` at run time, in the loop, on the path to the tensor cores).
                let quotient = matches!(op, BinOp::Div | BinOp::FloorDiv);
                match y.as_int() {
                    Some(d) if d > 0 && d <= i64::from(i32::MAX) => {
                        let xr = lhs(self, &x);
                        self.divide_by_constant(&xr, d as u32, quotient)
                    }
                    _ => {
                        let xr = lhs(self, &x);
                        let name = if quotient { "div" } else { "rem" };
                        let t = if self.non_negative(&y) && !matches!(y, Val::Int(0)) {
                            "u32"
                        } else {
                            t
                        };
                        self.pure(class, &format!("{name}.{t}"), &[&xr, &y])
                    }
                }
            }
            BinOp::Div | BinOp::Mod => {
                let xr = lhs(self, &x);
                let name = if op == BinOp::Div { "div" } else { "rem" };
                // A non-negative dividend and a positive divisor: the unsigned form (the
                // signed one is a longer sequence).
                let t = if odt == DType::I32
                    && self.non_negative(&xr)
                    && self.non_negative(&y)
                    && !matches!(y, Val::Int(0))
                {
                    "u32"
                } else {
                    t
                };
                self.pure(class, &format!("{name}.{t}"), &[&xr, &y])
            }
            BinOp::FloorDiv | BinOp::FloorMod => {
                let xr = lhs(self, &x);
                if odt.is_unsigned_int() {
                    let name = if op == BinOp::FloorDiv { "div" } else { "rem" };
                    self.pure(class, &format!("{name}.{t}"), &[&xr, &y])
                } else {
                    // Only a positive constant divisor: then the C quotient is one too high
                    // exactly when the remainder is negative.
                    let Some(d) = y.as_int().filter(|&d| d > 0) else {
                        return Err("floor division by a value of unknown sign".into());
                    };
                    let rem = self.pure(class, &format!("rem.{t}"), &[&xr, &y]);
                    let sign = self.pure(
                        class,
                        &format!("shr.{t}"),
                        &[&rem, &Val::Int(odt.bits() as i64 - 1)],
                    );
                    if op == BinOp::FloorDiv {
                        let q = self.pure(class, &format!("div.{t}"), &[&xr, &y]);
                        self.pure(class, &format!("add.{t}"), &[&q, &sign])
                    } else {
                        let adj = self.pure(class, &format!("and.{bt}"), &[&sign, &Val::Int(d)]);
                        self.pure(class, &format!("add.{t}"), &[&rem, &adj])
                    }
                }
            }
            BinOp::Min => self.commutative(class, &format!("min.{t}"), x, y),
            BinOp::Max => self.commutative(class, &format!("max.{t}"), x, y),
            BinOp::BitAnd => self.commutative(class, &format!("and.{bt}"), x, y),
            BinOp::BitOr => self.commutative(class, &format!("or.{bt}"), x, y),
            BinOp::BitXor => self.commutative(class, &format!("xor.{bt}"), x, y),
            BinOp::Shl | BinOp::Shr => {
                let xr = lhs(self, &x);
                // The shift amount is always a 32-bit operand.
                let amount = match &y {
                    Val::Reg(r, Class::B64) => {
                        let rv = Val::Reg(r.clone(), Class::B64);
                        self.pure(Class::B32, "cvt.u32.u64", &[&rv])
                    }
                    other => other.clone(),
                };
                let name = if op == BinOp::Shl {
                    format!("shl.{bt}")
                } else {
                    format!("shr.{t}")
                };
                self.pure(class, &name, &[&xr, &amount])
            }
            BinOp::Pow => return Err("integer `pow`".into()),
        };
        // Results that stay non-negative when the operands are (signed arithmetic does not
        // overflow: the same assumption NVVM makes of the CUDA printer's C).
        let (x, y) = (xs, ys);
        let keeps = match op {
            BinOp::Add | BinOp::Mul | BinOp::Div | BinOp::Mod | BinOp::Shr | BinOp::Min => {
                self.non_negative(&x) && self.non_negative(&y)
            }
            BinOp::BitAnd | BinOp::Max => self.non_negative(&x) || self.non_negative(&y),
            BinOp::Shl => self.non_negative(&x) && y.as_int().is_some_and(|k| (0..31).contains(&k)),
            _ => false,
        };
        if keeps {
            if let Val::Reg(name, _) = &r {
                self.nonneg.insert(name.clone());
            }
        }
        Ok(r)
    }

    /// Whether `v` is known to be non-negative: a constant, a thread or block index, a loop
    /// counter from a non-negative start, or arithmetic on such values.
    pub fn non_negative(&self, v: &Val) -> bool {
        match v {
            Val::Int(k) => *k >= 0,
            Val::Reg(r, _) => self.nonneg.contains(r),
            Val::F32(_) => false,
        }
    }

    /// A commutative instruction: an immediate goes second.
    fn commutative(&mut self, class: Class, op: &str, x: Val, y: Val) -> Val {
        let (x, y) = match (&x, &y) {
            (Val::Reg(..), _) => (x, y),
            (_, Val::Reg(..)) => (y, x),
            _ => (Val::Reg(self.reg(&x, class), class), y),
        };
        self.pure(class, op, &[&x, &y])
    }

    fn compare(&mut self, op: CmpOp, a: &Expr, b: &Expr) -> R<Val> {
        let odt = a.dtype();
        let x = self.expr(a)?;
        let y = self.expr(b)?;
        if odt.is_bool() {
            return Err("comparing booleans".into());
        }
        if let (Some(p), Some(q)) = (x.as_int(), y.as_int()) {
            if odt.is_int() {
                let (p, q) = if odt.is_unsigned_int() {
                    (p as u64 as i128, q as u64 as i128)
                } else {
                    (p as i128, q as i128)
                };
                return Ok(Val::Int(i64::from(op.eval(p, q))));
            }
        }
        let class = class_of(odt)?;
        // An immediate first operand goes second, with the comparison mirrored.
        let (op, x, y) = match (&x, &y) {
            (Val::Reg(..), _) => (op, x, y),
            (_, Val::Reg(..)) => {
                let m = match op {
                    CmpOp::Lt => CmpOp::Gt,
                    CmpOp::Le => CmpOp::Ge,
                    CmpOp::Gt => CmpOp::Lt,
                    CmpOp::Ge => CmpOp::Le,
                    o => o,
                };
                (m, y, x)
            }
            _ => {
                let xr = Val::Reg(self.reg(&x, class), class);
                (op, xr, y)
            }
        };
        let (name, ty) = if odt.is_float() {
            // C's comparisons are ordered, except `!=` (true for NaN).
            let n = match op {
                CmpOp::Eq => "eq",
                CmpOp::Ne => "neu",
                CmpOp::Lt => "lt",
                CmpOp::Le => "le",
                CmpOp::Gt => "gt",
                CmpOp::Ge => "ge",
            };
            (n, "f32")
        } else {
            let n = match op {
                CmpOp::Eq => "eq",
                CmpOp::Ne => "ne",
                CmpOp::Lt => "lt",
                CmpOp::Le => "le",
                CmpOp::Gt => "gt",
                CmpOp::Ge => "ge",
            };
            (n, int_type(odt))
        };
        Ok(self.pure(Class::Pred, &format!("setp.{name}.{ty}"), &[&x, &y]))
    }

    fn unary(&mut self, op: UnOp, a: &Expr, dt: DType) -> R<Val> {
        let x = self.expr(a)?;
        if dt.is_bool() {
            return match (op, x.as_int()) {
                (UnOp::Not, Some(p)) => Ok(Val::Int(i64::from(p == 0))),
                (UnOp::Not, None) => Ok(self.pure(Class::Pred, "not.pred", &[&x])),
                _ => Err(format!("`{}` on a boolean", op.name())),
            };
        }
        if dt.is_int() {
            let class = class_of(dt)?;
            let t = int_type(dt);
            if let Some(v) = x.as_int() {
                match op {
                    UnOp::Neg => return Ok(Val::Int(wrap(v.wrapping_neg(), dt))),
                    UnOp::Abs if dt.is_signed_int() => return Ok(Val::Int(wrap(v.abs(), dt))),
                    _ => {}
                }
            }
            let xr = Val::Reg(self.reg(&x, class), class);
            return match op {
                UnOp::Neg => Ok(self.pure(class, &format!("neg.{t}"), &[&xr])),
                UnOp::Abs if dt.is_unsigned_int() => Ok(xr),
                UnOp::Abs => Ok(self.pure(class, &format!("abs.{t}"), &[&xr])),
                UnOp::Not => Err("`!` on an integer".into()),
                other => Err(format!("`{}` on an integer", other.name())),
            };
        }
        class_of(dt)?;
        let c = Class::F32;
        let xr = Val::Reg(self.reg(&x, c), c);
        Ok(match op {
            UnOp::Neg => self.pure(c, "neg.f32", &[&xr]),
            UnOp::Abs => self.pure(c, "abs.f32", &[&xr]),
            // The headers' fast exponentials: one MUFU.EX2 (inputs below 2^-126 flush to 0).
            UnOp::Exp2 => self.pure(c, "ex2.approx.ftz.f32", &[&xr]),
            UnOp::Exp => {
                let s = self.pure(c, "mul.f32", &[&xr, &Val::F32(std::f32::consts::LOG2_E)]);
                self.pure(c, "ex2.approx.ftz.f32", &[&s])
            }
            // lg2.approx: absolute error below 2^-22 (logf is within 1 ulp): the CUDA printer
            // stays the accurate path for kernels that need more.
            UnOp::Log2 => self.pure(c, "lg2.approx.f32", &[&xr]),
            UnOp::Log => {
                let l = self.pure(c, "lg2.approx.f32", &[&xr]);
                self.pure(c, "mul.f32", &[&l, &Val::F32(std::f32::consts::LN_2)])
            }
            UnOp::Sqrt if self.inline_math => self.pure(c, "sqrt.approx.f32", &[&xr]),
            UnOp::Sqrt => self.pure(c, "sqrt.rn.f32", &[&xr]),
            UnOp::Rsqrt => self.pure(c, "rsqrt.approx.f32", &[&xr]),
            UnOp::Floor => self.pure(c, "cvt.rmi.f32.f32", &[&xr]),
            UnOp::Ceil => self.pure(c, "cvt.rpi.f32.f32", &[&xr]),
            UnOp::Sigmoid => {
                let n = self.pure(c, "mul.f32", &[&xr, &Val::F32(-std::f32::consts::LOG2_E)]);
                let e = self.pure(c, "ex2.approx.ftz.f32", &[&n]);
                let d = self.pure(c, "add.f32", &[&e, &Val::F32(1.0)]);
                if self.inline_math {
                    let one = Val::Reg(self.reg(&Val::F32(1.0), c), c);
                    self.pure(c, "div.full.f32", &[&one, &d])
                } else {
                    self.pure(c, "rcp.rn.f32", &[&d])
                }
            }
            other => return Err(format!("the function `{}`", other.name())),
        })
    }

    fn cast(&mut self, a: &Expr, dt: DType) -> R<Val> {
        let from = a.dtype();
        let x = self.expr(a)?;
        if dt.is_bool() {
            if from.is_bool() {
                return Ok(x);
            }
            if let Some(v) = x.as_int() {
                return Ok(Val::Int(i64::from(v != 0)));
            }
            let class = class_of(from)?;
            let ty = if from.is_float() {
                "neu.f32"
            } else {
                match class {
                    Class::B64 => "ne.s64",
                    _ => "ne.s32",
                }
            };
            let zero = if from.is_float() {
                Val::F32(0.0)
            } else {
                Val::Int(0)
            };
            return Ok(self.pure(Class::Pred, &format!("setp.{ty}"), &[&x, &zero]));
        }
        let to_class = class_of(dt)?;
        if from.is_bool() {
            let (one, zero, ty) = if dt.is_float() {
                (Val::F32(1.0), Val::F32(0.0), "f32")
            } else {
                (Val::Int(1), Val::Int(0), bits_type(dt))
            };
            if let Some(v) = x.as_int() {
                return Ok(if v != 0 { one } else { zero });
            }
            return Ok(self.pure(to_class, &format!("selp.{ty}"), &[&one, &zero, &x]));
        }
        class_of(from)?;
        if from.is_int() && dt.is_int() {
            if let Some(v) = x.as_int() {
                let v = match from {
                    DType::U32 => v as u32 as i64,
                    DType::I32 => v as i32 as i64,
                    _ => v,
                };
                return Ok(Val::Int(wrap(v, dt)));
            }
            let xr = Val::Reg(self.reg(&x, class_of(from)?), class_of(from)?);
            return Ok(match (from.bytes() > 4, dt.bytes() > 4) {
                (false, true) => {
                    let ty = if from.is_signed_int() {
                        "cvt.s64.s32"
                    } else {
                        "cvt.u64.u32"
                    };
                    self.pure(Class::B64, ty, &[&xr])
                }
                (true, false) => self.pure(Class::B32, "cvt.u32.u64", &[&xr]),
                _ => xr,
            });
        }
        if from.is_int() && dt.is_float() {
            let xr = Val::Reg(self.reg(&x, class_of(from)?), class_of(from)?);
            let f = self.pure(
                Class::F32,
                &format!("cvt.rn.f32.{}", int_type(from)),
                &[&xr],
            );
            return self.round_narrow(f, dt);
        }
        if from.is_float() && dt.is_int() {
            let xr = Val::Reg(self.reg(&x, Class::F32), Class::F32);
            return Ok(self.pure(to_class, &format!("cvt.rzi.{}.f32", int_type(dt)), &[&xr]));
        }
        // float → float: narrow types are computed in f32; an explicit cast rounds.
        self.round_narrow(x, dt)
    }

    /// Round an f32 value to `dt`'s precision (identity for f32).
    fn round_narrow(&mut self, v: Val, dt: DType) -> R<Val> {
        match dt {
            DType::F32 => Ok(v),
            DType::BF16 | DType::F16 => {
                let h = self.half_of(&v, dt);
                Ok(self.half_to_f32(&h, dt))
            }
            other => Err(format!("a cast to {other}")),
        }
    }

    /// An f32 value converted to a 16-bit register of `dt` (round to nearest even).
    pub fn half_of(&mut self, v: &Val, dt: DType) -> Val {
        let r = Val::Reg(self.reg(v, Class::F32), Class::F32);
        let t = if dt == DType::F16 { "f16" } else { "bf16" };
        self.pure(Class::B16, &format!("cvt.rn.{t}.f32"), &[&r])
    }

    /// A 16-bit register of `dt` widened to f32 (exact).
    pub fn half_to_f32(&mut self, h: &Val, dt: DType) -> Val {
        if dt == DType::F16 {
            return self.pure(Class::F32, "cvt.f32.f16", &[h]);
        }
        let w = self.pure(Class::B32, "cvt.u32.u16", &[h]);
        self.pure(Class::F32, "shl.b32", &[&w, &Val::Int(16)])
    }

    /// `x / d` (or `x % d`) for `0 <= x < 2^31` and a constant `d > 0`: a shift or a mask for
    /// a power of two, else `mul.hi.u32` by `m = ceil(2^(31+l) / d)` with `l = ceil(log2 d)`,
    /// shifted right by `l - 1`. `m` fits in 32 bits, and for `x < 2^31` the error of `m`
    /// stays below one step of the quotient (Granlund and Montgomery, 1994).
    pub fn divide_by_constant(&mut self, x: &Val, d: u32, quotient: bool) -> Val {
        let c = Class::B32;
        if d.is_power_of_two() {
            let k = d.trailing_zeros() as i64;
            return if quotient {
                self.pure(c, "shr.u32", &[x, &Val::Int(k)])
            } else {
                self.pure(c, "and.b32", &[x, &Val::Int(i64::from(d) - 1)])
            };
        }
        let (m, shift) = magic_u31(d);
        let hi = self.pure(c, "mul.hi.u32", &[x, &Val::Int(i64::from(m))]);
        let q = if shift > 0 {
            self.pure(c, "shr.u32", &[&hi, &Val::Int(i64::from(shift))])
        } else {
            hi
        };
        if quotient {
            return q;
        }
        let qd = self.pure(c, "mul.lo.u32", &[&q, &Val::Int(i64::from(d))]);
        self.pure(c, "sub.u32", &[x, &qd])
    }

    // ---- statements ----

    pub fn stmt(&mut self, s: &Stmt) -> R<()> {
        match &s.kind {
            StmtKind::Seq(v) => {
                let mut i = 0;
                while i < v.len() {
                    if let Some(next) = v.get(i + 1) {
                        if self.try_pair(&v[i], next)? {
                            i += 2;
                            continue;
                        }
                    }
                    self.stmt(&v[i])?;
                    i += 1;
                }
                Ok(())
            }
            StmtKind::Let { var, value } => {
                let class = class_of(var.dtype())?;
                let v = self.expr(value)?;
                let v = self.stable(v, class);
                self.env.insert(var.id(), v);
                Ok(())
            }
            StmtKind::Alloc(b) => self.alloc(b),
            StmtKind::If { cond, then_, else_ } => {
                let c = self.expr(cond)?;
                if let Some(k) = c.as_int() {
                    return match (k != 0, else_) {
                        (true, _) => self.scoped(then_),
                        (false, Some(e)) => self.scoped(e),
                        (false, None) => Ok(()),
                    };
                }
                let p = self.reg(&c, Class::Pred);
                let end = self.label();
                self.flush_writes();
                match else_ {
                    None => {
                        self.ins(&format!("@!{p} bra {end}"));
                        self.scoped(then_)?;
                        self.flush_writes();
                    }
                    Some(e) => {
                        let other = self.label();
                        self.ins(&format!("@!{p} bra {other}"));
                        self.scoped(then_)?;
                        self.flush_writes();
                        self.ins(&format!("bra.uni {end}"));
                        self.place(&other);
                        self.scoped(e)?;
                        self.flush_writes();
                    }
                }
                self.place(&end);
                Ok(())
            }
            StmtKind::Store {
                buffer,
                indices,
                value,
            } => self.store(buffer, indices, value),
            StmtKind::For(l) => self.for_loop(l),
            StmtKind::Eval(e) => match e.kind() {
                ExprKind::Call(op, args) => self.effect_call(op, args),
                _ => {
                    self.expr(e)?;
                    Ok(())
                }
            },
            StmtKind::Op(op) => Err(format!("the unlowered tile op `{}`", op.name())),
            StmtKind::AnnotateLayout { .. } => Ok(()),
        }
    }

    fn scoped(&mut self, s: &Stmt) -> R<()> {
        self.push_scope();
        let r = self.stmt(s);
        self.pop_scope();
        r
    }

    /// Two adjacent stores of converted f32 values into elements `2k`, `2k + 1` of a 16-bit
    /// per-thread array.
    fn try_pair(&mut self, a: &Stmt, b: &Stmt) -> R<bool> {
        let (Some((ba, ia, va)), Some((bb, ib, vb))) =
            (crate::pack::narrow_store(a), crate::pack::narrow_store(b))
        else {
            return Ok(false);
        };
        if ba != bb {
            return Ok(false);
        }
        let (x, y) = (self.expr(ia)?, self.expr(ib)?);
        match (x.as_int(), y.as_int()) {
            (Some(lo), Some(hi)) if lo % 2 == 0 && hi == lo + 1 && lo >= 0 => {
                let i = self.local_index(ba, std::slice::from_ref(ia))?;
                self.store_pair(ba, i, va, vb)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn for_loop(&mut self, l: &tl_ir::For) -> R<()> {
        match l.kind {
            ForKind::Parallel | ForKind::Pipelined { .. } => {
                Err(format!("an unlowered {} loop", l.kind.name()))
            }
            ForKind::Unrolled | ForKind::Vectorized => {
                let (lo, ext) = (self.expr(&l.min)?, self.expr(&l.extent)?);
                if let (Some(lo), Some(ext)) = (lo.as_int(), ext.as_int()) {
                    if ext > 4096 {
                        return Err(format!("an unrolled loop of {ext} iterations"));
                    }
                    // Stores of converted pairs run two elements per step.
                    if let Some((buf, value)) = crate::pack::pair_loop(l) {
                        if lo == 0 && self.locals.get(&buf.id()).is_some_and(|x| x.packed) {
                            let mut i = 0;
                            while i < ext {
                                let v0 = self.with_const(&l.var, i, value);
                                let v1 = self.with_const(&l.var, i + 1, value);
                                self.store_pair(buf, i as usize, &v0, &v1)?;
                                i += 2;
                            }
                            return Ok(());
                        }
                    }
                    for i in lo..lo + ext {
                        self.env.insert(l.var.id(), Val::Int(i));
                        self.unrolled
                            .insert(l.var.id(), Expr::int_of(i, l.var.dtype()));
                        let r = self.stmt(&l.body);
                        self.unrolled.remove(&l.var.id());
                        r?;
                    }
                    self.env.remove(&l.var.id());
                    return Ok(());
                }
                self.serial(l)
            }
            ForKind::Serial => self.serial(l),
        }
    }

    /// `value` with the loop variable fixed to `i`.
    fn with_const(&self, var: &tl_ir::Var, i: i64, value: &Expr) -> Expr {
        let m: HashMap<u64, Expr> = [(var.id(), Expr::int_of(i, var.dtype()))]
            .into_iter()
            .collect();
        value.substitute(&m)
    }

    /// A loop with a run-time trip count: the bound is evaluated once (it is loop-invariant),
    /// the test is at the bottom, and the counter is the only register the back edge changes.
    fn serial(&mut self, l: &tl_ir::For) -> R<()> {
        let dt = l.var.dtype();
        if !matches!(dt, DType::I32 | DType::U32) {
            return Err(format!("a loop counter of {dt}"));
        }
        let t = int_type(dt);
        let lo = self.expr(&l.min)?;
        let ext = self.expr(&l.extent)?;
        let end = match (lo.as_int(), ext.as_int()) {
            (Some(a), Some(b)) => Val::Int(wrap(a + b, dt)),
            _ => {
                let e = Expr::binary(BinOp::Add, l.min.clone(), l.extent.clone());
                self.expr(&e)?
            }
        };
        self.flush_writes();
        let counter = self.fresh(Class::B32);
        self.ins(&format!("mov.b32 {counter}, {lo}"));
        if self.non_negative(&lo) {
            // It only counts up from there.
            self.nonneg.insert(counter.clone());
        }
        let top = self.label();
        let exit = self.label();
        let known_nonempty = matches!((lo.as_int(), end.as_int()), (Some(a), Some(b)) if a < b);
        if !known_nonempty {
            let p = self.pure(
                Class::Pred,
                &format!("setp.ge.{t}"),
                &[&Val::Reg(counter.clone(), Class::B32), &end],
            );
            self.ins(&format!("@{p} bra {exit}"));
        }
        self.preheaders.push(Preheader {
            at: self.out.len(),
            depth: self.cse.len(),
            outside: self.env.keys().copied().collect(),
        });
        self.place(&top);
        self.env
            .insert(l.var.id(), Val::Reg(counter.clone(), Class::B32));
        self.loop_vars.insert(l.var.id());
        self.push_scope();
        let r = self.stmt(&l.body);
        self.pop_scope();
        self.loop_vars.remove(&l.var.id());
        self.preheaders.pop();
        r?;
        self.flush_writes();
        self.ins(&format!("add.{t} {counter}, {counter}, 1"));
        let p = self.fresh(Class::Pred);
        self.ins(&format!("setp.lt.{t} {p}, {counter}, {end}"));
        self.ins(&format!("@{p} bra {top}"));
        self.place(&exit);
        self.env.remove(&l.var.id());
        Ok(())
    }
}

fn mov_type(c: Class) -> &'static str {
    match c {
        Class::Pred => "pred",
        Class::F32 => "f32",
        Class::B64 => "b64",
        Class::B16 => "b16",
        _ => "b32",
    }
}

/// The multiplier and post-shift of [`Emitter::divide_by_constant`] for a divisor `d >= 2` that
/// is not a power of two: `x / d == mul_hi(x, m) >> shift` for every `0 <= x < 2^31`.
pub(crate) fn magic_u31(d: u32) -> (u32, u32) {
    let l = 32 - (d - 1).leading_zeros(); // ceil(log2 d)
    let m = (1u64 << (31 + l)).div_ceil(u64::from(d));
    (m as u32, l - 1)
}

#[cfg(test)]
mod tests {
    use super::magic_u31;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// A local array (a warp-specialized pipeline's iteration count, which each round of a
    /// persistent kernel advances) is never taken for loop-invariant, whatever the variables.
    #[test]
    fn loads_of_local_arrays_are_not_hoisted() {
        use tl_ir::{Buffer, DType, Expr, Scope, Span, Var};
        let mut em = super::Emitter::new(90);
        em.hoist_invariants = true;
        let n = Var::new("n", DType::I32);
        em.preheaders.push(super::Preheader {
            at: 0,
            depth: 1,
            outside: [n.id()].into_iter().collect(),
        });
        let count = Buffer::new(
            "count",
            vec![Expr::int(1)],
            DType::I32,
            Scope::Local,
            Span::UNKNOWN,
        );
        assert!(em.invariant_in_loop(&(n.expr() * 4)));
        assert!(!em.invariant_in_loop(&(Expr::load(&count, vec![Expr::int(0)]) + n.expr())));
    }

    /// `buf[i] = value`, a statement of the `deferred_writes_*` tests.
    fn store_element(buf: &tl_ir::Buffer, i: i64, value: tl_ir::Expr) -> tl_ir::Stmt {
        let kind = tl_ir::StmtKind::Store {
            buffer: buf.clone(),
            indices: vec![tl_ir::Expr::int(i)],
            value,
        };
        tl_ir::Stmt::new(kind, tl_ir::Span::UNKNOWN)
    }

    /// Runs the few PTX instructions `deferred_writes_*` emit (moves, f32 add and multiply,
    /// the loop counter's compares, branches) over `regs`: a check of what the code computes,
    /// not of its text.
    fn run_ptx(code: &str, regs: &mut HashMap<String, f64>) {
        let lines: Vec<&str> = code.lines().map(str::trim).collect();
        let at = |label: &str| {
            lines
                .iter()
                .position(|l| l.strip_suffix(':') == Some(label))
                .unwrap_or_else(|| panic!("no label {label} in\n{code}"))
        };
        let (mut pc, mut steps) = (0, 0);
        while pc < lines.len() {
            steps += 1;
            assert!(steps < 10_000, "runaway:\n{code}");
            let line = lines[pc].trim_end_matches(';');
            pc += 1;
            if line.is_empty() || line.ends_with(':') {
                continue;
            }
            let (guard, ins) = match line.strip_prefix('@') {
                Some(rest) => {
                    let (g, i) = rest.split_once(' ').expect("guarded instruction");
                    (Some(g), i)
                }
                None => (None, line),
            };
            if let Some(g) = guard {
                let (neg, p) = g.strip_prefix('!').map_or((false, g), |p| (true, p));
                if (regs[p] != 0.0) == neg {
                    continue;
                }
            }
            let (op, rest) = ins.split_once(' ').expect("operands");
            let args: Vec<&str> = rest.split(", ").map(str::trim).collect();
            let val = |a: &str, regs: &HashMap<String, f64>| -> f64 {
                if let Some(hex) = a.strip_prefix("0f") {
                    f32::from_bits(u32::from_str_radix(hex, 16).expect("hex")) as f64
                } else if a.starts_with('%') {
                    *regs
                        .get(a)
                        .unwrap_or_else(|| panic!("{a} read unset in\n{code}"))
                } else {
                    a.parse().expect("an integer")
                }
            };
            let v = |i: usize| val(args[i], regs);
            let r = match op.split('.').next().unwrap_or("") {
                "bra" => {
                    pc = at(args[0]);
                    continue;
                }
                "mov" => v(1),
                "add" => v(1) + v(2),
                "mul" => v(1) * v(2),
                "setp" if op.starts_with("setp.lt") => f64::from(v(1) < v(2)),
                "setp" if op.starts_with("setp.ge") => f64::from(v(1) >= v(2)),
                other => panic!("{other} not run by this test:\n{code}"),
            };
            regs.insert(args[0].to_string(), r);
        }
    }

    /// Writes to register-held elements are deferred (the next read takes the value itself)
    /// and emitted where control flow needs them: a value written before a branch, in one arm
    /// of it, or in a loop's body reaches what follows, on every path.
    #[test]
    fn deferred_writes_reach_every_path() {
        use tl_ir::{Buffer, DType, Expr, For, ForKind, Scope, Span, Stmt, StmtKind, Var};
        let sp = Span::UNKNOWN;
        let a = Buffer::new("a", vec![Expr::int(2)], DType::F32, Scope::Local, sp);
        let (x, p, n) = (
            Var::new("x", DType::F32),
            Var::new("p", DType::Bool),
            Var::new("n", DType::I32),
        );
        let at = |i: i64| Expr::load(&a, vec![Expr::int(i)]);
        let store = |i: i64, value: Expr| store_element(&a, i, value);
        // a[0] = x + 1; a[1] = a[0] * 3; if p { a[0] = a[0] * 2; a[1] = a[1] + 1 }
        // for i in 0..n { a[0] = a[0] + x }   (then a[0], a[1] read from their registers)
        let body = Stmt::seq(
            vec![
                Stmt::new(StmtKind::Alloc(a.clone()), sp),
                store(0, x.expr() + Expr::float(1.0)),
                store(1, at(0) * Expr::float(3.0)),
                Stmt::new(
                    StmtKind::If {
                        cond: p.expr(),
                        then_: Box::new(Stmt::seq(
                            vec![
                                store(0, at(0) * Expr::float(2.0)),
                                store(1, at(1) + Expr::float(1.0)),
                            ],
                            sp,
                        )),
                        else_: None,
                    },
                    sp,
                ),
                Stmt::new(
                    StmtKind::For(Box::new(For {
                        var: Var::new("i", DType::I32),
                        min: Expr::int(0),
                        extent: n.expr(),
                        kind: ForKind::Serial,
                        body: store(0, at(0) + x.expr()),
                    })),
                    sp,
                ),
            ],
            sp,
        );
        for (taken, trips) in [(false, 0), (true, 0), (false, 3), (true, 2)] {
            let mut em = super::Emitter::new(90);
            em.env
                .insert(x.id(), super::Val::Reg("%fx".into(), super::Class::F32));
            em.env
                .insert(p.id(), super::Val::Reg("%pp".into(), super::Class::Pred));
            em.env
                .insert(n.id(), super::Val::Reg("%rn".into(), super::Class::B32));
            em.stmt(&body).expect("emits");
            em.flush_writes();
            let regs_of_a = em.locals[&a.id()].regs.clone();
            let mut regs: HashMap<String, f64> = [
                ("%fx".to_string(), 0.5),
                ("%pp".to_string(), f64::from(taken)),
                ("%rn".to_string(), trips as f64),
            ]
            .into_iter()
            .collect();
            run_ptx(&em.out, &mut regs);
            let (mut a0, mut a1) = (0.5 + 1.0, 1.5 * 3.0);
            if taken {
                (a0, a1) = (a0 * 2.0, a1 + 1.0);
            }
            a0 += 0.5 * trips as f64;
            let got = (regs[&regs_of_a[0]], regs[&regs_of_a[1]]);
            assert_eq!(got, (a0, a1), "p = {taken}, n = {trips}:\n{}", em.out);
        }
    }

    /// In straight-line code a rewritten element is a new value each time, not a move into
    /// the element's register: the register is written once, where the code leaves the
    /// straight line.
    #[test]
    fn straight_line_writes_are_values() {
        use tl_ir::{Buffer, DType, Expr, Scope, Span, Stmt, StmtKind, Var};
        let sp = Span::UNKNOWN;
        let a = Buffer::new("a", vec![Expr::int(1)], DType::F32, Scope::Local, sp);
        let x = Var::new("x", DType::F32);
        let at = Expr::load(&a, vec![Expr::int(0)]);
        let store = |value: Expr| store_element(&a, 0, value);
        let body = Stmt::seq(
            vec![
                Stmt::new(StmtKind::Alloc(a.clone()), sp),
                store(x.expr()),
                store(at.clone() * x.expr()),
                store(at.clone() + Expr::float(1.0)),
                store(at * Expr::float(4.0)),
            ],
            sp,
        );
        let mut em = super::Emitter::new(90);
        em.env
            .insert(x.id(), super::Val::Reg("%fx".into(), super::Class::F32));
        em.stmt(&body).expect("emits");
        let reg = em.locals[&a.id()].regs[0].clone();
        assert!(!em.out.contains(&reg), "{reg} written in line:\n{}", em.out);
        em.flush_writes();
        assert_eq!(
            em.out.matches(&format!("mov.f32 {reg}")).count(),
            1,
            "{}",
            em.out
        );
        let mut regs: HashMap<String, f64> = [("%fx".to_string(), 3.0)].into_iter().collect();
        run_ptx(&em.out, &mut regs);
        assert_eq!(regs[&reg], (3.0 * 3.0 + 1.0) * 4.0);
    }

    fn quotient(x: u32, d: u32) -> u32 {
        let (m, shift) = magic_u31(d);
        (((u64::from(x) * u64::from(m)) >> 32) as u32) >> shift
    }

    #[test]
    fn magic_division_is_exact_at_the_edges() {
        for d in (3..2000u32).filter(|d| !d.is_power_of_two()) {
            for x in [
                0,
                1,
                d - 1,
                d,
                d + 1,
                (1 << 31) - 1,
                (1 << 31) - 2,
                (1 << 31) - d,
            ] {
                assert_eq!(quotient(x, d), x / d, "{x} / {d}");
            }
        }
        let big = i32::MAX as u32;
        assert_eq!(quotient(big, big), 1);
        assert_eq!(quotient(big - 1, big), 0);
    }

    proptest! {
        #[test]
        fn magic_division_matches_division(x in 0u32..(1 << 31), d in 3u32..(1 << 31)) {
            prop_assume!(!d.is_power_of_two());
            prop_assert_eq!(quotient(x, d), x / d);
        }
    }
}
