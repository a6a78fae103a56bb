//! Expressions: immutable trees shared by reference counting, each node carrying its dtype.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::buffer::Buffer;
use crate::dtype::{round_to, DType};
use crate::intrinsic::Intrinsic;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A process-unique id for variables and buffers; identity, not the name, tells two apart.
pub(crate) fn fresh_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A named scalar: a symbolic dimension, a scalar parameter, a loop or block index, or a `let`.
#[derive(Clone)]
pub struct Var(Arc<VarData>);

#[derive(Debug)]
pub struct VarData {
    pub id: u64,
    pub name: String,
    pub dtype: DType,
}

impl Var {
    pub fn new(name: impl Into<String>, dtype: DType) -> Var {
        Var(Arc::new(VarData {
            id: fresh_id(),
            name: name.into(),
            dtype,
        }))
    }
    pub fn id(&self) -> u64 {
        self.0.id
    }
    pub fn name(&self) -> &str {
        &self.0.name
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    pub fn expr(&self) -> Expr {
        Expr::new(ExprKind::Var(self.clone()), self.dtype())
    }
}

impl PartialEq for Var {
    fn eq(&self, o: &Var) -> bool {
        self.id() == o.id()
    }
}
impl Eq for Var {}
impl Hash for Var {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.id().hash(h)
    }
}
impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// Integer: truncating (C) division. Float: true division.
    Div,
    /// Integer: truncating (C) remainder. Float: fmod.
    Mod,
    FloorDiv,
    FloorMod,
    Min,
    Max,
    Pow,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::FloorDiv => "//",
            BinOp::FloorMod => "%%",
            BinOp::Min => "min",
            BinOp::Max => "max",
            BinOp::Pow => "pow",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
        }
    }
    pub fn is_bitwise(self) -> bool {
        matches!(
            self,
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// `eq`, `ne`, `lt`, `le`, `gt`, `ge`.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
    pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UnOp {
    Neg,
    Not,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Abs,
    Floor,
    Ceil,
    Erf,
    Sin,
    Cos,
}

impl UnOp {
    pub fn name(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Not => "not",
            UnOp::Exp => "exp",
            UnOp::Exp2 => "exp2",
            UnOp::Log => "log",
            UnOp::Log2 => "log2",
            UnOp::Sqrt => "sqrt",
            UnOp::Rsqrt => "rsqrt",
            UnOp::Tanh => "tanh",
            UnOp::Sigmoid => "sigmoid",
            UnOp::Abs => "abs",
            UnOp::Floor => "floor",
            UnOp::Ceil => "ceil",
            UnOp::Erf => "erf",
            UnOp::Sin => "sin",
            UnOp::Cos => "cos",
        }
    }
    /// Math functions that only make sense on floats (an integer operand is cast to f32 first).
    pub fn is_float_math(self) -> bool {
        !matches!(self, UnOp::Neg | UnOp::Not | UnOp::Abs)
    }

    /// Reference semantics, in f64.
    pub fn eval_f64(self, x: f64) -> f64 {
        match self {
            UnOp::Neg => -x,
            UnOp::Not => (x == 0.0) as i32 as f64,
            UnOp::Exp => x.exp(),
            UnOp::Exp2 => x.exp2(),
            UnOp::Log => x.ln(),
            UnOp::Log2 => x.log2(),
            UnOp::Sqrt => x.sqrt(),
            UnOp::Rsqrt => 1.0 / x.sqrt(),
            UnOp::Tanh => x.tanh(),
            UnOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnOp::Abs => x.abs(),
            UnOp::Floor => x.floor(),
            UnOp::Ceil => x.ceil(),
            UnOp::Erf => erf(x),
            UnOp::Sin => x.sin(),
            UnOp::Cos => x.cos(),
        }
    }
}

/// erf with |error| < 1.2e-7 (Numerical Recipes' erfc Chebyshev fit), enough for f32 references.
pub fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398
                                    + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 {
        1.0 - r
    } else {
        r - 1.0
    }
}

