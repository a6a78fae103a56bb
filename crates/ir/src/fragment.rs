//! Fragment layouts: how a block-level tile held in registers is spread over threads.
//!
//! A fragment layout is a thread-value (TV) layout in CuTe's sense whose codomain is factored by
//! logical dimension: every dimension of the tile is split into mixed-radix *digits*, and each
//! digit is a mode of either the thread index or the per-thread value index. Thread modes may
//! also be *replicated* (they select among threads holding the same elements, as after a row
//! reduction every thread of a row holds the row's result).
//!
//! This class is closed under the operations the compiler needs — projecting onto a subset of
//! dimensions (a row vector read inside a loop over a tile), reducing a dimension (row
//! reductions), building blocked layouts for element-wise loops, and the tensor-core atoms'
//! fragments — and both directions are closed-form: (thread, value) → coordinates for lowering
//! loops, and coordinates → value index for translating a fragment access, so no general
//! layout inverse is needed.

use std::fmt;

use crate::dtype::DType;
use crate::expr::Expr;

/// One digit of a layout: `extent` values, moving `dim` by `stride` per step, or replicated.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Mode {
    pub extent: i64,
    /// `Some((dim, stride))`: this digit moves coordinate `dim` by `stride`. `None`: a
    /// replica digit (only for thread modes): threads differing only here hold the same values.
    pub target: Option<(usize, i64)>,
}

impl Mode {
    pub fn along(extent: i64, dim: usize, stride: i64) -> Mode {
        Mode {
            extent,
            target: Some((dim, stride)),
        }
    }
    pub fn replica(extent: i64) -> Mode {
        Mode {
            extent,
            target: None,
        }
    }
}

/// A fragment layout over a tile of `shape`. Thread index = colexicographic over
/// `thread_modes` (the first mode varies fastest), value index likewise over `value_modes`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Fragment {
    pub shape: Vec<i64>,
    pub thread_modes: Vec<Mode>,
    pub value_modes: Vec<Mode>,
}

/// Why a fragment layout is not well-formed.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum FragmentError {
    #[error(
        "dimension {dim} (extent {extent}) is not split exactly into digits by the layout's modes"
    )]
    NotAPartition { dim: usize, extent: i64 },
    #[error("a mode targets dimension {dim} of a {rank}-d tile")]
    BadDim { dim: usize, rank: usize },
    #[error("value modes cannot be replicated")]
    ReplicatedValue,
    #[error("extent {0} is not positive")]
    BadExtent(i64),
}

fn product(modes: &[Mode]) -> i64 {
    modes.iter().map(|m| m.extent).product()
}

