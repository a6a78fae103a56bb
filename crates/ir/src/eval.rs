//! Scalar evaluation of expressions without memory: constant folding in the simplifier, binding
//! symbolic sizes at launch, and the reference semantics that property tests check against.

use std::collections::HashMap;

use crate::dtype::{round_to, DType};
use crate::expr::{BinOp, CmpOp, Expr, ExprKind, UnOp};

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Value {
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::Float(v) => v,
            Value::Bool(b) => b as i64 as f64,
        }
    }
    pub fn as_i64(self) -> i64 {
        match self {
            Value::Int(v) => v,
            Value::Float(v) => v as i64,
            Value::Bool(b) => b as i64,
        }
    }
    pub fn truthy(self) -> bool {
        match self {
            Value::Int(v) => v != 0,
            Value::Float(v) => v != 0.0,
            Value::Bool(b) => b,
        }
    }
    pub fn to_expr(self, dtype: DType) -> Expr {
        match self {
            Value::Int(v) => Expr::int_of(v, dtype),
            Value::Float(v) => Expr::const_of(v, dtype),
            Value::Bool(b) => Expr::const_of(b as i64 as f64, dtype),
        }
    }
}

/// Why an expression has no value here.
#[derive(Clone, PartialEq, Debug, thiserror::Error)]
pub enum EvalError {
    #[error("variable `{0}` has no value")]
    Unbound(String),
    #[error("division by zero in `{0}`")]
    DivByZero(String),
    #[error("`{0}` reads memory or calls an intrinsic and has no constant value")]
    NotScalar(String),
}

/// Wrap an integer into the value range of `dtype` (two's complement, as C does on targets we
/// generate for).
pub fn wrap_int(v: i128, dtype: DType) -> i64 {
    match dtype.bits() {
        8 if dtype.is_signed_int() => v as i8 as i64,
        16 if dtype.is_signed_int() => v as i16 as i64,
        32 if dtype.is_signed_int() => v as i32 as i64,
        8 => v as u8 as i64,
        16 => v as u16 as i64,
        32 => v as u32 as i64,
        _ if dtype == DType::U64 => v as u64 as i64,
        _ => v as i64,
    }
}

pub fn floordiv_i(a: i64, b: i64) -> i64 {
    let q = a.wrapping_div(b);
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

pub fn floormod_i(a: i64, b: i64) -> i64 {
    let r = a.wrapping_rem(b);
    if r != 0 && ((r < 0) != (b < 0)) {
        r + b
    } else {
        r
    }
}

/// Apply a binary operator to two values of dtype `dt` (the operands' unified dtype).
pub fn apply_bin(op: BinOp, a: Value, b: Value, dt: DType) -> Result<Value, EvalError> {
    if dt.is_float() {
        let (x, y) = (a.as_f64(), b.as_f64());
        let r = match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Div => x / y,
            BinOp::Mod => x % y,
            BinOp::FloorDiv => (x / y).floor(),
            BinOp::FloorMod => x - (x / y).floor() * y,
            BinOp::Min => x.min(y),
            BinOp::Max => x.max(y),
            BinOp::Pow => x.powf(y),
            _ => {
                return Err(EvalError::NotScalar(format!(
                    "bitwise {} on floats",
                    op.symbol()
                )))
            }
        };
        return Ok(Value::Float(round_to(dt, r)));
    }
    let (x, y) = (a.as_i64(), b.as_i64());
    let unsigned = dt.is_unsigned_int();
    let div0 = || EvalError::DivByZero(format!("{x} {} {y}", op.symbol()));
    let r: i128 = match op {
        BinOp::Add => x as i128 + y as i128,
        BinOp::Sub => x as i128 - y as i128,
        BinOp::Mul => x as i128 * y as i128,
        BinOp::Div => {
            if y == 0 {
                return Err(div0());
            }
            if unsigned {
                ((x as u64) / (y as u64)) as i128
            } else {
                x.wrapping_div(y) as i128
            }
        }
        BinOp::Mod => {
            if y == 0 {
                return Err(div0());
            }
            if unsigned {
                ((x as u64) % (y as u64)) as i128
            } else {
                x.wrapping_rem(y) as i128
            }
        }
        BinOp::FloorDiv => {
            if y == 0 {
                return Err(div0());
            }
            floordiv_i(x, y) as i128
        }
        BinOp::FloorMod => {
            if y == 0 {
                return Err(div0());
            }
            floormod_i(x, y) as i128
        }
        BinOp::Min => x.min(y) as i128,
        BinOp::Max => x.max(y) as i128,
        BinOp::Pow => (x as f64).powf(y as f64) as i128,
        BinOp::BitAnd => (x & y) as i128,
        BinOp::BitOr => (x | y) as i128,
        BinOp::BitXor => (x ^ y) as i128,
        BinOp::Shl => (x as i128) << (y.clamp(0, 63) as u32),
        BinOp::Shr => {
            if unsigned {
                ((x as u64) >> (y.clamp(0, 63) as u32)) as i128
            } else {
                (x >> (y.clamp(0, 63) as u32)) as i128
            }
        }
    };
    if dt.is_bool() {
        return Ok(Value::Bool(r != 0));
    }
    Ok(Value::Int(wrap_int(r, dt)))
}