#[derive(Clone, PartialEq, Debug)]
pub enum ExprKind {
    Int(i64),
    Float(f64),
    Bool(bool),
    Var(Var),
    Bin(BinOp, Expr, Expr),
    Cmp(CmpOp, Expr, Expr),
    And(Expr, Expr),
    Or(Expr, Expr),
    Unary(UnOp, Expr),
    /// Both arms are evaluated; use for cheap, always-safe arms.
    Select(Expr, Expr, Expr),
    /// Only the taken arm is evaluated; use when an arm may read out of bounds.
    IfThenElse(Expr, Expr, Expr),
    Cast(Expr),
    Load(Buffer, Vec<Expr>),
    Call(Intrinsic, Vec<Expr>),
}

#[derive(Debug, PartialEq)]
pub struct ExprNode {
    pub kind: ExprKind,
    pub dtype: DType,
}

/// An expression. Cloning is cheap (a reference count). Equality is structural.
#[derive(Clone, PartialEq)]
pub struct Expr(Arc<ExprNode>);

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self)
    }
}

impl Expr {
    pub fn new(kind: ExprKind, dtype: DType) -> Expr {
        Expr(Arc::new(ExprNode { kind, dtype }))
    }
    pub fn kind(&self) -> &ExprKind {
        &self.0.kind
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    pub fn ptr_eq(&self, o: &Expr) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }

    // ----- constants -----

    /// An integer literal: i32 when it fits (the index type), else i64.
    pub fn int(v: i64) -> Expr {
        let dt = if i32::try_from(v).is_ok() {
            DType::I32
        } else {
            DType::I64
        };
        Expr::new(ExprKind::Int(v), dt)
    }
    /// A constant of the given dtype (floats hold the value rounded to the dtype).
    pub fn const_of(v: f64, dtype: DType) -> Expr {
        if dtype.is_float() {
            Expr::new(ExprKind::Float(round_to(dtype, v)), dtype)
        } else if dtype.is_bool() {
            Expr::new(ExprKind::Bool(v != 0.0), dtype)
        } else {
            Expr::new(ExprKind::Int(round_to(dtype, v) as i64), dtype)
        }
    }
    pub fn int_of(v: i64, dtype: DType) -> Expr {
        if dtype.is_int() {
            Expr::new(ExprKind::Int(v), dtype)
        } else {
            Expr::const_of(v as f64, dtype)
        }
    }
    /// A float literal: f32.
    pub fn float(v: f64) -> Expr {
        Expr::new(ExprKind::Float(v as f32 as f64), DType::F32)
    }
    pub fn bool(b: bool) -> Expr {
        Expr::new(ExprKind::Bool(b), DType::Bool)
    }

