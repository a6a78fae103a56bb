//! Printing thread-level IR as C-family source (C for the CPU; CUDA and HIP C++ reuse it).
//!
//! Narrow floats (f16, bf16, float8) are stored as integers and computed as `float`: loads
//! widen, stores and explicit casts round. Index arithmetic on global tensors is widened to
//! 64 bits so tensors past 2^31 elements address correctly.

use std::collections::HashMap;
use std::fmt::Write;

use tl_ir::{
    BinOp, Buffer, CmpOp, DType, Diagnostic, Expr, ExprKind, ForKind, Intrinsic, Scope, Stmt,
    StmtKind, UnOp,
};

use crate::names::Names;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dialect {
    C,
    Cuda,
    Hip,
}

/// How a value of a dtype is held in memory.
pub fn storage_type(dt: DType) -> &'static str {
    match dt {
        DType::Bool | DType::U8 | DType::F8E4M3 | DType::F8E5M2 => "uint8_t",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U16 | DType::F16 | DType::BF16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// How a value of a dtype is held in an expression.
pub fn compute_type(dt: DType) -> &'static str {
    match dt {
        DType::Bool => "int",
        DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2 | DType::F32 => "float",
        d => storage_type(d),
    }
}

fn narrow_name(dt: DType) -> Option<&'static str> {
    match dt {
        DType::F16 => Some("f16"),
        DType::BF16 => Some("bf16"),
        DType::F8E4M3 => Some("e4m3"),
        DType::F8E5M2 => Some("e5m2"),
        _ => None,
    }
}

pub fn float_literal(v: f64, dt: DType) -> String {
    let is_f64 = dt == DType::F64;
    if v.is_nan() {
        return if is_f64 {
            "(double)NAN".into()
        } else {
            "NAN".into()
        };
    }
    if v.is_infinite() {
        let s = if v > 0.0 { "INFINITY" } else { "(-INFINITY)" };
        return if is_f64 {
            format!("(double){s}")
        } else {
            s.into()
        };
    }
    let mut s = format!("{v:?}");
    if !s.contains('.') && !s.contains('e') && !s.contains("inf") {
        s.push_str(".0");
    }
    if is_f64 {
        s
    } else {
        format!("{s}f")
    }
}

pub fn int_literal(v: i64, dt: DType) -> String {
    match dt {
        DType::I64 => {
            if v == i64::MIN {
                "((int64_t)(-9223372036854775807LL - 1))".into()
            } else {
                format!("((int64_t){v}LL)")
            }
        }
        DType::U64 => format!("((uint64_t){}ULL)", v as u64),
        DType::U32 => format!("{}u", v as u32),
        DType::I32 if v == i32::MIN as i64 => "(-2147483647 - 1)".into(),
        DType::I32 => {
            if v < 0 {
                format!("({v})")
            } else {
                format!("{v}")
            }
        }
        d => format!("(({}){v})", compute_type(d)),
    }
}

pub struct Printer<'a> {
    pub names: &'a mut Names,
    pub dialect: Dialect,
    pub out: String,
    pub indent: usize,
    pub errors: Vec<Diagnostic>,
    /// Byte offsets of shared buffers (by buffer id) in the kernel's one dynamic shared-memory
    /// block; CUDA declares each shared `Alloc` as a pointer into it. Empty for C.
    pub smem_offsets: HashMap<u64, u64>,
    /// The `wgmma` shapes a CUDA kernel uses: (N, operand type name); their device functions
    /// are emitted ahead of the kernel.
    pub wgmma_shapes: std::collections::BTreeSet<tl_ir::WgmmaOp>,
    /// HIP: the buffer resource descriptor of each tensor that direct-to-LDS loads read (by
    /// buffer id), built once at kernel entry.
    pub srds: HashMap<u64, String>,
    /// CUDA: the tensor-map parameter of each (tensor buffer id, box, swizzle) that TMA loads
    /// use.
    pub tmaps: HashMap<(u64, Vec<u32>, u32), String>,
    /// CUDA: a multi-rank kernel's rank and heap-stride parameters, for peer addresses.
    pub dist: Option<tl_ir::DistAttrs>,
}

