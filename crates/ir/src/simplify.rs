//! The simplifier: constant folding, algebraic identities, linear-form normalization of index
//! arithmetic, division and modulo by constants, and interval bounds that prove comparisons (so
//! the tail checks of full tiles fold away).

use std::collections::HashMap;

use crate::dtype::DType;
use crate::eval::{self, floordiv_i, Value};
use crate::expr::{BinOp, CmpOp, Expr, ExprKind, UnOp, Var};
use crate::intrinsic::Intrinsic;

/// An inclusive integer interval; `i64::MIN`/`i64::MAX` stand for unbounded ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Interval {
    pub lo: i64,
    pub hi: i64,
}

impl Interval {
    pub const FULL: Interval = Interval {
        lo: i64::MIN,
        hi: i64::MAX,
    };
    pub fn point(v: i64) -> Interval {
        Interval { lo: v, hi: v }
    }
    pub fn new(lo: i64, hi: i64) -> Interval {
        Interval { lo, hi }
    }
    pub fn of_dtype(dt: DType) -> Interval {
        match dt.int_range() {
            Some((lo, hi)) => Interval::new(clamp128(lo), clamp128(hi)),
            None if dt.is_bool() => Interval::new(0, 1),
            None => Interval::FULL,
        }
    }
    pub fn is_point(&self) -> Option<i64> {
        (self.lo == self.hi && self.lo != i64::MIN && self.lo != i64::MAX).then_some(self.lo)
    }
    fn union(self, o: Interval) -> Interval {
        Interval::new(self.lo.min(o.lo), self.hi.max(o.hi))
    }
    fn intersect(self, o: Interval) -> Interval {
        Interval::new(self.lo.max(o.lo), self.hi.min(o.hi))
    }
}

fn clamp128(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn inf(v: i64) -> bool {
    v == i64::MIN || v == i64::MAX
}

fn sat_add(a: i64, b: i64) -> i64 {
    if a == i64::MIN || b == i64::MIN {
        if a == i64::MAX || b == i64::MAX {
            return 0;
        }
        return i64::MIN;
    }
    if a == i64::MAX || b == i64::MAX {
        return i64::MAX;
    }
    clamp128(a as i128 + b as i128)
}

fn sat_neg(a: i64) -> i64 {
    match a {
        i64::MIN => i64::MAX,
        i64::MAX => i64::MIN,
        v => -v,
    }
}

fn sat_mul(a: i64, b: i64) -> i64 {
    if a == 0 || b == 0 {
        return 0;
    }
    if inf(a) || inf(b) {
        return if (a > 0) == (b > 0) {
            i64::MAX
        } else {
            i64::MIN
        };
    }
    clamp128(a as i128 * b as i128)
}

fn div_floor_bound(a: i64, c: i64) -> i64 {
    if inf(a) {
        if c > 0 {
            a
        } else {
            sat_neg(a)
        }
    } else {
        floordiv_i(a, c)
    }
}

/// A sum of `coef * atom` terms plus a constant; atoms compare structurally.
#[derive(Clone, Debug)]
struct Linear {
    terms: Vec<(Expr, i64)>,
    c: i64,
}

impl Linear {
    fn constant(c: i64) -> Linear {
        Linear { terms: vec![], c }
    }
    fn atom(e: Expr) -> Linear {
        Linear {
            terms: vec![(e, 1)],
            c: 0,
        }
    }
    fn add(mut self, o: Linear, sign: i64) -> Option<Linear> {
        for (e, k) in o.terms {
            let k = k.checked_mul(sign)?;
            match self.terms.iter_mut().find(|(x, _)| *x == e) {
                Some(t) => t.1 = t.1.checked_add(k)?,
                None => self.terms.push((e, k)),
            }
        }
        self.c = self.c.checked_add(o.c.checked_mul(sign)?)?;
        self.terms.retain(|(_, k)| *k != 0);
        Some(self)
    }
    fn scale(mut self, s: i64) -> Option<Linear> {
        if s == 0 {
            return Some(Linear::constant(0));
        }
        for t in &mut self.terms {
            t.1 = t.1.checked_mul(s)?;
        }
        self.c = self.c.checked_mul(s)?;
        Some(self)
    }
    fn of(e: &Expr) -> Option<Linear> {
        match e.kind() {
            ExprKind::Int(v) => Some(Linear::constant(*v)),
            ExprKind::Bin(BinOp::Add, a, b) => Linear::of(a)?.add(Linear::of(b)?, 1),
            ExprKind::Bin(BinOp::Sub, a, b) => Linear::of(a)?.add(Linear::of(b)?, -1),
            ExprKind::Bin(BinOp::Mul, a, b) => match (a.as_int(), b.as_int()) {
                (_, Some(k)) => Linear::of(a)?.scale(k),
                (Some(k), _) => Linear::of(b)?.scale(k),
                _ => Some(Linear::atom(e.clone())),
            },
            ExprKind::Unary(UnOp::Neg, a) => Linear::of(a)?.scale(-1),
            _ => Some(Linear::atom(e.clone())),
        }
    }
    /// `(x %% c)·k + (x // c)·(c·k)` is `x·k` (floor or, for non-negative x, C semantics).
    fn recombine(mut self, an: &Analyzer) -> Linear {
        let mut changed = true;
        while changed {
            changed = false;
            'outer: for i in 0..self.terms.len() {
                let (mod_e, k) = (self.terms[i].0.clone(), self.terms[i].1);
                let (x, c, floor) = match mod_e.kind() {
                    ExprKind::Bin(BinOp::FloorMod, x, c) => (x.clone(), c.as_int(), true),
                    ExprKind::Bin(BinOp::Mod, x, c) => (x.clone(), c.as_int(), false),
                    _ => continue,
                };
                let Some(c) = c else { continue };
                if c <= 0 || (!floor && an.bound(&x).lo < 0) {
                    continue;
                }
                for j in 0..self.terms.len() {
                    let (div_e, kd) = (&self.terms[j].0, self.terms[j].1);
                    let matches = match div_e.kind() {
                        ExprKind::Bin(BinOp::FloorDiv, y, d) => {
                            floor && *y == x && d.as_int() == Some(c)
                        }
                        ExprKind::Bin(BinOp::Div, y, d) => {
                            (!floor || an.bound(&x).lo >= 0) && *y == x && d.as_int() == Some(c)
                        }
                        _ => false,
                    };
                    if matches && Some(kd) == k.checked_mul(c) {
                        let (a, b) = if i > j { (i, j) } else { (j, i) };
                        self.terms.remove(a);
                        self.terms.remove(b);
                        match Linear::of(&x).and_then(|lx| lx.scale(k)) {
                            Some(lx) => match self.clone().add(lx, 1) {
                                Some(n) => self = n,
                                None => return self,
                            },
                            None => return self,
                        }
                        changed = true;
                        break 'outer;
                    }
                }
            }
        }
        self
    }

    fn build(&self, dt: DType) -> Expr {
        let term = |e: &Expr, k: i64| -> Expr {
            if k == 1 {
                e.clone()
            } else {
                Expr::new(
                    ExprKind::Bin(BinOp::Mul, e.clone(), Expr::int_of(k, dt)),
                    dt,
                )
            }
        };
        let mut acc: Option<Expr> = None;
        for (e, k) in self.terms.iter().filter(|t| t.1 > 0) {
            let t = term(e, *k);
            acc = Some(match acc {
                None => t,
                Some(a) => Expr::new(ExprKind::Bin(BinOp::Add, a, t), dt),
            });
        }
        for (e, k) in self.terms.iter().filter(|t| t.1 < 0) {
            acc = Some(match acc {
                None => term(e, *k),
                Some(a) => Expr::new(ExprKind::Bin(BinOp::Sub, a, term(e, -*k)), dt),
            });
        }
        match acc {
            None => Expr::int_of(self.c, dt),
            Some(a) if self.c > 0 => {
                Expr::new(ExprKind::Bin(BinOp::Add, a, Expr::int_of(self.c, dt)), dt)
            }
            Some(a) if self.c < 0 && self.c != i64::MIN => {
                Expr::new(ExprKind::Bin(BinOp::Sub, a, Expr::int_of(-self.c, dt)), dt)
            }
            Some(a) if self.c < 0 => {
                Expr::new(ExprKind::Bin(BinOp::Add, a, Expr::int_of(self.c, dt)), dt)
            }
            Some(a) => a,
        }
    }
}