    pub fn as_int(&self) -> Option<i64> {
        match self.kind() {
            ExprKind::Int(v) => Some(*v),
            ExprKind::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
    pub fn as_float(&self) -> Option<f64> {
        match self.kind() {
            ExprKind::Float(v) => Some(*v),
            ExprKind::Int(v) => Some(*v as f64),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self.kind() {
            ExprKind::Bool(b) => Some(*b),
            _ => None,
        }
    }
    pub fn as_var(&self) -> Option<&Var> {
        match self.kind() {
            ExprKind::Var(v) => Some(v),
            _ => None,
        }
    }
    pub fn is_const(&self) -> bool {
        matches!(
            self.kind(),
            ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_)
        )
    }

    // ----- typed construction -----

    /// Bring two operands to one dtype. Literals adapt to the other side when the value fits
    /// (so `x_bf16 * 0.5` stays bf16 and `i + 1` stays i32); otherwise both promote.
    pub fn unify(a: Expr, b: Expr) -> (Expr, Expr) {
        let (da, db) = (a.dtype(), b.dtype());
        if da == db {
            return (a, b);
        }
        if let Some(a2) = adapt_literal(&a, db) {
            return (a2, b);
        }
        if let Some(b2) = adapt_literal(&b, da) {
            return (a, b2);
        }
        let t = DType::promote(da, db);
        (a.cast(t), b.cast(t))
    }

    pub fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
        let (a, b) = Expr::unify(a, b);
        let (a, b) = if a.dtype().is_storage_only() || a.dtype().is_bool() && !op.is_bitwise() {
            let t = if a.dtype().is_bool() {
                DType::I32
            } else {
                DType::F32
            };
            (a.cast(t), b.cast(t))
        } else {
            (a, b)
        };
        let dt = a.dtype();
        Expr::new(ExprKind::Bin(op, a, b), dt)
    }

    pub fn compare(op: CmpOp, a: Expr, b: Expr) -> Expr {
        let (a, b) = Expr::unify(a, b);
        Expr::new(ExprKind::Cmp(op, a, b), DType::Bool)
    }

    pub fn unary(op: UnOp, a: Expr) -> Expr {
        let a = if op.is_float_math() && !a.dtype().is_float() || a.dtype().is_storage_only() {
            a.cast(DType::F32)
        } else if op == UnOp::Not {
            a.to_bool()
        } else {
            a
        };
        let dt = a.dtype();
        Expr::new(ExprKind::Unary(op, a), dt)
    }

    /// Truthiness: `x != 0` for non-bool values.
    pub fn to_bool(self) -> Expr {
        if self.dtype().is_bool() {
            self
        } else {
            let z = Expr::int_of(0, self.dtype());
            Expr::compare(CmpOp::Ne, self, z)
        }
    }

    pub fn cast(&self, dtype: DType) -> Expr {
        if self.dtype() == dtype {
            return self.clone();
        }
        match self.kind() {
            ExprKind::Int(v) if dtype.is_int() || dtype.is_float() || dtype.is_bool() => {
                Expr::const_of(*v as f64, dtype).with_exact_int(*v, dtype)
            }
            ExprKind::Float(v) => Expr::const_of(*v, dtype),
            ExprKind::Bool(b) => Expr::const_of(*b as i64 as f64, dtype),
            _ => Expr::new(ExprKind::Cast(self.clone()), dtype),
        }
    }

    /// Keep integer constants exact (f64 loses bits past 2^53).
    fn with_exact_int(self, v: i64, dtype: DType) -> Expr {
        if dtype.is_int() {
            match dtype.int_range() {
                Some((lo, hi)) if (v as i128) >= lo && (v as i128) <= hi => {
                    Expr::new(ExprKind::Int(v), dtype)
                }
                _ => self,
            }
        } else {
            self
        }
    }

    pub fn select(c: Expr, a: Expr, b: Expr) -> Expr {
        let (a, b) = Expr::unify(a, b);
        let dt = a.dtype();
        Expr::new(ExprKind::Select(c.to_bool(), a, b), dt)
    }
    pub fn if_then_else(c: Expr, a: Expr, b: Expr) -> Expr {
        let (a, b) = Expr::unify(a, b);
        let dt = a.dtype();
        Expr::new(ExprKind::IfThenElse(c.to_bool(), a, b), dt)
    }
    pub fn load(buf: &Buffer, indices: Vec<Expr>) -> Expr {
        Expr::new(ExprKind::Load(buf.clone(), indices), buf.dtype())
    }
    pub fn call(op: Intrinsic, args: Vec<Expr>, dtype: DType) -> Expr {
        Expr::new(ExprKind::Call(op, args), dtype)
    }

    // ----- fluent helpers (the DSL uses these) -----
    pub fn lt(&self, o: impl Into<Expr>) -> Expr {
        Expr::compare(CmpOp::Lt, self.clone(), o.into())
    }
    pub fn le(&self, o: impl Into<Expr>) -> Expr {
        Expr::compare(CmpOp::Le, self.clone(), o.into())
    }
    pub fn gt(&self, o: impl Into<Expr>) -> Expr {
        Expr::compare(CmpOp::Gt, self.clone(), o.into())
    }
    pub fn ge(&self, o: impl Into<Expr>) -> Expr {
        Expr::compare(CmpOp::Ge, self.clone(), o.into())
    }
    pub fn eq_(&self, o: impl Into<Expr>) -> Expr {
        Expr::compare(CmpOp::Eq, self.clone(), o.into())
    }
    pub fn ne_(&self, o: impl Into<Expr>) -> Expr {
        Expr::compare(CmpOp::Ne, self.clone(), o.into())
    }
    pub fn and(&self, o: impl Into<Expr>) -> Expr {
        Expr::new(
            ExprKind::And(self.clone().to_bool(), o.into().to_bool()),
            DType::Bool,
        )
    }
    pub fn or(&self, o: impl Into<Expr>) -> Expr {
        Expr::new(
            ExprKind::Or(self.clone().to_bool(), o.into().to_bool()),
            DType::Bool,
        )
    }
    pub fn min(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Min, self.clone(), o.into())
    }
    pub fn max(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Max, self.clone(), o.into())
    }
    pub fn pow(&self, o: impl Into<Expr>) -> Expr {
        let a = if self.dtype().is_float() {
            self.clone()
        } else {
            self.cast(DType::F32)
        };
        Expr::binary(BinOp::Pow, a, o.into())
    }
    pub fn floordiv(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::FloorDiv, self.clone(), o.into())
    }
    pub fn floormod(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::FloorMod, self.clone(), o.into())
    }
    pub fn exp(&self) -> Expr {
        Expr::unary(UnOp::Exp, self.clone())
    }
    pub fn exp2(&self) -> Expr {
        Expr::unary(UnOp::Exp2, self.clone())
    }
    pub fn log(&self) -> Expr {
        Expr::unary(UnOp::Log, self.clone())
    }
    pub fn log2(&self) -> Expr {
        Expr::unary(UnOp::Log2, self.clone())
    }
    pub fn sqrt(&self) -> Expr {
        Expr::unary(UnOp::Sqrt, self.clone())
    }
    pub fn rsqrt(&self) -> Expr {
        Expr::unary(UnOp::Rsqrt, self.clone())
    }
    pub fn tanh(&self) -> Expr {
        Expr::unary(UnOp::Tanh, self.clone())
    }
    pub fn sigmoid(&self) -> Expr {
        Expr::unary(UnOp::Sigmoid, self.clone())
    }
    pub fn abs(&self) -> Expr {
        Expr::unary(UnOp::Abs, self.clone())
    }
    pub fn floor(&self) -> Expr {
        Expr::unary(UnOp::Floor, self.clone())
    }
    pub fn ceil(&self) -> Expr {
        Expr::unary(UnOp::Ceil, self.clone())
    }
    pub fn erf(&self) -> Expr {
        Expr::unary(UnOp::Erf, self.clone())
    }
    pub fn sin(&self) -> Expr {
        Expr::unary(UnOp::Sin, self.clone())
    }
    pub fn cos(&self) -> Expr {
        Expr::unary(UnOp::Cos, self.clone())
    }

    /// Visit every sub-expression, pre-order.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        for c in self.children() {
            c.visit(f);
        }
    }

    pub fn children(&self) -> Vec<&Expr> {
        match self.kind() {
            ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_) | ExprKind::Var(_) => {
                vec![]
            }
            ExprKind::Bin(_, a, b)
            | ExprKind::Cmp(_, a, b)
            | ExprKind::And(a, b)
            | ExprKind::Or(a, b) => vec![a, b],
            ExprKind::Unary(_, a) | ExprKind::Cast(a) => vec![a],
            ExprKind::Select(c, a, b) | ExprKind::IfThenElse(c, a, b) => vec![c, a, b],
            ExprKind::Load(_, idx) | ExprKind::Call(_, idx) => idx.iter().collect(),
        }
    }

    /// Rebuild this node with `f` applied to each child; shares the node when nothing changed.
    pub fn map_children(&self, f: &mut dyn FnMut(&Expr) -> Expr) -> Expr {
        let mut changed = false;
        let mut g = |e: &Expr| {
            let n = f(e);
            if !n.ptr_eq(e) {
                changed = true;
            }
            n
        };
        let kind = match self.kind() {
            ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_) | ExprKind::Var(_) => {
                return self.clone()
            }
            ExprKind::Bin(op, a, b) => ExprKind::Bin(*op, g(a), g(b)),
            ExprKind::Cmp(op, a, b) => ExprKind::Cmp(*op, g(a), g(b)),
            ExprKind::And(a, b) => ExprKind::And(g(a), g(b)),
            ExprKind::Or(a, b) => ExprKind::Or(g(a), g(b)),
            ExprKind::Unary(op, a) => ExprKind::Unary(*op, g(a)),
            ExprKind::Cast(a) => ExprKind::Cast(g(a)),
            ExprKind::Select(c, a, b) => ExprKind::Select(g(c), g(a), g(b)),
            ExprKind::IfThenElse(c, a, b) => ExprKind::IfThenElse(g(c), g(a), g(b)),
            ExprKind::Load(buf, idx) => ExprKind::Load(buf.clone(), idx.iter().map(g).collect()),
            ExprKind::Call(op, args) => ExprKind::Call(op.clone(), args.iter().map(g).collect()),
        };
        if changed {
            Expr::new(kind, self.dtype())
        } else {
            self.clone()
        }
    }

    /// Does any sub-expression satisfy `pred`?
    pub fn any(&self, pred: &mut dyn FnMut(&Expr) -> bool) -> bool {
        if pred(self) {
            return true;
        }
        self.children().into_iter().any(|c| c.any(pred))
    }

    pub fn uses_var(&self, v: &Var) -> bool {
        self.any(&mut |e| e.as_var() == Some(v))
    }

    pub fn has_load(&self) -> bool {
        self.any(&mut |e| matches!(e.kind(), ExprKind::Load(..)))
    }
}