impl Fragment {
    pub fn threads(&self) -> i64 {
        product(&self.thread_modes)
    }
    pub fn local_size(&self) -> i64 {
        product(&self.value_modes)
    }
    /// How many threads hold each element.
    pub fn replication(&self) -> i64 {
        self.thread_modes
            .iter()
            .filter(|m| m.target.is_none())
            .map(|m| m.extent)
            .product()
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Every dimension must be exactly the mixed-radix number formed by the digits that
    /// target it (sorted by stride: the first stride 1, each next the product of the ones
    /// before); that is what makes coordinates → (thread, value) a function.
    pub fn validate(&self) -> Result<(), FragmentError> {
        for m in self.thread_modes.iter().chain(&self.value_modes) {
            if m.extent <= 0 {
                return Err(FragmentError::BadExtent(m.extent));
            }
            if let Some((d, _)) = m.target {
                if d >= self.rank() {
                    return Err(FragmentError::BadDim {
                        dim: d,
                        rank: self.rank(),
                    });
                }
            }
        }
        if self.value_modes.iter().any(|m| m.target.is_none()) {
            return Err(FragmentError::ReplicatedValue);
        }
        for (dim, &extent) in self.shape.iter().enumerate() {
            let mut digits: Vec<(i64, i64)> = self
                .thread_modes
                .iter()
                .chain(&self.value_modes)
                .filter_map(|m| match m.target {
                    Some((d, s)) if d == dim && m.extent > 1 => Some((s, m.extent)),
                    _ => None,
                })
                .collect();
            digits.sort();
            let mut expect = 1;
            for (s, e) in digits {
                if s != expect {
                    return Err(FragmentError::NotAPartition { dim, extent });
                }
                expect = s.checked_mul(e).ok_or(FragmentError::BadExtent(e))?;
            }
            if expect != extent {
                return Err(FragmentError::NotAPartition { dim, extent });
            }
        }
        Ok(())
    }

    /// A blocked layout for element-wise work on a row-major tile: each thread takes `vec`
    /// consecutive elements of the last dimension, neighbouring threads the next ones, and the
    /// rest of the tile repeats in the value index. Threads beyond the tile's size become
    /// replicas. `vec` is reduced until it divides the last dimension, and until every thread
    /// has elements where the tile allows: a replica repeats another thread's work, so a
    /// `[256]` tile on 256 threads takes one element a thread rather than 8 on 32 threads
    /// and 7 warps of replicas (the MoE gather's fragment ran so until session 22).
    pub fn blocked(shape: &[i64], threads: i64, vec: i64) -> Fragment {
        let rank = shape.len();
        let mut rest: Vec<i64> = shape.to_vec();
        // Stride already consumed along each dim.
        let mut used = vec![1i64; rank];
        let mut values = vec![];
        let mut thread_modes = vec![];
        if rank > 0 {
            let elems: i64 = shape.iter().product();
            let mut v = vec.max(1);
            while v > 1 && (rest[rank - 1] % v != 0 || elems / v < threads) {
                v /= 2;
            }
            if v > 1 {
                values.push(Mode::along(v, rank - 1, 1));
                rest[rank - 1] /= v;
                used[rank - 1] = v;
            }
        }
        let mut t_left = threads.max(1);
        for d in (0..rank).rev() {
            if t_left == 1 {
                break;
            }
            let g = gcd(t_left, rest[d]);
            if g > 1 {
                thread_modes.push(Mode::along(g, d, used[d]));
                used[d] *= g;
                rest[d] /= g;
                t_left /= g;
            }
        }
        if t_left > 1 {
            thread_modes.push(Mode::replica(t_left));
        }
        for d in (0..rank).rev() {
            if rest[d] > 1 {
                values.push(Mode::along(rest[d], d, used[d]));
            }
        }
        Fragment {
            shape: shape.to_vec(),
            thread_modes,
            value_modes: values,
        }
    }

    /// Decompose `index` into the digits of `modes` (colexicographic), as expressions.
    fn digits(index: &Expr, modes: &[Mode]) -> Vec<Expr> {
        let mut out = Vec::with_capacity(modes.len());
        let mut stride = 1i64;
        for m in modes {
            let d = if stride == 1 {
                index.clone()
            } else {
                index.floordiv(stride)
            };
            out.push(if m.extent == 1 {
                Expr::int(0)
            } else {
                d.floormod(m.extent)
            });
            stride *= m.extent;
        }
        out
    }

    /// The coordinates of value `v` held by thread `t`.
    pub fn coords(&self, t: &Expr, v: &Expr) -> Vec<Expr> {
        let mut coords: Vec<Expr> = vec![Expr::int(0); self.rank()];
        let td = Fragment::digits(t, &self.thread_modes);
        let vd = Fragment::digits(v, &self.value_modes);
        for (m, d) in self
            .thread_modes
            .iter()
            .zip(td)
            .chain(self.value_modes.iter().zip(vd))
        {
            if let Some((dim, s)) = m.target {
                if m.extent > 1 {
                    coords[dim] = coords[dim].clone() + d * s;
                }
            }
        }
        coords
    }

    /// The digit of `modes[k]` within coordinate values `coords`.
    fn digit_of(coords: &[Expr], m: &Mode) -> Expr {
        match m.target {
            Some((dim, s)) if m.extent > 1 => {
                let c = coords.get(dim).cloned().unwrap_or_else(|| Expr::int(0));
                let q = if s == 1 { c } else { c.floordiv(s) };
                q.floormod(m.extent)
            }
            _ => Expr::int(0),
        }
    }

    /// The value index at which the owning thread holds the element at `coords`.
    pub fn local_index(&self, coords: &[Expr]) -> Expr {
        let mut acc = Expr::int(0);
        let mut stride = 1i64;
        for m in &self.value_modes {
            if m.extent > 1 {
                acc = acc + Fragment::digit_of(coords, m) * stride;
            }
            stride *= m.extent;
        }
        acc
    }

    /// The thread holding the element at `coords` (replica `rep`, an expression in
    /// `0..replication()`).
    pub fn owner(&self, coords: &[Expr], rep: &Expr) -> Expr {
        let mut acc = Expr::int(0);
        let mut stride = 1i64;
        let mut rep_stride = 1i64;
        for m in &self.thread_modes {
            if m.extent > 1 {
                let d = match m.target {
                    Some(_) => Fragment::digit_of(coords, m),
                    None => {
                        let r = if rep_stride == 1 {
                            rep.clone()
                        } else {
                            rep.floordiv(rep_stride)
                        };
                        rep_stride *= m.extent;
                        r.floormod(m.extent)
                    }
                };
                acc = acc + d * stride;
            }
            stride *= m.extent;
        }
        acc
    }

    /// Which replica thread `t` is (0 for the first holder of each element).
    pub fn replica_index(&self, t: &Expr) -> Expr {
        let td = Fragment::digits(t, &self.thread_modes);
        let mut acc = Expr::int(0);
        let mut stride = 1i64;
        for (m, d) in self.thread_modes.iter().zip(td) {
            if m.target.is_none() && m.extent > 1 {
                acc = acc + d * stride;
                stride *= m.extent;
            }
        }
        acc
    }

    /// The layout of the result of reducing dimension `dim`: value digits along it vanish
    /// (they are folded inside the thread), thread digits along it become replicas (their
    /// threads combine by shuffles and end up holding the same result).
    pub fn reduce(&self, dim: usize) -> Fragment {
        let renum = |m: &Mode| -> Option<Mode> {
            match m.target {
                Some((d, _)) if d == dim => None,
                Some((d, s)) if d > dim => Some(Mode::along(m.extent, d - 1, s)),
                _ => Some(*m),
            }
        };
        let thread_modes = self
            .thread_modes
            .iter()
            .map(|m| renum(m).unwrap_or(Mode::replica(m.extent)))
            .collect();
        let value_modes = self.value_modes.iter().filter_map(renum).collect();
        let mut shape = self.shape.clone();
        if dim < shape.len() {
            shape.remove(dim);
        }
        Fragment {
            shape,
            thread_modes,
            value_modes,
        }
    }

    /// [`reduce`](Self::reduce) into a destination of `dst_rank` dims: a 1-d fragment reduced
    /// whole leaves no dims, and its `[1]` destination keeps one of extent 1 (no digit targets
    /// it).
    pub fn reduce_into(&self, dim: usize, dst_rank: usize) -> Fragment {
        let mut r = self.reduce(dim);
        if r.shape.is_empty() && dst_rank == 1 {
            r.shape = vec![1];
        }
        r
    }

    /// The layout a fragment indexed by `dims` of this layout's coordinates (in that order)
    /// must have to be read by the same threads: thread digits on other dims become replicas,
    /// value digits on other dims vanish.
    pub fn project(&self, dims: &[usize]) -> Fragment {
        let map = |m: &Mode| -> Option<Mode> {
            match m.target {
                Some((d, s)) => dims
                    .iter()
                    .position(|&x| x == d)
                    .map(|nd| Mode::along(m.extent, nd, s)),
                None => Some(*m),
            }
        };
        Fragment {
            shape: dims.iter().map(|&d| self.shape[d]).collect(),
            thread_modes: self
                .thread_modes
                .iter()
                .map(|m| map(m).unwrap_or(Mode::replica(m.extent)))
                .collect(),
            value_modes: self.value_modes.iter().filter_map(map).collect(),
        }
    }

    /// Thread digits along `dim`: (thread-index stride, extent) of each, for shuffles.
    pub fn thread_digits_along(&self, dim: usize) -> Vec<(i64, i64)> {
        let mut stride = 1;
        let mut out = vec![];
        for m in &self.thread_modes {
            if let Some((d, _)) = m.target {
                if d == dim && m.extent > 1 {
                    out.push((stride, m.extent));
                }
            }
            stride *= m.extent;
        }
        out
    }

    /// Modes of extent 1 dropped, and neighbours merged where one continues the other
    /// (adjacent replicas; `e1` steps of `s` then `e2` steps of `s·e1` along the same dim):
    /// the same function with the fewest modes.
    pub fn canonical_modes(modes: &[Mode]) -> Vec<Mode> {
        let mut out: Vec<Mode> = vec![];
        for m in modes.iter().filter(|m| m.extent > 1) {
            if let Some(last) = out.last_mut() {
                match (last.target, m.target) {
                    (None, None) => {
                        last.extent *= m.extent;
                        continue;
                    }
                    (Some((d1, s1)), Some((d2, s2))) if d1 == d2 && s2 == s1 * last.extent => {
                        last.extent *= m.extent;
                        continue;
                    }
                    _ => {}
                }
            }
            out.push(*m);
        }
        out
    }

    /// Same elements on the same threads at the same value indices.
    pub fn equivalent(&self, o: &Fragment) -> bool {
        self.shape == o.shape
            && Fragment::canonical_modes(&self.thread_modes)
                == Fragment::canonical_modes(&o.thread_modes)
            && Fragment::canonical_modes(&self.value_modes)
                == Fragment::canonical_modes(&o.value_modes)
    }

    /// [`to_cute`](Self::to_cute), with the tile's shape where `other` would print the same
    /// (layouts of tiles of different ranks can): for messages that set the two side by side.
    pub fn to_cute_beside(&self, other: &Fragment) -> String {
        let text = self.to_cute();
        if text == other.to_cute() && self.shape != other.shape {
            format!("{text} over a {:?} tile", self.shape)
        } else {
            text
        }
    }

    /// CuTe notation of the TV layout `(threads, values) -> colex index of the tile`.
    pub fn to_cute(&self) -> String {
        let colex: Vec<i64> = {
            let mut v = vec![1i64; self.rank()];
            for d in 1..self.rank() {
                v[d] = v[d - 1] * self.shape[d - 1];
            }
            v
        };
        let part = |modes: &[Mode]| -> (String, String) {
            let shapes: Vec<String> = modes.iter().map(|m| m.extent.to_string()).collect();
            let strides: Vec<String> = modes
                .iter()
                .map(|m| match m.target {
                    Some((d, s)) => (s * colex.get(d).copied().unwrap_or(1)).to_string(),
                    None => "0".to_string(),
                })
                .collect();
            let wrap = |v: Vec<String>| {
                if v.len() == 1 {
                    v[0].clone()
                } else {
                    format!("({})", v.join(","))
                }
            };
            (
                wrap(if shapes.is_empty() {
                    vec!["1".into()]
                } else {
                    shapes
                }),
                wrap(if strides.is_empty() {
                    vec!["0".into()]
                } else {
                    strides
                }),
            )
        };
        let (ts, td) = part(&self.thread_modes);
        let (vs, vd) = part(&self.value_modes);
        format!("({ts},{vs}):({td},{vd})")
    }

    /// Bytes a thread holds of a fragment of `dtype`.
    pub fn local_bytes(&self, dtype: DType) -> i64 {
        self.local_size() * dtype.bytes() as i64
    }
}

impl fmt::Display for Fragment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} over {:?}", self.to_cute(), self.shape)
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{eval_int, Value};
    use std::collections::HashMap;

    fn eval(
        e: &Expr,
        t: Option<(&crate::expr::Var, i64)>,
        v: Option<(&crate::expr::Var, i64)>,
    ) -> i64 {
        let mut env = HashMap::new();
        if let Some((var, x)) = t {
            env.insert(var.id(), Value::Int(x));
        }
        if let Some((var, x)) = v {
            env.insert(var.id(), Value::Int(x));
        }
        eval_int(e, &env).expect("evaluates")
    }

    /// coords(t, v) visits every element exactly `replication` times, and local_index and
    /// owner invert it.
    fn check_bijection(f: &Fragment) {
        f.validate().expect("valid");
        let tv = crate::expr::Var::new("t", DType::I32);
        let vv = crate::expr::Var::new("v", DType::I32);
        let coords = f.coords(&tv.expr(), &vv.expr());
        let numel: i64 = f.shape.iter().product();
        let mut seen = vec![0i64; numel as usize];
        for t in 0..f.threads() {
            for v in 0..f.local_size() {
                let c: Vec<i64> = coords
                    .iter()
                    .map(|e| eval(e, Some((&tv, t)), Some((&vv, v))))
                    .collect();
                let mut flat = 0;
                for (d, x) in c.iter().enumerate() {
                    assert!(*x >= 0 && *x < f.shape[d], "{f}: coord {c:?}");
                    flat = flat * f.shape[d] + x;
                }
                seen[flat as usize] += 1;
                let ce: Vec<Expr> = c.iter().map(|&x| Expr::int(x)).collect();
                assert_eq!(
                    eval(&f.local_index(&ce), None, None),
                    v,
                    "{f}: local index of {c:?}"
                );
                let rep = eval(&f.replica_index(&Expr::int(t)), None, None);
                assert_eq!(
                    eval(&f.owner(&ce, &Expr::int(rep)), None, None),
                    t,
                    "{f}: owner of {c:?}"
                );
            }
        }
        assert!(
            seen.iter().all(|&n| n == f.replication()),
            "{f}: coverage {seen:?}"
        );
    }

    #[test]
    fn blocked_layouts_are_bijective() {
        for (shape, threads, vec) in [
            (vec![4, 64], 128, 4),
            (vec![1, 2048], 128, 8),
            (vec![64, 64], 128, 4),
            (vec![2, 3], 32, 4),
            (vec![128], 256, 8),
            (vec![16, 100], 64, 8),
        ] {
            let f = Fragment::blocked(&shape, threads, vec);
            assert_eq!(f.threads(), threads, "{f}");
            check_bijection(&f);
        }
    }

    /// Threads get elements before vectors get wide: replicas repeat work.
    #[test]
    fn blocked_layouts_spread_over_every_thread_before_widening() {
        // (shape, threads, vec) → (elements a thread, replicas)
        for (shape, threads, vec, local, replicas) in [
            (vec![256], 256, 8, 1, 1),
            (vec![512], 256, 8, 2, 1),
            (vec![2048], 256, 8, 8, 1),
            (vec![1, 1024], 256, 4, 4, 1),
            (vec![64], 256, 8, 1, 4),
            (vec![32, 32], 128, 4, 8, 1),
        ] {
            let f = Fragment::blocked(&shape, threads, vec);
            assert_eq!((f.local_size(), f.replication()), (local, replicas), "{f}");
            check_bijection(&f);
        }
    }

    #[test]
    fn reduce_and_project_keep_owners() {
        let f = Fragment::blocked(&[8, 64], 128, 4);
        let r = f.reduce(1);
        check_bijection(&r);
        assert_eq!(r.shape, vec![8]);
        assert_eq!(r.replication(), 16);
        let p = f.project(&[0]);
        assert!(p.equivalent(&r), "{p} vs {r}");
        // The owner of row i in the reduced layout is a thread that owns (i, j) in f.
        let tv = crate::expr::Var::new("t", DType::I32);
        for t in 0..128 {
            let c = f.coords(&Expr::int(t), &Expr::int(0));
            let i = eval(&c[0], None, None);
            let rc = r.coords(&tv.expr(), &Expr::int(0));
            assert_eq!(eval(&rc[0], Some((&tv, t)), None), i);
        }
    }

    #[test]
    fn mma_accumulator_layout_is_valid() {
        // m16n8 C fragment of one warp: lane = t (4, col stride 2) + g (8, row stride 1);
        // values i&1 (col stride 1), i>>1 (row stride 8).
        let f = Fragment {
            shape: vec![16, 8],
            thread_modes: vec![Mode::along(4, 1, 2), Mode::along(8, 0, 1)],
            value_modes: vec![Mode::along(2, 1, 1), Mode::along(2, 0, 8)],
        };
        check_bijection(&f);
        assert_eq!(f.to_cute(), "((4,8),(2,2)):((32,1),(16,8))");
        assert_eq!(f.thread_digits_along(1), vec![(1, 4)]);
    }

    #[test]
    fn invalid_layouts_are_rejected() {
        let f = Fragment {
            shape: vec![16],
            thread_modes: vec![Mode::along(4, 0, 1)],
            value_modes: vec![Mode::along(2, 0, 8)],
        };
        assert!(matches!(
            f.validate(),
            Err(FragmentError::NotAPartition { .. })
        ));
    }
}
#[cfg(test)]
mod canon_tests {
    use super::*;