/// Holds what is known about variables (their ranges) and simplifies under that knowledge.
#[derive(Clone, Default, Debug)]
pub struct Analyzer {
    bounds: HashMap<u64, Interval>,
    /// Threads per block, bounding `thread_idx()`.
    pub threads: Option<u32>,
    /// Known strict inequalities `lhs < rhs` (a block index below its grid extent).
    facts: Vec<(Expr, Expr)>,
    /// Variables known to be multiples of a constant (sizes the launch guarantees).
    multiples: HashMap<u64, i64>,
}

impl Analyzer {
    pub fn new() -> Analyzer {
        Analyzer::default()
    }

    /// Record that `v` lies in `[lo, hi]`.
    pub fn bind(&mut self, v: &Var, lo: i64, hi: i64) {
        let iv = Interval::new(lo, hi);
        let iv = match self.bounds.get(&v.id()) {
            Some(old) => old.intersect(iv),
            None => iv,
        };
        self.bounds.insert(v.id(), iv);
    }

    /// Record that `v` ranges over `min .. min + extent` (a loop).
    pub fn bind_loop(&mut self, v: &Var, min: &Expr, extent: &Expr) {
        let lo = self.bound(min).lo;
        let hi = sat_add(sat_add(self.bound(min).hi, self.bound(extent).hi), -1);
        self.bounds.insert(v.id(), Interval::new(lo, hi));
    }

    /// Record that `v` is always a multiple of `m`.
    pub fn add_multiple(&mut self, v: &Var, m: i64) {
        if m > 1 {
            self.multiples.insert(v.id(), m);
        }
    }

    /// A number `e` is known to be a multiple of (1 when nothing is known).
    fn known_multiple(&self, e: &Expr) -> i64 {
        match e.kind() {
            ExprKind::Var(v) => self.multiples.get(&v.id()).copied().unwrap_or(1),
            ExprKind::Int(c) => c.abs().max(1),
            ExprKind::Bin(BinOp::Mul, a, b) => self
                .known_multiple(a)
                .saturating_mul(self.known_multiple(b)),
            _ => 1,
        }
    }

    /// Record that `lhs < rhs` holds.
    pub fn add_fact_lt(&mut self, lhs: Expr, rhs: Expr) {
        self.facts.push((lhs, rhs));
    }

    pub fn forget(&mut self, v: &Var) {
        self.bounds.remove(&v.id());
    }

    pub fn bound_of_var(&self, v: &Var) -> Interval {
        self.bounds
            .get(&v.id())
            .copied()
            .unwrap_or_else(|| Interval::of_dtype(v.dtype()))
    }