fn adapt_literal(lit: &Expr, to: DType) -> Option<Expr> {
    match lit.kind() {
        ExprKind::Int(v) => {
            if to.is_float() {
                Some(Expr::const_of(*v as f64, to))
            } else if to.is_int() {
                let (lo, hi) = to.int_range()?;
                ((*v as i128) >= lo && (*v as i128) <= hi).then(|| Expr::int_of(*v, to))
            } else {
                None
            }
        }
        ExprKind::Float(v) if to.is_float() => Some(Expr::const_of(*v, to)),
        _ => None,
    }
}

impl From<i64> for Expr {
    fn from(v: i64) -> Expr {
        Expr::int(v)
    }
}
impl From<i32> for Expr {
    fn from(v: i32) -> Expr {
        Expr::int(v as i64)
    }
}
impl From<u32> for Expr {
    fn from(v: u32) -> Expr {
        Expr::int(v as i64)
    }
}
impl From<usize> for Expr {
    fn from(v: usize) -> Expr {
        Expr::int(v as i64)
    }
}
impl From<f64> for Expr {
    fn from(v: f64) -> Expr {
        Expr::float(v)
    }
}
impl From<f32> for Expr {
    fn from(v: f32) -> Expr {
        Expr::float(v as f64)
    }
}
impl From<bool> for Expr {
    fn from(v: bool) -> Expr {
        Expr::bool(v)
    }
}
impl From<&Expr> for Expr {
    fn from(v: &Expr) -> Expr {
        v.clone()
    }
}
impl From<&Var> for Expr {
    fn from(v: &Var) -> Expr {
        v.expr()
    }
}
impl From<Var> for Expr {
    fn from(v: Var) -> Expr {
        v.expr()
    }
}