impl<'a> Printer<'a> {
    pub fn new(names: &'a mut Names, dialect: Dialect) -> Printer<'a> {
        Printer {
            names,
            dialect,
            out: String::new(),
            indent: 1,
            errors: vec![],
            smem_offsets: HashMap::new(),
            wgmma_shapes: std::collections::BTreeSet::new(),
            srds: HashMap::new(),
            tmaps: HashMap::new(),
            dist: None,
        }
    }

    pub fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    pub(crate) fn unsupported(&mut self, what: String) -> String {
        self.errors.push(Diagnostic::internal(format!(
            "code generation for {:?} does not support {what}",
            self.dialect
        )));
        "0".into()
    }

    /// A linear element offset into a buffer (64-bit for global tensors).
    pub fn offset(&mut self, buf: &Buffer, idx: &[Expr]) -> String {
        let wide = buf.scope() == Scope::Global;
        let e = tl_ir::simplify(&row_major_offset(buf, idx));
        let s = self.expr(&e);
        if wide && e.dtype() != DType::I64 {
            format!("(int64_t)({s})")
        } else {
            s
        }
    }

    /// An lvalue for an element of a buffer (scalars of `var` scope are plain variables).
    pub fn lvalue(&mut self, buf: &Buffer, idx: &[Expr]) -> String {
        let name = self.names.buf(buf);
        if buf.scope() == Scope::Var {
            return name;
        }
        let off = self.offset(buf, idx);
        format!("{name}[{off}]")
    }

    fn load(&mut self, buf: &Buffer, idx: &[Expr]) -> String {
        let lv = self.lvalue(buf, idx);
        let dt = buf.dtype();
        if buf.scope() == Scope::Var {
            return lv;
        }
        match narrow_name(dt) {
            Some(n) => format!("tl_{n}_to_f32({lv})"),
            None if dt == DType::Bool && buf.scope() != Scope::Var => format!("({lv} != 0)"),
            None => lv,
        }
    }

    /// Convert a computed value to what memory of `dt` holds.
    pub fn to_storage(&self, value: String, dt: DType) -> String {
        match narrow_name(dt) {
            Some(n) => format!("tl_f32_to_{n}({value})"),
            None if dt == DType::Bool => format!("(uint8_t)(({value}) != 0)"),
            None => value,
        }
    }

    fn math(&self, op: UnOp, dt: DType, a: String) -> String {
        let d = dt == DType::F64;
        let gpu = self.dialect != Dialect::C;
        let f = |single: &str, double: &str| {
            if d {
                format!("{double}({a})")
            } else {
                format!("{single}({a})")
            }
        };
        match op {
            // Single precision: the headers' fast exp (vectorizable on the CPU, MUFU.EX2 on GPUs).
            UnOp::Exp if !d => format!("tl_expf({a})"),
            UnOp::Exp => f("expf", "exp"),
            UnOp::Exp2 if !d => format!("tl_exp2f({a})"),
            UnOp::Exp2 => f("exp2f", "exp2"),
            UnOp::Log => f("logf", "log"),
            UnOp::Log2 => f("log2f", "log2"),
            UnOp::Sqrt => f("sqrtf", "sqrt"),
            UnOp::Rsqrt if gpu => f("rsqrtf", "rsqrt"),
            UnOp::Rsqrt if d => format!("(1.0 / sqrt({a}))"),
            UnOp::Rsqrt => format!("(1.0f / sqrtf({a}))"),
            UnOp::Tanh => f("tanhf", "tanh"),
            UnOp::Sigmoid if d => format!("tl_sigmoid({a})"),
            UnOp::Sigmoid => format!("tl_sigmoidf({a})"),
            UnOp::Floor => f("floorf", "floor"),
            UnOp::Ceil => f("ceilf", "ceil"),
            UnOp::Erf => f("erff", "erf"),
            UnOp::Sin => f("sinf", "sin"),
            UnOp::Cos => f("cosf", "cos"),
            UnOp::Abs if dt.is_float() => f("fabsf", "fabs"),
            UnOp::Abs => format!("({a} < 0 ? -{a} : {a})"),
            UnOp::Neg => format!("(-{a})"),
            UnOp::Not => format!("(!{a})"),
        }
    }

    /// Round a float computed in f32 to a narrow type's precision (an explicit cast).
    fn round_narrow(&self, dt: DType, v: String) -> String {
        match narrow_name(dt) {
            Some(n) => format!("tl_round_{n}({v})"),
            None => v,
        }
    }

    pub fn expr(&mut self, e: &Expr) -> String {
        let dt = e.dtype();
        match e.kind() {
            ExprKind::Int(v) => {
                if dt.is_float() {
                    float_literal(*v as f64, dt)
                } else {
                    int_literal(*v, dt)
                }
            }
            ExprKind::Float(v) => float_literal(*v, dt),
            ExprKind::Bool(b) => if *b { "1" } else { "0" }.into(),
            ExprKind::Var(v) => self.names.var(v),
            ExprKind::Bin(op, a, b) => {
                let odt = a.dtype();
                let (x, y) = (self.expr(a), self.expr(b));
                let r = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => {
                        format!("({x} {} {y})", op.symbol())
                    }
                    BinOp::Mod if odt.is_float() => {
                        if odt == DType::F64 {
                            format!("fmod({x}, {y})")
                        } else {
                            format!("fmodf({x}, {y})")
                        }
                    }
                    BinOp::Mod => format!("({x} % {y})"),
                    BinOp::FloorDiv if odt.is_float() => {
                        if odt == DType::F64 {
                            format!("floor({x} / {y})")
                        } else {
                            format!("floorf({x} / {y})")
                        }
                    }
                    BinOp::FloorMod if odt.is_float() => {
                        if odt == DType::F64 {
                            format!("tl_floormod_f64({x}, {y})")
                        } else {
                            format!("tl_floormod_f32({x}, {y})")
                        }
                    }
                    BinOp::FloorDiv | BinOp::FloorMod => {
                        let w = if odt.bytes() > 4 { "i64" } else { "i32" };
                        let f = if *op == BinOp::FloorDiv {
                            "floordiv"
                        } else {
                            "floormod"
                        };
                        if odt.is_unsigned_int() {
                            let s = if *op == BinOp::FloorDiv { "/" } else { "%" };
                            format!("({x} {s} {y})")
                        } else {
                            format!("tl_{f}_{w}({x}, {y})")
                        }
                    }
                    // In C, a compare-select vectorizes (fminf/fmaxf's NaN rules do not).
                    BinOp::Min | BinOp::Max if odt.is_float() && self.dialect == Dialect::C => {
                        let c = if *op == BinOp::Min { "<" } else { ">" };
                        format!("({x} {c} {y} ? {x} : {y})")
                    }
                    BinOp::Min | BinOp::Max if odt.is_float() => {
                        let f = if *op == BinOp::Min { "fmin" } else { "fmax" };
                        if odt == DType::F64 {
                            format!("{f}({x}, {y})")
                        } else {
                            format!("{f}f({x}, {y})")
                        }
                    }
                    BinOp::Min => format!("({x} < {y} ? {x} : {y})"),
                    BinOp::Max => format!("({x} > {y} ? {x} : {y})"),
                    BinOp::Pow => {
                        if odt == DType::F64 {
                            format!("pow({x}, {y})")
                        } else {
                            format!("powf({x}, {y})")
                        }
                    }
                    BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => {
                        format!("({x} {} {y})", op.symbol())
                    }
                };
                if matches!(
                    op,
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Pow
                ) && narrow_name(dt).is_some()
                {
                    // Arithmetic on narrow floats happens in f32; keep it there (rounding
                    // happens at stores and explicit casts).
                    r
                } else if dt.is_int() && dt.bytes() < 4 {
                    format!("(({}){r})", compute_type(dt))
                } else {
                    r
                }
            }
            ExprKind::Cmp(op, a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                let s = match op {
                    CmpOp::Eq => "==",
                    CmpOp::Ne => "!=",
                    CmpOp::Lt => "<",
                    CmpOp::Le => "<=",
                    CmpOp::Gt => ">",
                    CmpOp::Ge => ">=",
                };
                format!("({x} {s} {y})")
            }
            ExprKind::And(a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                // HIP: without a load on the right to guard, both sides are evaluated and
                // combined (a mask AND), not branched around — `&&` would split the wave's
                // code into exec-masked regions.
                if self.dialect == Dialect::Hip && !reads_memory(b) {
                    format!("({x} & {y})")
                } else {
                    format!("({x} && {y})")
                }
            }
            ExprKind::Or(a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                format!("({x} || {y})")
            }
            ExprKind::Unary(op, a) => {
                let x = self.expr(a);
                self.math(*op, dt, x)
            }
            ExprKind::Select(c, a, b) | ExprKind::IfThenElse(c, a, b) => {
                let (c, x, y) = (self.expr(c), self.expr(a), self.expr(b));
                format!("({c} ? {x} : {y})")
            }
            ExprKind::Cast(a) => {
                let x = self.expr(a);
                if dt.is_bool() {
                    format!("({x} != 0)")
                } else if narrow_name(dt).is_some() {
                    self.round_narrow(dt, format!("(float)({x})"))
                } else {
                    format!("(({}){x})", compute_type(dt))
                }
            }
            ExprKind::Load(buf, idx) => self.load(buf, idx),
            ExprKind::Call(op, args) => self.call(op, args, dt),
        }
    }