    #[test]
    fn a_1d_fragment_reduced_whole_keeps_a_unit_dim_for_its_destination() {
        let f = Fragment {
            shape: vec![64],
            thread_modes: vec![Mode::along(64, 0, 1)],
            value_modes: vec![],
        };
        let bare = f.reduce(0);
        let unit = f.reduce_into(0, 1);
        assert!(bare.shape.is_empty());
        assert_eq!(unit.shape, vec![1]);
        unit.validate().expect("well-formed");
        // Both print `(64,1):(0,0)`; set side by side, the tiles tell them apart.
        assert_eq!(bare.to_cute(), unit.to_cute());
        assert_eq!(
            unit.to_cute_beside(&bare),
            format!("{} over a [1] tile", unit.to_cute())
        );
        assert_eq!(unit.to_cute_beside(&unit), unit.to_cute());
    }

    #[test]
    fn equivalent_up_to_merged_modes() {
        let a = Fragment {
            shape: vec![16],
            thread_modes: vec![Mode::along(4, 0, 4), Mode::replica(8), Mode::replica(2)],
            value_modes: vec![Mode::along(4, 0, 1)],
        };
        let b = Fragment {
            shape: vec![16],
            thread_modes: vec![Mode::along(4, 0, 4), Mode::replica(4), Mode::replica(4)],
            value_modes: vec![
                Mode::along(2, 0, 1),
                Mode::along(2, 0, 2),
                Mode::along(1, 0, 16),
            ],
        };
        assert!(a.equivalent(&b));
        let c = Fragment {
            shape: vec![16],
            thread_modes: vec![Mode::replica(16), Mode::along(4, 0, 4)],
            value_modes: vec![Mode::along(4, 0, 1)],
        };
        assert!(!a.equivalent(&c));
    }
}
