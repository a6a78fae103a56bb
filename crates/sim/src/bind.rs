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
                        if let Some(why) = tl_ir::kernel::symbolic_dim_too_large(d, n) {
                            return Err(bad(k, i, why));
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

/// The values of `block_vars` for hardware block index `b`: `b` itself, or, for a 2-d grid,
/// the block AMD's XCD remap (`xcd`) and TileLang's panel rasterization (`panel`) make of it
/// (thread-ir.md, "Block swizzle"), the remap first.
pub fn block_var_values(
    b: [i64; 3],
    grid: [i64; 3],
    ndim: usize,
    panel: Option<u32>,
    xcd: Option<u32>,
) -> [i64; 3] {
    let (gx, gy) = (grid[0], grid[1]);
    // A 3-d grid rasterizes (x, y) within each z in panels too; the XCD remap is 2-d only.
    let Some(n) = gx
        .checked_mul(gy)
        .filter(|_| (ndim == 2 || (ndim == 3 && panel.is_some())) && gx > 0 && gy > 0)
    else {
        return b;
    };
    let mut l = b[1] * gx + b[0];
    if let Some(x) = xcd.filter(|&x| x > 1 && ndim == 2) {
        l = xcd_remap(l, n, x as i64);
    }
    match panel {
        Some(p) if p > 0 => {
            let p = p as i64;
            let span = p.saturating_mul(gx);
            let panel = l / span;
            let r = l % span;
            let rows = p.min(gy - panel * p).max(1);
            [r / rows, panel * p + r % rows, b[2]]
        }
        _ => [l % gx, l / gx, b[2]],
    }
}

/// AMD's XCD remap of linear block id `l` among `n` blocks dealt round-robin to `x` dies: the
/// blocks die `l % x` receives take consecutive ids, dies `0 .. tall` holding `per` of them and
/// the rest `per - 1`.
pub fn xcd_remap(l: i64, n: i64, x: i64) -> i64 {
    if x <= 1 || n <= 0 {
        return l;
    }
    let per = (n + x - 1) / x;
    let tall = match n % x {
        0 => x,
        t => t,
    };
    let (die, local) = (l % x, l / x);
    if die < tall {
        die * per + local
    } else {
        tall * per + (die - tall) * (per - 1) + local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swizzle_walks_down_panels() {
        // 4 x 4 grid, panels of 2 rows: linear blocks 0,1,2,3 visit (0,0),(0,1),(1,0),(1,1).
        let g = [4, 4, 1];
        let at = |x, y| block_var_values([x, y, 0], g, 2, Some(2), None);
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
                let v = block_var_values([x, y, 0], g, 2, Some(2), None);
                assert!(v[0] < 3 && v[1] < 3);
                assert!(seen.insert(v));
            }
        }
    }

    #[test]
    fn xcd_remap_is_a_bijection() {
        for (gx, gy, x) in [
            (4, 4, 8),
            (3, 5, 8),
            (7, 3, 8),
            (2, 2, 8),
            (1, 1, 8),
            (5, 5, 4),
            (6, 4, 8),
            (9, 7, 3),
            (3, 1, 2),
        ] {
            let n = gx * gy;
            let mut seen = vec![false; n as usize];
            for l in 0..n {
                let r = xcd_remap(l, n, x);
                assert!((0..n).contains(&r), "{gx}x{gy}/{x}: {l} -> {r}");
                assert!(!seen[r as usize], "{gx}x{gy}/{x}: {r} twice");
                seen[r as usize] = true;
            }
            // Through the block indices too, with and without a panel swizzle.
            for panel in [None, Some(2)] {
                let mut seen = std::collections::HashSet::new();
                for y in 0..gy {
                    for xx in 0..gx {
                        let v = block_var_values([xx, y, 0], [gx, gy, 1], 2, panel, Some(x as u32));
                        assert!(v[0] < gx && v[1] < gy, "{v:?}");
                        assert!(seen.insert(v));
                    }
                }
            }
        }
        // n < x: the identity.
        assert!((0..6).all(|l| xcd_remap(l, 6, 8) == l));
        // 16 blocks on 8 dies: die 0 gets blocks 0 and 8, which become 0 and 1.
        assert_eq!(xcd_remap(0, 16, 8), 0);
        assert_eq!(xcd_remap(8, 16, 8), 1);
        assert_eq!(xcd_remap(1, 16, 8), 2);
        // 10 blocks on 4 dies: dies 0, 1 get 3 blocks, dies 2, 3 get 2.
        let got: Vec<i64> = (0..10).map(|l| xcd_remap(l, 10, 4)).collect();
        assert_eq!(got, vec![0, 3, 6, 8, 1, 4, 7, 9, 2, 5]);
        // Without a remap or swizzle the indices are the hardware's.
        assert_eq!(
            block_var_values([2, 1, 0], [3, 2, 1], 2, None, None),
            [2, 1, 0]
        );
    }
}