    fn call(&mut self, op: &Intrinsic, args: &[Expr], dt: DType) -> String {
        match op {
            Intrinsic::AddressOf => match args.first().map(|a| a.kind()) {
                Some(ExprKind::Load(buf, idx)) => {
                    let lv = self.lvalue(buf, idx);
                    format!("(&{lv})")
                }
                _ => self.unsupported("address_of of a non-load".into()),
            },
            Intrinsic::Extern { name, .. } => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
                format!("{name}({})", a.join(", "))
            }
            Intrinsic::Print { msg } if self.dialect != Dialect::Hip => {
                let Some(v) = args.first() else {
                    return self.unsupported("print without a value".into());
                };
                let vt = v.dtype();
                let (fmt, val) = if vt.is_float() {
                    ("%f", format!("(double)({})", self.expr(v)))
                } else if vt == DType::Bool {
                    ("%d", format!("(int)({})", self.expr(v)))
                } else {
                    ("%lld", format!("(long long)({})", self.expr(v)))
                };
                let mut lit = String::new();
                for c in msg.chars() {
                    match c {
                        '%' => lit.push_str("%%"),
                        '"' => lit.push_str("\\\""),
                        '\\' => lit.push_str("\\\\"),
                        '\n' => lit.push_str("\\n"),
                        c if (c as u32) < 0x20 => lit.push(' '),
                        c => lit.push(c),
                    }
                }
                if self.dialect == Dialect::Cuda {
                    format!(
                        "printf(\"{lit}{fmt} [block (%d, %d, %d), thread (%d, %d, %d)]\\n\", {val}, \
                         (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)threadIdx.x, \
                         (int)threadIdx.y, (int)threadIdx.z)"
                    )
                } else {
                    // Flushed at once: the output lands before the host's own next line (and a
                    // crash later in the kernel does not swallow it).
                    format!("(printf(\"{lit}{fmt}\\n\", {val}), fflush(stdout))")
                }
            }
            Intrinsic::AtomicAdd | Intrinsic::AtomicMax | Intrinsic::AtomicMin
                if self.dialect == Dialect::C =>
            {
                let (Some(addr), Some(v)) = (args.first(), args.get(1)) else {
                    return self.unsupported(format!("{} without two arguments", op.name()));
                };
                let target_dt = match addr.kind() {
                    ExprKind::Call(Intrinsic::AddressOf, a) => a.first().map(|l| l.dtype()),
                    _ => None,
                }
                .unwrap_or(DType::F32);
                let (a, v) = (self.expr(addr), self.expr(v));
                format!("tl_{}_{}({a}, {v})", op.name(), target_dt.name())
            }
            // The CPU and AMD forms: a plain 16-byte copy (the CUDA one shifts aligned words).
            Intrinsic::ShiftedVecCopy if self.dialect != Dialect::Cuda => {
                let (Some(d), Some(s)) = (args.first(), args.get(1)) else {
                    return self.unsupported(format!("{} without two arguments", op.name()));
                };
                let (d, s) = (self.expr(d), self.expr(s));
                format!("__builtin_memcpy((void*)({d}), (const void*)({s}), 16)")
            }
            other if self.dialect == Dialect::Cuda => self.cuda_call(other, args, dt),
            other if self.dialect == Dialect::Hip => self.hip_call(other, args, dt),
            other => {
                let _ = dt;
                self.unsupported(format!("the intrinsic {}", other.name()))
            }
        }
    }

    pub fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Seq(v) => {
                let mut i = 0;
                while i < v.len() {
                    if let Some(next) = v.get(i + 1) {
                        if self.packed_pair(&v[i], next) {
                            i += 2;
                            continue;
                        }
                    }
                    self.stmt(&v[i]);
                    i += 1;
                }
            }
            StmtKind::Let { var, value } => {
                let n = self.names.var(var);
                let v = self.expr(value);
                self.line(&format!("const {} {n} = {v};", compute_type(var.dtype())));
            }
            StmtKind::Alloc(b) => self.alloc(b),
            StmtKind::If { cond, then_, else_ } => {
                let c = self.expr(cond);
                self.line(&format!("if ({c}) {{"));
                self.indent += 1;
                self.stmt(then_);
                self.indent -= 1;
                if let Some(e) = else_ {
                    self.line("} else {");
                    self.indent += 1;
                    self.stmt(e);
                    self.indent -= 1;
                }
                self.line("}");
            }
            StmtKind::Store {
                buffer,
                indices,
                value,
            } => {
                let lv = self.lvalue(buffer, indices);
                // A narrow float moved from one buffer to another unchanged is a bit copy, not
                // a widening and a rounding (a register transpose costs no arithmetic).
                if let ExprKind::Load(src, idx) = value.kind() {
                    if buffer.scope() != Scope::Var
                        && src.scope() != Scope::Var
                        && src.dtype() == buffer.dtype()
                        && narrow_name(buffer.dtype()).is_some()
                    {
                        let rv = self.lvalue(src, idx);
                        self.line(&format!("{lv} = {rv};"));
                        return;
                    }
                }
                // Storing a narrow float rounds it: an explicit cast to the same type just
                // before the store would round twice.
                let value = match value.kind() {
                    ExprKind::Cast(inner)
                        if buffer.scope() != Scope::Var
                            && value.dtype() == buffer.dtype()
                            && narrow_name(buffer.dtype()).is_some()
                            && inner.dtype().is_float() =>
                    {
                        inner
                    }
                    _ => value,
                };
                let v = self.expr(value);
                let v = if buffer.scope() == Scope::Var {
                    v
                } else {
                    self.to_storage(v, buffer.dtype())
                };
                self.line(&format!("{lv} = {v};"));
            }
            StmtKind::For(l) if self.packed_loop(l) => {}
            StmtKind::For(l)
                if self.dialect == Dialect::C
                    && matches!(l.kind, ForKind::Vectorized)
                    && hoist_invariant_guard(l).is_some() =>
            {
                if let Some(hoisted) = hoist_invariant_guard(l) {
                    self.stmt(&hoisted);
                }
            }
            StmtKind::For(l) => {
                let v = self.names.var(&l.var);
                let lo = self.expr(&l.min);
                let ext = self.expr(&l.extent);
                let ty = compute_type(l.var.dtype());
                match &l.kind {
                    ForKind::Vectorized => {
                        let pragma = self.simd_pragma(&l.body);
                        if !pragma.is_empty() {
                            self.line(&pragma);
                        }
                    }
                    ForKind::Unrolled => {
                        let n = l.extent.as_int().unwrap_or(4).clamp(1, 65535);
                        if self.dialect == Dialect::C {
                            self.line(&format!("#pragma GCC unroll {n}"));
                        } else {
                            self.line("#pragma unroll");
                        }
                    }
                    // HIP: a serial loop stays a loop. LLVM's AMDGPU unroller unrolls short
                    // constant loops on its own and hoists every copy's addresses out of the
                    // loop around them, which spills a mainloop that holds the accumulators.
                    ForKind::Serial if self.dialect == Dialect::Hip => {
                        self.line("#pragma clang loop unroll(disable)");
                    }
                    _ => {}
                }
                let end = if l.min.as_int() == Some(0) {
                    ext
                } else {
                    format!("{lo} + {ext}")
                };
                self.line(&format!("for ({ty} {v} = {lo}; {v} < {end}; ++{v}) {{"));
                self.indent += 1;
                self.stmt(&l.body);
                self.indent -= 1;
                self.line("}");
            }
            StmtKind::Eval(e) => {
                let x = self.expr(e);
                self.line(&format!("{x};"));
            }
            StmtKind::Op(op) => {
                let name = op.name();
                let _ = self.unsupported(format!("an unlowered tile op `{name}`"));
            }
            StmtKind::AnnotateLayout { .. } => {}
        }
    }

    /// CUDA: two adjacent narrow-float stores as one packed conversion ([`crate::pack`]).
    fn packed_pair(&mut self, a: &Stmt, b: &Stmt) -> bool {
        if self.dialect != Dialect::Cuda {
            return false;
        }
        let Some((buf, idx, lo, hi)) = crate::pack::adjacent_pair(a, b) else {
            return false;
        };
        let dst = self.lvalue(buf, std::slice::from_ref(idx));
        let (lo, hi) = (self.expr(lo), self.expr(hi));
        let f = crate::pack::pair_function(buf.dtype());
        self.line(&format!("{f}(&{dst}, {lo}, {hi});"));
        true
    }

    /// CUDA: an unrolled loop of narrow-float stores, run two elements per step.
    fn packed_loop(&mut self, l: &tl_ir::For) -> bool {
        if self.dialect != Dialect::Cuda {
            return false;
        }
        let Some((buf, value)) = crate::pack::pair_loop(l) else {
            return false;
        };
        let v = self.names.var(&l.var);
        let ext = self.expr(&l.extent);
        let ty = compute_type(l.var.dtype());
        let dst = self.lvalue(buf, &[l.var.expr()]);
        let lo = self.expr(value);
        let next: HashMap<u64, Expr> = [(l.var.id(), l.var.expr() + 1)].into_iter().collect();
        let hi = self.expr(&value.substitute(&next));
        let f = crate::pack::pair_function(buf.dtype());
        self.line("#pragma unroll");
        self.line(&format!("for ({ty} {v} = 0; {v} < {ext}; {v} += 2) {{"));
        self.indent += 1;
        self.line(&format!("{f}(&{dst}, {lo}, {hi});"));
        self.indent -= 1;
        self.line("}");
        true
    }

    /// `#pragma omp simd`, with a reduction clause when the body folds into a scalar.
    fn simd_pragma(&mut self, body: &Stmt) -> String {
        if self.dialect != Dialect::C {
            return String::new();
        }
        if let StmtKind::Store { buffer, value, .. } = &body.kind {
            if buffer.scope() == Scope::Var {
                let op = match value.kind() {
                    ExprKind::Bin(BinOp::Add, _, _) => Some("+"),
                    ExprKind::Bin(BinOp::Max, _, _) => Some("max"),
                    ExprKind::Bin(BinOp::Min, _, _) => Some("min"),
                    _ => None,
                };
                if let Some(op) = op {
                    let n = self.names.buf(buffer);
                    return format!("#pragma omp simd reduction({op}:{n})");
                }
            }
        }
        "#pragma omp simd".into()
    }

    pub fn alloc(&mut self, b: &Buffer) {
        if self.dialect == Dialect::Cuda {
            return self.cuda_alloc(b);
        }
        if self.dialect == Dialect::Hip {
            return self.hip_alloc(b);
        }
        let name = self.names.buf(b);
        let ty = if b.scope() == Scope::Var {
            compute_type(b.dtype())
        } else {
            storage_type(b.dtype())
        };
        let n = b.const_numel().unwrap_or(1);
        match (b.scope(), self.dialect) {
            (Scope::Var, _) => self.line(&format!("{ty} {name};")),
            (Scope::Shared, Dialect::Cuda | Dialect::Hip) => {
                self.line(&format!("__shared__ __align__(16) {ty} {name}[{n}];"))
            }
            (_, Dialect::C) => {
                self.line(&format!("{ty} {name}[{n}] __attribute__((aligned(64)));"))
            }
            _ => self.line(&format!("{ty} {name}[{n}];")),
        }
    }
}

