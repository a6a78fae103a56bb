//! Binding a launch's arguments to the kernel's signature, as the runtime does: tensor extents
//! that are a bare symbolic dim define it, every other extent must match, scalars take their
//! values, and the grid is evaluated from the result.

use std::collections::HashMap;

use tl_ir::eval::{eval_int, Value};
use tl_ir::{ExprKind, Kernel, Param};

use crate::error::SimError;
use crate::SimArg;

/// The values of the kernel's dims and scalar params (by variable id), the evaluated tensor
/// shapes (parameter order, `None` for scalars) and the grid.
pub struct Bound {
    pub env: HashMap<u64, Value>,
    pub shapes: Vec<Option<Vec<i64>>>,
    pub grid: [i64; 3],
}

fn bad(k: &Kernel, i: usize, msg: String) -> SimError {
    let name = k.params.get(i).map(|p| p.name()).unwrap_or("?");
    SimError::BadArgs(format!(
        "kernel `{}`, argument {i} (`{name}`): {msg}",
        k.name
    ))
}

pub fn bind(k: &Kernel, args: &[SimArg]) -> Result<Bound, SimError> {
    if args.len() != k.params.len() {
        return Err(SimError::BadArgs(format!(
            "kernel `{}` takes {} arguments ({}), got {}",
            k.name,
            k.params.len(),
            k.params
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
            args.len()
        )));
    }
    let mut env: HashMap<u64, Value> = HashMap::new();
    for (i, (p, a)) in k.params.iter().zip(args).enumerate() {
        match (p, a) {
            (Param::Tensor { buffer, .. }, SimArg::Tensor { shape, bytes }) => {
                if shape.len() != buffer.rank() {
                    return Err(bad(
                        k,
                        i,
                        format!("expected a {}-d tensor, got shape {shape:?}", buffer.rank()),
                    ));
                }
                let numel = shape
                    .iter()
                    .try_fold(1usize, |acc, &n| acc.checked_mul(n))
                    .ok_or_else(|| bad(k, i, format!("shape {shape:?} overflows")))?;
                if numel.checked_mul(buffer.dtype().bytes()) != Some(bytes.len()) {
                    return Err(bad(
                        k,
                        i,
                        format!(
                            "shape {shape:?} of {} needs {} bytes, got {}",
                            buffer.dtype(),
                            numel.saturating_mul(buffer.dtype().bytes()),
                            bytes.len()
                        ),
                    ));
                }
                for (d, (e, &n)) in buffer.shape().iter().zip(shape).enumerate() {
                    if let ExprKind::Var(v) = e.kind() {
                        if n > i32::MAX as usize {
                            return Err(bad(
                                k,
                                i,
                                format!("dimension {d} is {n}, past the 2^31-1 a size may have"),
                            ));
                        }
                        match env.get(&v.id()) {
                            Some(prev) if prev.as_i64() != n as i64 => {
                                return Err(bad(
                                    k,
                                    i,
                                    format!(
                                    "dimension {d} is {n}, but `{}` is {} from an earlier argument",
                                    v.name(),
                                    prev.as_i64()
                                ),
                                ))
                            }
                            _ => {
                                env.insert(v.id(), Value::Int(n as i64));
                            }
                        }
                    }
                }
            }
            (Param::Scalar(v), SimArg::Int(x)) if v.dtype().is_bool() => {
                env.insert(v.id(), Value::Bool(*x != 0));
            }
            (Param::Scalar(v), SimArg::Int(x)) if v.dtype().is_int() => {
                env.insert(
                    v.id(),
                    Value::Int(tl_ir::eval::wrap_int(*x as i128, v.dtype())),
                );
            }
            (Param::Scalar(v), SimArg::Int(x)) => {
                env.insert(
                    v.id(),
                    Value::Float(tl_ir::dtype::round_to(v.dtype(), *x as f64)),
                );
            }
            (Param::Scalar(v), SimArg::Float(x)) if v.dtype().is_float() => {
                env.insert(v.id(), Value::Float(tl_ir::dtype::round_to(v.dtype(), *x)));
            }
            (Param::Tensor { .. }, _) => return Err(bad(k, i, "expected a tensor".into())),
            (Param::Scalar(v), _) => {
                return Err(bad(k, i, format!("expected a {} scalar", v.dtype())))
            }
        }
    }
    for d in &k.dims {
        if !env.contains_key(&d.id()) {
            return Err(SimError::BadArgs(format!(
                "kernel `{}`: the symbolic size `{}` is not the extent of any tensor dimension, so no argument defines it",
                k.name,
                d.name()
            )));
        }
    }
    let mut shapes = vec![];
    for (i, (p, a)) in k.params.iter().zip(args).enumerate() {
        match (p, a) {
            (Param::Tensor { buffer, .. }, SimArg::Tensor { shape, .. }) => {
                for (d, (e, &n)) in buffer.shape().iter().zip(shape).enumerate() {
                    let want = eval_int(e, &env).map_err(|x| bad(k, i, x.to_string()))?;
                    if want != n as i64 {
                        return Err(bad(
                            k,
                            i,
                            format!("dimension {d} is {n}, but the kernel expects {e} = {want}"),
                        ));
                    }
                }
                shapes.push(Some(shape.iter().map(|&n| n as i64).collect()));
            }
            _ => shapes.push(None),
        }
    }
    if k.grid.is_empty() || k.grid.len() > 3 || k.block_vars.len() != k.grid.len() {
        return Err(SimError::InvalidIr(format!(
            "kernel `{}` has {} grid extents and {} block variables (1 to 3 of each, equally many)",
            k.name,
            k.grid.len(),
            k.block_vars.len()
        )));
    }
    let mut grid = [1i64; 3];
    for (g, e) in grid.iter_mut().zip(&k.grid) {
        let n = eval_int(e, &env)
            .map_err(|x| SimError::BadArgs(format!("grid of `{}`: {x}", k.name)))?;
        if n < 0 {
            return Err(SimError::BadArgs(format!(
                "kernel `{}`: grid extent {e} is {n} for these arguments",
                k.name
            )));
        }
        *g = n;
    }
    Ok(Bound { env, shapes, grid })
}