    /// An interval containing every value `e` can take (integer and bool expressions).
    pub fn bound(&self, e: &Expr) -> Interval {
        let dt = e.dtype();
        if !(dt.is_int() || dt.is_bool()) {
            return Interval::FULL;
        }
        let full = Interval::of_dtype(dt);
        let r = match e.kind() {
            ExprKind::Int(v) => Interval::point(*v),
            ExprKind::Bool(b) => Interval::point(*b as i64),
            ExprKind::Var(v) => self.bound_of_var(v),
            ExprKind::Bin(op, a, b) => {
                let (x, y) = (self.bound(a), self.bound(b));
                match op {
                    BinOp::Add => Interval::new(sat_add(x.lo, y.lo), sat_add(x.hi, y.hi)),
                    BinOp::Sub => {
                        Interval::new(sat_add(x.lo, sat_neg(y.hi)), sat_add(x.hi, sat_neg(y.lo)))
                    }
                    BinOp::Mul => {
                        let c = [
                            sat_mul(x.lo, y.lo),
                            sat_mul(x.lo, y.hi),
                            sat_mul(x.hi, y.lo),
                            sat_mul(x.hi, y.hi),
                        ];
                        Interval::new(
                            *c.iter().min().unwrap_or(&i64::MIN),
                            *c.iter().max().unwrap_or(&i64::MAX),
                        )
                    }
                    BinOp::FloorDiv | BinOp::Div => match y.is_point() {
                        Some(c) if c > 0 && (*op == BinOp::FloorDiv || x.lo >= 0) => {
                            Interval::new(div_floor_bound(x.lo, c), div_floor_bound(x.hi, c))
                        }
                        _ => full,
                    },
                    BinOp::FloorMod | BinOp::Mod => match y.is_point() {
                        Some(c) if c > 0 && x.lo >= 0 && x.hi < c => x,
                        Some(c) if c > 0 && x.lo >= 0 => Interval::new(0, c - 1),
                        Some(c) if c > 0 && *op == BinOp::FloorMod => Interval::new(0, c - 1),
                        _ => full,
                    },
                    BinOp::Min => Interval::new(x.lo.min(y.lo), x.hi.min(y.hi)),
                    BinOp::Max => Interval::new(x.lo.max(y.lo), x.hi.max(y.hi)),
                    BinOp::BitAnd if x.lo >= 0 || y.lo >= 0 => {
                        let hi = match (x.lo >= 0, y.lo >= 0) {
                            (true, true) => x.hi.min(y.hi),
                            (true, false) => x.hi,
                            _ => y.hi,
                        };
                        Interval::new(0, hi)
                    }
                    // Of non-negative operands: non-negative, and below the next power of two
                    // above both (no bit past the highest either has).
                    BinOp::BitXor | BinOp::BitOr if x.lo >= 0 && y.lo >= 0 => {
                        let top = x.hi.max(y.hi);
                        if inf(top) || top >= (1 << 62) {
                            Interval::new(0, top)
                        } else {
                            Interval::new(0, ((top + 1) as u64).next_power_of_two() as i64 - 1)
                        }
                    }
                    BinOp::Shr if x.lo >= 0 => match y.is_point() {
                        Some(c) if (0..63).contains(&c) => {
                            Interval::new(x.lo >> c, if inf(x.hi) { x.hi } else { x.hi >> c })
                        }
                        _ => Interval::new(0, x.hi),
                    },
                    BinOp::Shl => match y.is_point() {
                        Some(c) if (0..62).contains(&c) => {
                            Interval::new(sat_mul(x.lo, 1 << c), sat_mul(x.hi, 1 << c))
                        }
                        _ => full,
                    },
                    _ => full,
                }
            }
            ExprKind::Unary(UnOp::Neg, a) => {
                let x = self.bound(a);
                Interval::new(sat_neg(x.hi), sat_neg(x.lo))
            }
            ExprKind::Unary(UnOp::Abs, a) => {
                let x = self.bound(a);
                if x.lo >= 0 {
                    x
                } else if x.hi <= 0 {
                    Interval::new(sat_neg(x.hi), sat_neg(x.lo))
                } else {
                    Interval::new(0, sat_neg(x.lo).max(x.hi))
                }
            }
            ExprKind::Select(_, a, b) | ExprKind::IfThenElse(_, a, b) => {
                self.bound(a).union(self.bound(b))
            }
            ExprKind::Cast(a) if a.dtype().is_int() || a.dtype().is_bool() => {
                let x = self.bound(a);
                if x.lo >= full.lo && x.hi <= full.hi {
                    x
                } else {
                    full
                }
            }
            ExprKind::Cmp(..) | ExprKind::And(..) | ExprKind::Or(..) => Interval::new(0, 1),
            ExprKind::Unary(UnOp::Not, _) => Interval::new(0, 1),
            ExprKind::Call(Intrinsic::ThreadIdx, _) => {
                Interval::new(0, self.threads.map(|t| t as i64 - 1).unwrap_or(1023))
            }
            _ => full,
        };
        r.intersect(full)
    }

    /// Decide a condition if the known bounds allow: Some(true), Some(false), or None.
    pub fn prove(&self, cond: &Expr) -> Option<bool> {
        let s = self.simplify(cond);
        s.as_bool().or_else(|| match s.kind() {
            ExprKind::Int(v) => Some(*v != 0),
            _ => None,
        })
    }

    pub fn can_prove(&self, cond: &Expr) -> bool {
        self.prove(cond) == Some(true)
    }

    pub fn simplify(&self, e: &Expr) -> Expr {
        let e = e.map_children(&mut |c| self.simplify(c));
        self.rewrite(e)
    }

    fn fold(&self, e: &Expr) -> Option<Expr> {
        if matches!(e.kind(), ExprKind::Load(..) | ExprKind::Call(..)) {
            return None;
        }
        if !e.children().iter().all(|c| c.is_const()) {
            return None;
        }
        let v = eval::eval(e, &HashMap::new()).ok()?;
        Some(v.to_expr(e.dtype()))
    }