/// Whether evaluating `e` may read memory or call a function with side effects.
fn reads_memory(e: &Expr) -> bool {
    e.any(&mut |x| match x.kind() {
        ExprKind::Load(b, _) => b.scope() != Scope::Var,
        ExprKind::Call(op, _) => !op.is_pure(),
        _ => false,
    })
}

/// The row-major element offset of `buf[idx]`, unsimplified: each index times its stride,
/// widened to 64 bits for global tensors so tensors past 2^31 elements address correctly.
/// Every printer (C-family and PTX) computes offsets from this.
pub fn row_major_offset(buf: &Buffer, idx: &[Expr]) -> Expr {
    if idx.len() == 1 {
        return idx[0].clone();
    }
    let wide = buf.scope() == Scope::Global;
    let strides = buf.row_major_strides();
    let mut acc: Option<Expr> = None;
    for (i, s) in idx.iter().zip(&strides) {
        let (i, s) = if wide {
            (i.cast(DType::I64), s.cast(DType::I64))
        } else {
            (i.clone(), s.clone())
        };
        let t = i * s;
        acc = Some(match acc {
            None => t,
            Some(a) => a + t,
        });
    }
    acc.unwrap_or_else(|| Expr::int(0))
}

/// The conjuncts of a condition (`a && (b && c)` gives `a`, `b`, `c`).
fn conjuncts(e: &Expr, out: &mut Vec<Expr>) {
    match e.kind() {
        ExprKind::And(a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        _ => out.push(e.clone()),
    }
}

/// `for v { if (inv && dep) S }` as `if (inv) { for v { if (dep) S } }`, where `inv` are the
/// conjuncts that do not use `v` (a vectorized loop whose whole body is one guarded statement,
/// as the copies of a tile to a tensor's edge are). Beside testing them once per loop instead
/// of once per element, this avoids a GCC 12.2 wrong-code bug: at -O3 with `-march=znver3`
/// (or haswell) and `#pragma omp simd`, a 32-wide loop storing under `row < M && col < 8`
/// stored nothing (found by tests/fuzz.rs; reproduced outside tilelang in plain C).
fn hoist_invariant_guard(l: &tl_ir::For) -> Option<Stmt> {
    let body = match &l.body.kind {
        StmtKind::Seq(v) if v.len() == 1 => &v[0],
        _ => &l.body,
    };
    let StmtKind::If {
        cond,
        then_,
        else_: None,
    } = &body.kind
    else {
        return None;
    };
    let mut all = vec![];
    conjuncts(cond, &mut all);
    let (inv, dep): (Vec<Expr>, Vec<Expr>) = all.into_iter().partition(|c| !c.uses_var(&l.var));
    let and = |v: Vec<Expr>| v.into_iter().reduce(|a, b| a.and(b));
    let inv = and(inv)?;
    let inner = match and(dep) {
        Some(dep) => Stmt::new(
            StmtKind::If {
                cond: dep,
                then_: then_.clone(),
                else_: None,
            },
            body.span,
        ),
        None => (**then_).clone(),
    };
    let mut l2 = l.clone();
    l2.body = inner;
    Some(Stmt::new(
        StmtKind::If {
            cond: inv,
            then_: Box::new(Stmt::new(StmtKind::For(Box::new(l2)), body.span)),
            else_: None,
        },
        body.span,
    ))
}

/// Write `s` with a trailing newline (a small helper for headers built piecewise).
pub fn push_line(out: &mut String, s: &str) {
    let _ = writeln!(out, "{s}");
}