pub fn apply_unary(op: UnOp, a: Value, dt: DType) -> Value {
    match (op, a) {
        (UnOp::Not, v) => Value::Bool(!v.truthy()),
        (UnOp::Neg, Value::Int(v)) => Value::Int(wrap_int(-(v as i128), dt)),
        (UnOp::Abs, Value::Int(v)) => Value::Int(wrap_int((v as i128).abs(), dt)),
        (op, v) => Value::Float(round_to(dt, op.eval_f64(v.as_f64()))),
    }
}

pub fn apply_cast(v: Value, to: DType) -> Value {
    if to.is_bool() {
        Value::Bool(v.truthy())
    } else if to.is_float() {
        Value::Float(round_to(to, v.as_f64()))
    } else {
        match v {
            Value::Int(i) => Value::Int(wrap_int(i as i128, to)),
            Value::Bool(b) => Value::Int(b as i64),
            Value::Float(f) => Value::Int(round_to(to, f) as i64),
        }
    }
}

pub fn apply_cmp(op: CmpOp, a: Value, b: Value, dt: DType) -> bool {
    if dt.is_float() {
        op.eval(a.as_f64(), b.as_f64())
    } else if dt.is_unsigned_int() {
        op.eval(a.as_i64() as u64, b.as_i64() as u64)
    } else {
        op.eval(a.as_i64(), b.as_i64())
    }
}

/// Evaluate with the given variable values (by variable id).
pub fn eval(e: &Expr, env: &HashMap<u64, Value>) -> Result<Value, EvalError> {
    Ok(match e.kind() {
        ExprKind::Int(v) => Value::Int(*v),
        ExprKind::Float(v) => Value::Float(*v),
        ExprKind::Bool(b) => Value::Bool(*b),
        ExprKind::Var(v) => *env
            .get(&v.id())
            .ok_or_else(|| EvalError::Unbound(v.name().to_string()))?,
        ExprKind::Bin(op, a, b) => apply_bin(*op, eval(a, env)?, eval(b, env)?, a.dtype())?,
        ExprKind::Cmp(op, a, b) => {
            Value::Bool(apply_cmp(*op, eval(a, env)?, eval(b, env)?, a.dtype()))
        }
        ExprKind::And(a, b) => Value::Bool(eval(a, env)?.truthy() && eval(b, env)?.truthy()),
        ExprKind::Or(a, b) => Value::Bool(eval(a, env)?.truthy() || eval(b, env)?.truthy()),
        ExprKind::Unary(op, a) => apply_unary(*op, eval(a, env)?, e.dtype()),
        ExprKind::Select(c, a, b) => {
            let (c, a, b) = (eval(c, env)?, eval(a, env)?, eval(b, env)?);
            if c.truthy() {
                a
            } else {
                b
            }
        }
        ExprKind::IfThenElse(c, a, b) => {
            if eval(c, env)?.truthy() {
                eval(a, env)?
            } else {
                eval(b, env)?
            }
        }
        ExprKind::Cast(a) => apply_cast(eval(a, env)?, e.dtype()),
        ExprKind::Load(..) | ExprKind::Call(..) => return Err(EvalError::NotScalar(e.to_string())),
    })
}

/// Evaluate an integer expression over symbolic sizes.
pub fn eval_int(e: &Expr, env: &HashMap<u64, Value>) -> Result<i64, EvalError> {
    eval(e, env).map(Value::as_i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Var;

    #[test]
    fn floor_semantics() {
        assert_eq!(floordiv_i(-7, 2), -4);
        assert_eq!(floormod_i(-7, 2), 1);
        assert_eq!(floordiv_i(7, -2), -4);
        assert_eq!(floormod_i(7, -2), -1);
        assert_eq!(floordiv_i(6, 3), 2);
    }

    #[test]
    fn evaluates_with_env() {
        let n = Var::new("n", DType::I32);
        let e = crate::ops::ceildiv(&n, 128) * 2;
        let mut env = HashMap::new();
        env.insert(n.id(), Value::Int(1000));
        assert_eq!(eval_int(&e, &env).unwrap(), 16);
        assert!(matches!(
            eval_int(&e, &HashMap::new()),
            Err(EvalError::Unbound(_))
        ));
    }

    #[test]
    fn int_ops_wrap_to_width() {
        let r = apply_bin(
            BinOp::Add,
            Value::Int(i32::MAX as i64),
            Value::Int(1),
            DType::I32,
        )
        .unwrap();
        assert_eq!(r, Value::Int(i32::MIN as i64));
        assert!(apply_bin(BinOp::Div, Value::Int(1), Value::Int(0), DType::I32).is_err());
    }
}