    fn rewrite(&self, e: Expr) -> Expr {
        if let Some(c) = self.fold(&e) {
            return c;
        }
        let dt = e.dtype();
        if dt.is_int() {
            if let Some(p) = self.bound(&e).is_point() {
                if !matches!(e.kind(), ExprKind::Call(..)) && !e.has_load() {
                    return Expr::int_of(p, dt);
                }
            }
        }
        match e.kind() {
            ExprKind::Bin(BinOp::Add | BinOp::Sub | BinOp::Mul, ..)
            | ExprKind::Unary(UnOp::Neg, _)
                if dt.is_int() =>
            {
                match Linear::of(&e) {
                    Some(l) => l.recombine(self).build(dt),
                    None => e,
                }
            }
            ExprKind::Bin(
                op @ (BinOp::FloorDiv | BinOp::FloorMod | BinOp::Div | BinOp::Mod),
                a,
                b,
            ) if dt.is_int() => match b.as_int() {
                Some(c) if c > 0 => self.div_mod(*op, a, c, dt).unwrap_or(e),
                _ => e,
            },
            ExprKind::Bin(op, a, b) if dt.is_float() => self.float_identity(*op, a, b).unwrap_or(e),
            ExprKind::Bin(BinOp::Min, a, b) => {
                let (x, y) = (self.bound(a), self.bound(b));
                if a == b || (dt.is_int() && x.hi <= y.lo) {
                    a.clone()
                } else if dt.is_int() && y.hi <= x.lo {
                    b.clone()
                } else {
                    e
                }
            }
            ExprKind::Bin(BinOp::Max, a, b) => {
                let (x, y) = (self.bound(a), self.bound(b));
                if a == b || (dt.is_int() && x.lo >= y.hi) {
                    a.clone()
                } else if dt.is_int() && y.lo >= x.hi {
                    b.clone()
                } else {
                    e
                }
            }
            ExprKind::Bin(BinOp::BitXor, x, moved) if dt.is_int() => {
                self.split_swizzle(x, moved, dt).unwrap_or(e)
            }
            ExprKind::Bin(BinOp::BitAnd, a, b)
                if b.as_int() == Some(0) || a.as_int() == Some(0) =>
            {
                Expr::int_of(0, dt)
            }
            ExprKind::Bin(BinOp::Shl | BinOp::Shr | BinOp::BitOr | BinOp::BitXor, a, b)
                if b.as_int() == Some(0) =>
            {
                a.clone()
            }
            ExprKind::Cmp(op, a, b) => self.compare(*op, a, b).unwrap_or(e),
            ExprKind::And(a, b) => match (a.as_bool(), b.as_bool()) {
                (Some(false), _) | (_, Some(false)) => Expr::bool(false),
                (Some(true), _) => b.clone(),
                (_, Some(true)) => a.clone(),
                _ if a == b => a.clone(),
                _ => e,
            },
            ExprKind::Or(a, b) => match (a.as_bool(), b.as_bool()) {
                (Some(true), _) | (_, Some(true)) => Expr::bool(true),
                (Some(false), _) => b.clone(),
                (_, Some(false)) => a.clone(),
                _ if a == b => a.clone(),
                _ => e,
            },
            ExprKind::Unary(UnOp::Not, a) => match a.kind() {
                ExprKind::Cmp(op, x, y) => {
                    let neg = match op {
                        CmpOp::Eq => CmpOp::Ne,
                        CmpOp::Ne => CmpOp::Eq,
                        CmpOp::Lt => CmpOp::Ge,
                        CmpOp::Le => CmpOp::Gt,
                        CmpOp::Gt => CmpOp::Le,
                        CmpOp::Ge => CmpOp::Lt,
                    };
                    // Negating a float comparison is wrong for NaN: keep it.
                    if x.dtype().is_float() {
                        e
                    } else {
                        Expr::new(ExprKind::Cmp(neg, x.clone(), y.clone()), DType::Bool)
                    }
                }
                ExprKind::Unary(UnOp::Not, x) if x.dtype().is_bool() => x.clone(),
                _ => e,
            },
            ExprKind::Select(c, a, b) | ExprKind::IfThenElse(c, a, b) => match c.as_bool() {
                Some(true) => a.clone(),
                Some(false) => b.clone(),
                None if a == b => a.clone(),
                None => e,
            },
            ExprKind::Cast(a) => match a.kind() {
                // Widening an integer and narrowing it back is the identity.
                ExprKind::Cast(inner)
                    if inner.dtype() == dt
                        && dt.is_int()
                        && a.dtype().is_int()
                        && a.dtype().bytes() >= dt.bytes() =>
                {
                    inner.clone()
                }
                _ => e,
            },
            _ => e,
        }
    }

    fn float_identity(&self, op: BinOp, a: &Expr, b: &Expr) -> Option<Expr> {
        let bv = b.as_float();
        let av = a.as_float();
        match op {
            BinOp::Mul if bv == Some(1.0) => Some(a.clone()),
            BinOp::Mul if av == Some(1.0) => Some(b.clone()),
            BinOp::Div if bv == Some(1.0) => Some(a.clone()),
            BinOp::Add | BinOp::Sub if bv == Some(0.0) => Some(a.clone()),
            BinOp::Add if av == Some(0.0) => Some(b.clone()),
            _ => None,
        }
    }