impl Expr {
    /// Replace variables by expressions (by variable id).
    pub fn substitute(&self, map: &std::collections::HashMap<u64, Expr>) -> Expr {
        if map.is_empty() {
            return self.clone();
        }
        if let ExprKind::Var(v) = self.kind() {
            return map.get(&v.id()).cloned().unwrap_or_else(|| self.clone());
        }
        self.map_children(&mut |c| c.substitute(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType::*;

    #[test]
    fn literals_adapt() {
        let x = Var::new("x", BF16).expr();
        let y = x.clone() * 0.5;
        assert_eq!(y.dtype(), BF16);
        let i = Var::new("i", I32).expr();
        assert_eq!((i.clone() + 1).dtype(), I32);
        assert_eq!((i.clone() * 0.5).dtype(), F32);
        let big = Expr::int(1 << 40);
        assert_eq!((i + big).dtype(), I64);
    }

    #[test]
    fn mixed_types_promote() {
        let a = Var::new("a", F16).expr();
        let b = Var::new("b", BF16).expr();
        assert_eq!((a + b).dtype(), F32);
        let e = Var::new("e", F8E4M3).expr();
        assert_eq!((e.clone() * e).dtype(), F32);
    }

    #[test]
    fn math_on_ints_goes_float() {
        let i = Var::new("i", I32).expr();
        assert_eq!(i.exp().dtype(), F32);
        assert_eq!(i.abs().dtype(), I32);
    }

    #[test]
    fn cast_of_constant_folds() {
        let c = Expr::int(3).cast(F32);
        assert_eq!(c.as_float(), Some(3.0));
        assert!(c.is_const());
    }

    #[test]
    fn erf_is_accurate() {
        assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 2e-7);
        assert!((erf(-1.5) + 0.966_105_146_475_310_7).abs() < 2e-7);
    }
}