/// The blocks to run: the caller's list (checked against the grid) or every block, x fastest.
pub fn blocks(grid: [i64; 3], wanted: Option<&[[i64; 3]]>) -> Result<Vec<[i64; 3]>, SimError> {
    match wanted {
        Some(list) => {
            for b in list {
                if (0..3).any(|d| b[d] < 0 || b[d] >= grid[d]) {
                    return Err(SimError::BadArgs(format!(
                        "block {b:?} is outside the grid {grid:?}"
                    )));
                }
            }
            Ok(list.to_vec())
        }
        None => {
            let total = grid.iter().try_fold(1i64, |a, &g| a.checked_mul(g));
            if !matches!(total, Some(t) if t <= 1 << 20) {
                return Err(SimError::BadArgs(format!(
                    "the grid {grid:?} has too many blocks to simulate all of them; pick some with SimOptions::blocks"
                )));
            }
            let mut v = vec![];
            for z in 0..grid[2] {
                for y in 0..grid[1] {
                    for x in 0..grid[0] {
                        v.push([x, y, z]);
                    }
                }
            }
            Ok(v)
        }
    }
}

/// The values of `block_vars` for hardware block index `b`: `b` itself, or TileLang's panel
/// rasterization when the kernel asks for a swizzle (thread-ir.md, "Block swizzle").
pub fn block_var_values(b: [i64; 3], grid: [i64; 3], ndim: usize, panel: Option<u32>) -> [i64; 3] {
    match panel {
        Some(p) if ndim == 2 && p > 0 && grid[0] > 0 => {
            let (gx, gy) = (grid[0], grid[1]);
            let p = p as i64;
            let l = b[1] * gx + b[0];
            let panel = l / (p * gx);
            let r = l % (p * gx);
            let rows = p.min(gy - panel * p).max(1);
            [r / rows, panel * p + r % rows, b[2]]
        }
        _ => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swizzle_walks_down_panels() {
        // 4 x 4 grid, panels of 2 rows: linear blocks 0,1,2,3 visit (0,0),(0,1),(1,0),(1,1).
        let g = [4, 4, 1];
        let at = |x, y| block_var_values([x, y, 0], g, 2, Some(2));
        assert_eq!(at(0, 0), [0, 0, 0]);
        assert_eq!(at(1, 0), [0, 1, 0]);
        assert_eq!(at(2, 0), [1, 0, 0]);
        assert_eq!(at(3, 0), [1, 1, 0]);
        assert_eq!(at(0, 2), [0, 2, 0]);
        // Every block index is produced exactly once.
        let mut seen = std::collections::HashSet::new();
        for y in 0..4 {
            for x in 0..4 {
                assert!(seen.insert(at(x, y)));
            }
        }
        // A ragged last panel (3 rows, panels of 2).
        let g = [3, 3, 1];
        let mut seen = std::collections::HashSet::new();
        for y in 0..3 {
            for x in 0..3 {
                let v = block_var_values([x, y, 0], g, 2, Some(2));
                assert!(v[0] < 3 && v[1] < 3);
                assert!(seen.insert(v));
            }
        }
    }
}