    /// floordiv/floormod (and C division when the dividend is non-negative) by a positive
    /// constant: pull out the terms the divisor divides, fold what bounds decide.
    fn div_mod(&self, op: BinOp, a: &Expr, c: i64, dt: DType) -> Option<Expr> {
        let a_lo = self.bound(a).lo;
        let is_div = matches!(op, BinOp::FloorDiv | BinOp::Div);
        let floor_ok = matches!(op, BinOp::FloorDiv | BinOp::FloorMod) || a_lo >= 0;
        if c == 1 {
            return Some(if is_div {
                a.clone()
            } else {
                Expr::int_of(0, dt)
            });
        }
        if !floor_ok {
            return None;
        }
        // Nested: (x // p) // q == x // (p*q), (x %% p) %% q == x %% q when q | p.
        if let ExprKind::Bin(inner @ (BinOp::FloorDiv | BinOp::Div), x, p) = a.kind() {
            if let (true, Some(p)) = (is_div, p.as_int()) {
                if p > 0 && (*inner == BinOp::FloorDiv || self.bound(x).lo >= 0) {
                    let pc = p.checked_mul(c)?;
                    let n = Expr::new(
                        ExprKind::Bin(BinOp::FloorDiv, x.clone(), Expr::int_of(pc, dt)),
                        dt,
                    );
                    return Some(self.rewrite(n));
                }
            }
        }
        if let ExprKind::Bin(BinOp::FloorMod | BinOp::Mod, x, p) = a.kind() {
            if let (false, Some(p)) = (is_div, p.as_int()) {
                if p > 0 && p % c == 0 && self.bound(x).lo >= 0 {
                    let n = Expr::new(
                        ExprKind::Bin(BinOp::FloorMod, x.clone(), Expr::int_of(c, dt)),
                        dt,
                    );
                    return Some(self.rewrite(n));
                }
            }
        }
        let lin = Linear::of(a)?;
        // Divide out a common factor: (8x + 16) // 32 == (x + 2) // 4, and
        // (8x + 16) %% 32 == 8 · ((x + 2) %% 4).
        let g = lin
            .terms
            .iter()
            .fold(gcd_i(lin.c, c), |g, (_, k)| gcd_i(g, *k));
        if g > 1 {
            let reduced = Linear {
                terms: lin.terms.iter().map(|(t, k)| (t.clone(), k / g)).collect(),
                c: lin.c / g,
            };
            let inner = reduced.build(dt);
            let op2 = if is_div {
                BinOp::FloorDiv
            } else {
                BinOp::FloorMod
            };
            let r = self.rewrite(Expr::new(
                ExprKind::Bin(op2, inner, Expr::int_of(c / g, dt)),
                dt,
            ));
            return Some(if is_div {
                r
            } else {
                self.rewrite(Expr::new(
                    ExprKind::Bin(BinOp::Mul, r, Expr::int_of(g, dt)),
                    dt,
                ))
            });
        }
        let mut whole = Linear::constant(floordiv_i(lin.c, c));
        let mut rest = Linear::constant(lin.c - floordiv_i(lin.c, c) * c);
        for (t, k) in &lin.terms {
            if k % c == 0 {
                whole.terms.push((t.clone(), k / c));
            } else if !is_div && (k * self.known_multiple(t)) % c == 0 {
                // A multiple of c: nothing to add to the remainder.
            } else {
                rest.terms.push((t.clone(), *k));
            }
        }
        let rest_e = rest.build(dt);
        let rb = self.bound(&rest_e);
        let in_range = rb.lo >= 0 && rb.hi < c;
        if !in_range {
            if let Some(e) = self.split_scaled_term(is_div, &whole, &rest, c, dt) {
                return Some(e);
            }
        }
        let nonneg = rb.lo >= 0;
        if is_div {
            let q = if in_range {
                None
            } else if rest.terms.is_empty() {
                whole.c += floordiv_i(rest.c, c);
                None
            } else {
                let op = if nonneg { BinOp::Div } else { BinOp::FloorDiv };
                Some(Expr::new(
                    ExprKind::Bin(op, rest_e, Expr::int_of(c, dt)),
                    dt,
                ))
            };
            let mut l = whole;
            if let Some(q) = q {
                l = l.add(Linear::atom(q), 1)?;
            }
            Some(l.build(dt))
        } else if in_range {
            Some(rest_e)
        } else {
            let op = if nonneg { BinOp::Mod } else { BinOp::FloorMod };
            Some(Expr::new(
                ExprKind::Bin(op, rest_e, Expr::int_of(c, dt)),
                dt,
            ))
        }
    }

    /// The bits `k·t` can set: from `k`'s lowest set bit up to the highest bit of its maximum.
    fn term_bits(&self, t: &Expr, k: i64) -> Option<u64> {
        let b = self.bound(t);
        if k <= 0 || b.lo < 0 || inf(b.hi) {
            return None;
        }
        let hi = u64::try_from(k.checked_mul(b.hi)?).ok()?;
        let top = 64 - hi.leading_zeros();
        let all = if top >= 64 {
            u64::MAX
        } else {
            (1u64 << top) - 1
        };
        Some(all & !((1u64 << k.trailing_zeros()) - 1))
    }

    /// A swizzled shared-memory offset `x ^ ((x & Y) >> S)` where `x` is a sum of terms with
    /// disjoint bits (then the sum is an OR, and the swizzle, being linear over XOR, distributes):
    /// split it into `swz(thread part) ^ swz(loop and constant part)`. The thread part is then
    /// loop-invariant — one register — and the rest a constant per unrolled step, instead of
    /// one live address register per ldmatrix (what kept 32-row attention tiles from fitting).
    fn split_swizzle(&self, x: &Expr, moved: &Expr, dt: DType) -> Option<Expr> {
        let ExprKind::Bin(BinOp::Shr, masked, sh) = moved.kind() else {
            return None;
        };
        let ExprKind::Bin(BinOp::BitAnd, x2, y) = masked.kind() else {
            return None;
        };
        let (y, sh) = (y.as_int()?, sh.as_int()?);
        if x2 != x || y <= 0 || !(0..63).contains(&sh) {
            return None;
        }
        let lin = Linear::of(x)?;
        if lin.c < 0 {
            return None;
        }
        let mut seen = lin.c as u64;
        let mut thread = Linear::constant(0);
        let mut thread_bits = 0u64;
        // The other terms, with the bits each can set.
        let mut rest_terms: Vec<(Expr, i64, u64)> = vec![];
        for (t, k) in &lin.terms {
            let bits = self.term_bits(t, *k)?;
            if bits & seen != 0 {
                return None;
            }
            seen |= bits;
            let uses_thread =
                t.any(&mut |e| matches!(e.kind(), ExprKind::Call(Intrinsic::ThreadIdx, _)));
            if uses_thread {
                thread.terms.push((t.clone(), *k));
                thread_bits |= bits;
            } else {
                rest_terms.push((t.clone(), *k, bits));
            }
        }
        if thread.terms.is_empty() || (rest_terms.is_empty() && lin.c == 0) {
            return None;
        }
        let y = y as u64;
        let swz_bits = |b: u64| b | ((b & y) >> sh);
        let thread_swz_bits = swz_bits(thread_bits);
        // Pieces of the rest the swizzle leaves alone and that miss the thread part's bits are
        // added (an immediate offset); only the others need the XOR.
        let touched = y | thread_swz_bits;
        let c = lin.c as u64;
        let mut xor_part = Linear::constant((c & touched) as i64);
        let mut add_part = Linear::constant((c & !touched) as i64);
        let (mut xor_bits, mut add_bits) = (c & touched, c & !touched);
        for (t, k, bits) in &rest_terms {
            if bits & touched == 0 {
                add_part.terms.push((t.clone(), *k));
                add_bits |= bits;
            } else {
                xor_part.terms.push((t.clone(), *k));
                xor_bits |= bits;
            }
        }
        if add_bits & swz_bits(xor_bits) != 0 {
            // The added pieces would collide with the XOR part's swizzled bits: XOR everything.
            xor_part = Linear::constant(lin.c);
            xor_part
                .terms
                .extend(rest_terms.iter().map(|(t, k, _)| (t.clone(), *k)));
            xor_bits |= add_bits;
            add_part = Linear::constant(0);
        }
        let swz = |l: &Linear, bits: u64| -> Expr {
            let e = l.build(dt);
            if bits & y == 0 {
                return e;
            }
            let m = Expr::new(
                ExprKind::Bin(BinOp::BitAnd, e.clone(), Expr::int_of(y as i64, dt)),
                dt,
            );
            let m = Expr::new(ExprKind::Bin(BinOp::Shr, m, Expr::int_of(sh, dt)), dt);
            Expr::new(ExprKind::Bin(BinOp::BitXor, e, m), dt)
        };
        let mut out = swz(&thread, thread_bits);
        if !xor_part.terms.is_empty() || xor_part.c != 0 {
            let op = if thread_swz_bits & swz_bits(xor_bits) == 0 {
                BinOp::Add
            } else {
                BinOp::BitXor
            };
            out = Expr::new(ExprKind::Bin(op, out, swz(&xor_part, xor_bits)), dt);
        }
        if !add_part.terms.is_empty() || add_part.c != 0 {
            out = Expr::new(ExprKind::Bin(BinOp::Add, out, add_part.build(dt)), dt);
        }
        Some(out)
    }

    /// `(x + k·t) // (k·q)` is `t // q` and `(x + k·t) %% (k·q)` is `x + k·(t %% q)` when
    /// `0 <= x < k`. Fragment index maps produce exactly this shape — a lane's row
    /// `(lane/4)%8 + 8·v` divided by 16 — and leaving it unsimplified makes a register array
    /// index depend on the thread, which forces the array into local memory.
    fn split_scaled_term(
        &self,
        is_div: bool,
        whole: &Linear,
        rest: &Linear,
        c: i64,
        dt: DType,
    ) -> Option<Expr> {
        for (i, (t, k)) in rest.terms.iter().enumerate() {
            let k = *k;
            if k <= 1 || k >= c || c % k != 0 || self.bound(t).lo < 0 {
                continue;
            }
            let q = c / k;
            let mut others = rest.clone();
            others.terms.remove(i);
            let others_e = others.build(dt);
            let ob = self.bound(&others_e);
            if ob.lo < 0 || sat_add(ob.hi, sat_mul(k, q - 1)) >= c {
                continue;
            }
            let q_e = Expr::int_of(q, dt);
            let e = if is_div {
                let t_div = Expr::new(ExprKind::Bin(BinOp::Div, t.clone(), q_e), dt);
                whole.clone().add(Linear::atom(t_div), 1)?.build(dt)
            } else {
                let t_mod = Expr::new(ExprKind::Bin(BinOp::Mod, t.clone(), q_e), dt);
                others.add(Linear::atom(t_mod).scale(k)?, 1)?.build(dt)
            };
            return Some(self.rewrite(e));
        }
        None
    }

    fn compare(&self, op: CmpOp, a: &Expr, b: &Expr) -> Option<Expr> {
        if !(a.dtype().is_int() && b.dtype().is_int()) {
            if a == b && !a.dtype().is_float() {
                return Some(Expr::bool(matches!(op, CmpOp::Eq | CmpOp::Le | CmpOp::Ge)));
            }
            return None;
        }
        if a.dtype().is_unsigned_int() {
            return None;
        }
        // Decide on the difference, computed without wrapping.
        let d = Linear::of(a)?.add(Linear::of(b)?, -1)?;
        let de = d.build(DType::I64);
        let mut iv = self.bound(&de);
        // A known `x < y` bounds d when d - (x - y) is bounded above.
        for (x, y) in &self.facts {
            let f = Linear::of(x).and_then(|lx| Linear::of(y).and_then(|ly| lx.add(ly, -1)));
            if let Some(r) = f.and_then(|f| d.clone().add(f, -1)) {
                // d = (x - y) + r with x - y <= -1, so d <= r.hi - 1.
                let rb = self.bound(&r.build(DType::I64));
                if rb.hi != i64::MAX {
                    iv.hi = iv.hi.min(rb.hi.saturating_sub(1));
                }
            }
        }
        let decided = match op {
            CmpOp::Lt if iv.hi < 0 => Some(true),
            CmpOp::Lt if iv.lo >= 0 => Some(false),
            CmpOp::Le if iv.hi <= 0 => Some(true),
            CmpOp::Le if iv.lo > 0 => Some(false),
            CmpOp::Gt if iv.lo > 0 => Some(true),
            CmpOp::Gt if iv.hi <= 0 => Some(false),
            CmpOp::Ge if iv.lo >= 0 => Some(true),
            CmpOp::Ge if iv.hi < 0 => Some(false),
            CmpOp::Eq if iv.is_point() == Some(0) => Some(true),
            CmpOp::Eq if iv.lo > 0 || iv.hi < 0 => Some(false),
            CmpOp::Ne if iv.is_point() == Some(0) => Some(false),
            CmpOp::Ne if iv.lo > 0 || iv.hi < 0 => Some(true),
            _ => None,
        };
        decided.map(Expr::bool)
    }
}

fn gcd_i(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.min(i64::MAX as u64) as i64
}

/// Simplify with no knowledge of variable ranges.
pub fn simplify(e: &Expr) -> Expr {
    Analyzer::new().simplify(e)
}

/// Fold an expression to an integer if it is constant after simplification.
pub fn const_int(e: &Expr) -> Option<i64> {
    simplify(e).as_int()
}

#[allow(dead_code)]
fn _value_type_check(v: Value) -> Value {
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType::*;
    use crate::eval::eval;
    use crate::ops::*;
    use proptest::prelude::*;

    #[test]
    fn folds_constants() {
        let e = Expr::int(3) * 4 + 2;
        assert_eq!(simplify(&e).as_int(), Some(14));
        let f = Expr::float(1.5) * 2.0;
        assert_eq!(simplify(&f).as_float(), Some(3.0));
    }

    #[test]
    fn linear_normalization_cancels() {
        let i = Var::new("i", I32);
        let b = Var::new("b", I32);
        let e = (&b * 128 + &i) - &b * 128;
        assert_eq!(simplify(&e).to_string(), "i");
        let e2 = (Expr::from(&i) + 3) + 4;
        assert_eq!(simplify(&e2).to_string(), "i + 7");
        let e3 = Expr::from(&i) * 1 + 0;
        assert_eq!(simplify(&e3).to_string(), "i");
    }

    #[test]
    fn div_mod_by_constants() {
        let mut an = Analyzer::new();
        let i = Var::new("i", I32);
        let b = Var::new("b", I32);
        an.bind(&i, 0, 127);
        an.bind(&b, 0, 1000);
        let e = floordiv(&b * 128 + &i, 128);
        assert_eq!(an.simplify(&e).to_string(), "b");
        let m = floormod(&b * 128 + &i, 128);
        assert_eq!(an.simplify(&m).to_string(), "i");
        let n = Var::new("n", I32);
        an.bind(&n, 0, i32::MAX as i64);
        assert_eq!(
            an.simplify(&ceildiv(&n, 128)).to_string(),
            "(n + 127) / 128"
        );
        let nested = floordiv(floordiv(&n, 4), 8);
        assert_eq!(an.simplify(&nested).to_string(), "n / 32");
    }

    #[test]
    fn scaled_term_splits_out_of_div_and_mod() {
        // A lane's fragment row (lane/4)%8 + 8v, divided by 16: the register index must not
        // depend on the lane.
        let mut an = Analyzer::new();
        let lane = Var::new("lane", I32);
        let v = Var::new("v", I32);
        an.bind(&lane, 0, 31);
        an.bind(&v, 0, 3);
        let row = floormod(floordiv(&lane, 4), 8) + &v * 8;
        assert_eq!(an.simplify(&floordiv(row.clone(), 16)).to_string(), "v / 2");
        assert_eq!(
            an.simplify(&floormod(row, 16)).to_string(),
            "lane / 4 + v % 2 * 8"
        );
        // Not applicable when the rest can reach the divisor.
        let w = Var::new("w", I32);
        an.bind(&w, 0, 8);
        let e = floordiv(&w + &v * 8, 16);
        assert_eq!(an.simplify(&e).to_string(), "(w + v * 8) / 16");
    }

    /// `e` with `thread_idx()` replaced by `tid`, so the evaluator can run it.
    fn with_tid(e: &Expr, tid: &Var) -> Expr {
        match e.kind() {
            ExprKind::Call(Intrinsic::ThreadIdx, _) => tid.expr(),
            _ => e.map_children(&mut |c| with_tid(c, tid)),
        }
    }

    #[test]
    fn swizzle_splits_thread_part_from_loop_part() {
        let mut an = Analyzer::new();
        an.threads = Some(128);
        let tid = Expr::call(Intrinsic::ThreadIdx, vec![], I32);
        let ks = Var::new("ks", I32);
        an.bind(&ks, 0, 3);
        // An ldmatrix row address of a 64-column bf16 tile under Sw<3,3,3>.
        let x = floormod(tid.clone(), 8) * 64
            + floordiv(tid.clone(), 32) * 2048
            + floormod(floordiv(tid.clone(), 8), 2) * 512
            + floordiv(floormod(tid.clone(), 32), 16) * 8
            + &ks * 16
            + 1024;
        let e = x.clone() ^ ((x & 448) >> 3);
        let s = an.simplify(&e);
        let printed = s.to_string();
        assert!(
            !printed.contains("ks * 16 + 1024) & 448"),
            "not split: {printed}"
        );
        let t = Var::new("t", I32);
        let (e, s) = (with_tid(&e, &t), with_tid(&s, &t));
        for tv in 0..128 {
            for kv in 0..4 {
                let mut env = HashMap::new();
                env.insert(t.id(), Value::Int(tv));
                env.insert(ks.id(), Value::Int(kv));
                assert_eq!(
                    eval(&e, &env),
                    eval(&s, &env),
                    "tid {tv} ks {kv}: {printed}"
                );
            }
        }
        // Overlapping bits (ks·8 collides with tid·8): left alone.
        let y = tid * 8 + &ks * 8;
        let e2 = y.clone() ^ ((y & 448) >> 3);
        assert_eq!(an.simplify(&e2).to_string(), an.simplify(&e2).to_string());
        assert!(an
            .simplify(&e2)
            .to_string()
            .starts_with("thread_idx() * 8 + ks * 8 ^"));
    }

    #[test]
    fn bounds_prove_tails_away() {
        let mut an = Analyzer::new();
        let i = Var::new("i", I32);
        an.bind(&i, 0, 63);
        assert!(an.can_prove(&i.expr().lt(64)));
        assert_eq!(an.prove(&i.expr().lt(32)), None);
        assert_eq!(an.prove(&i.expr().ge(64)), Some(false));
        let ko = Var::new("ko", I32);
        an.bind(&ko, 0, 15);
        assert!(an.can_prove(&(&ko * 64 + &i).lt(1024)));
    }

    #[test]
    fn common_factors_divide_out() {
        let mut an = Analyzer::new();
        let t = Var::new("t", I32);
        an.bind(&t, 0, 127);
        assert_eq!(an.simplify(&floordiv(&t * 8, 32)).to_string(), "t / 4");
        assert_eq!(an.simplify(&floormod(&t * 8, 32)).to_string(), "t % 4 * 8");
        assert_eq!(
            an.simplify(&floordiv(&t * 4 + 8, 16)).to_string(),
            "(t + 2) / 4"
        );
    }

    #[test]
    fn mod_and_div_recombine() {
        let mut an = Analyzer::new();
        let v = Var::new("v", I32);
        an.bind(&v, 0, 7);
        let e = floormod(&v, 4) + floordiv(&v, 4) * 4;
        assert_eq!(an.simplify(&e).to_string(), "v");
        let t = Var::new("t", I32);
        an.bind(&t, 0, 127);
        let e2 = (&t % 4) + (&t / 4) * 4 + 3;
        assert_eq!(an.simplify(&e2).to_string(), "t + 3");
    }

    #[test]
    fn known_multiples_prove_alignment() {
        let mut an = Analyzer::new();
        let k = Var::new("K", I32);
        an.bind(&k, 0, i32::MAX as i64);
        assert_eq!(an.prove(&floormod(&k, 8).eq_(0)), None);
        an.add_multiple(&k, 16);
        assert!(an.can_prove(&floormod(&k, 8).eq_(0)));
        assert!(an.can_prove(&floormod(&k * 3 + 32, 16).eq_(0)));
        assert_eq!(an.prove(&floormod(&k + 4, 8).eq_(0)), Some(false));
    }

    #[test]
    fn facts_prove_block_bounds() {
        let mut an = Analyzer::new();
        let bx = Var::new("bx", I32);
        let m = Var::new("M", I32);
        an.bind(&bx, 0, i32::MAX as i64);
        an.bind(&m, 0, i32::MAX as i64);
        assert_eq!(an.prove(&bx.expr().lt(&m)), None);
        an.add_fact_lt(bx.expr(), m.expr());
        assert!(an.can_prove(&bx.expr().lt(&m)));
        assert!(an.can_prove(&(&bx - 1).lt(&m)));
        assert_eq!(an.prove(&(&bx + 1).lt(&m)), None);
    }

    #[test]
    fn boolean_identities() {
        let x = Var::new("x", I32).expr();
        let c = x.lt(3);
        assert_eq!(simplify(&c.and(true)).to_string(), "x < 3");
        assert_eq!(simplify(&c.or(true)).as_bool(), Some(true));
        assert_eq!(simplify(&!c.clone()).to_string(), "x >= 3");
        assert_eq!(simplify(&select(true, 1, 2)).as_int(), Some(1));
    }

    #[derive(Clone, Debug)]
    enum T {
        Var(usize),
        Const(i64),
        Bin(u8, Box<T>, Box<T>),
    }

    fn tree() -> impl Strategy<Value = T> {
        let leaf = prop_oneof![
            (0usize..3).prop_map(T::Var),
            (-20i64..20).prop_map(T::Const)
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            (0u8..9, inner.clone(), inner).prop_map(|(o, a, b)| T::Bin(o, Box::new(a), Box::new(b)))
        })
    }

    fn build(t: &T, vars: &[Var]) -> Expr {
        match t {
            T::Var(i) => vars[*i].expr(),
            T::Const(c) => Expr::int(*c),
            T::Bin(o, a, b) => {
                let (a, b) = (build(a, vars), build(b, vars));
                match o {
                    0 => a + b,
                    1 => a - b,
                    2 => a * b,
                    3 => floordiv(a, b.max(1)),
                    4 => floormod(a, b.max(1)),
                    5 => min(a, b),
                    6 => max(a, b),
                    7 => floordiv(a, 4),
                    _ => floormod(a, 8),
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Splitting a swizzled offset into thread and loop parts keeps every value, whatever the
        /// swizzle and whatever bits the parts occupy (overlapping parts are left alone).
        #[test]
        fn swizzle_split_preserves_value(
            b in 1i64..4, m in 0i64..4, s in 1i64..4,
            tid_shifts in proptest::collection::vec((0i64..4, 0i64..10), 1..4),
            ks_shift in 0i64..12, c in 0i64..4096,
        ) {
            let mut an = Analyzer::new();
            an.threads = Some(64);
            let tid = Expr::call(Intrinsic::ThreadIdx, vec![], I32);
            let ks = Var::new("ks", I32);
            an.bind(&ks, 0, 3);
            // Terms like ((tid / 2^d) % 2) · 2^p: thread bits placed at chosen positions.
            let mut x = Expr::int(c) + &ks * (1i64 << ks_shift);
            for (d, p) in &tid_shifts {
                x = x + floormod(floordiv(tid.clone(), 1i64 << d), 2) * (1i64 << p);
            }
            let yyy = ((1i64 << b) - 1) << (m + s);
            let e = x.clone() ^ ((x & yyy) >> s);
            let simplified = an.simplify(&e);
            let t = Var::new("t", I32);
            let (e1, s1) = (with_tid(&e, &t), with_tid(&simplified, &t));
            for tv in 0..64 {
                for kv in 0..4 {
                    let mut env = HashMap::new();
                    env.insert(t.id(), Value::Int(tv));
                    env.insert(ks.id(), Value::Int(kv));
                    prop_assert_eq!(eval(&e1, &env), eval(&s1, &env), "{} => {}", e, simplified);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// The simplifier never changes the value of an expression, given the bounds it was told.
        #[test]
        fn simplify_preserves_value(t in tree(), vals in proptest::collection::vec(0i64..50, 3)) {
            let vars: Vec<Var> = (0..3).map(|i| Var::new(format!("v{i}"), I64)).collect();
            let e = build(&t, &vars);
            let mut an = Analyzer::new();
            let mut env = HashMap::new();
            for (v, x) in vars.iter().zip(&vals) {
                an.bind(v, 0, 49);
                env.insert(v.id(), Value::Int(*x));
            }
            let s = an.simplify(&e);
            let before = eval(&e, &env);
            let after = eval(&s, &env);
            // Overflowing i32 arithmetic is not modelled; only compare when the original is small.
            if let Ok(b) = before {
                if b.as_i64().abs() < 1 << 20 {
                    prop_assert_eq!(Ok(b), after, "{} => {}", e, s);
                }
            }
        }
    }
}
