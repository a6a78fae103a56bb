//! Differential testing of generated tile programs: a seeded generator makes random valid
//! programs through the DSL (elementwise expressions with casts and math under conditionals,
//! reductions along either axis with or without `accumulate`, atomic row sums, cumsums either
//! way, gemms in the three layouts with an epilogue; symbolic and static sizes that are not
//! multiples of the tiles; copies through shared memory or not; serial and pipelined loops),
//! runs each on the CPU backend and, lowered, in the simulator for sm_80, sm_90a and gfx950,
//! and compares the outputs within a tolerance derived from the dtypes. A failing program is
//! shrunk (smaller sizes, simpler expression, fewer features) and printed as a reproducer.
//!
//! CI runs `fixed_seed_budget` (a fixed seed, [`CI_CASES`] programs). A long campaign:
//!
//!     TILELANG_FUZZ_CASES=5000 TILELANG_FUZZ_SEED=7 \
//!         cargo test --release -p tilelang --test fuzz campaign -- --ignored --nocapture
//!
//! With `TILELANG_FUZZ_GPU=1` every program also runs on the machine's CUDA GPU.
//!
//! Regressions found by the campaigns are the `regression_*` tests at the end.

use std::fmt;
use std::path::PathBuf;

use tilelang::prelude::*;
use tilelang::runtime::rel_err;
use tilelang::Target;
use tl_sim::{SimArg, SimOptions};

/// Programs per CI run (about a second each on one core).
const CI_CASES: usize = 36;
const CI_SEED: u64 = 0x17_f022;
const TARGETS: [Target; 3] = [Target::SM80, Target::SM90, Target::GFX950];

// ----- the generator -----

/// splitmix64: the same programs on every machine.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Red {
    Sum,
    Max,
    Min,
    AbsSum,
    AbsMax,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum GLayout {
    NN,
    NT,
    TN,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Elementwise,
    RowReduce(Red),
    ColReduce(Red),
    AtomicRowSum,
    Cumsum { dim: usize, reverse: bool },
    Gemm(GLayout),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum U {
    Neg,
    Abs,
    Tanh,
    Sigmoid,
    ExpClamped,
    SqrtAbs,
    Sin,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum B {
    Add,
    Sub,
    Mul,
    Max,
    Min,
}

/// An elementwise expression over `X` (the element) and `Y` (a second input's element).
#[derive(Clone, Debug, PartialEq)]
enum E {
    X,
    Y,
    C(f64),
    Un(U, Box<E>),
    Bin(B, Box<E>, Box<E>),
    /// Round to a narrow type and back (generated over inputs only).
    Cast(DType, Box<E>),
    /// `select(X > 0, a, b)`: only on exact inputs, so both sides take the same branch.
    SelPos(Box<E>, Box<E>),
}

impl E {
    fn gen(r: &mut Rng, depth: usize, with_y: bool, with_sel: bool) -> E {
        if depth == 0 || r.below(4) == 0 {
            return match r.below(if with_y { 5 } else { 4 }) {
                0 => E::C(r.pick(&[0.5, -1.25, 2.0, 3.0])),
                4 => E::Y,
                _ => E::X,
            };
        }
        let sub = |r: &mut Rng| Box::new(E::gen(r, depth - 1, with_y, with_sel));
        match r.below(if with_sel { 5 } else { 4 }) {
            0 => {
                let u = r.pick(&[
                    U::Neg,
                    U::Abs,
                    U::Tanh,
                    U::Sigmoid,
                    U::ExpClamped,
                    U::SqrtAbs,
                    U::Sin,
                ]);
                // Not in gemm epilogues (`with_sel` off): the sine of an accumulator (tens to
                // hundreds) turns the backends' differences in summation order into relative
                // errors far above the dtype's (seed 19, program 346: sin(max(x·x, 3))).
                let u = if u == U::Sin && !with_sel { U::Tanh } else { u };
                E::Un(u, sub(r))
            }
            1 | 2 => {
                let b = r.pick(&[B::Add, B::Sub, B::Mul, B::Max, B::Min]);
                E::Bin(b, sub(r), sub(r))
            }
            // Rounding of an exact input only: rounding a computed value (or gemm's
            // accumulator) and subtracting it turns a 1-ulp difference between backends into
            // a large relative one (seed 4, program 990: `f16(acc) - acc`).
            3 if with_sel => {
                let leaf = if with_y && r.coin() { E::Y } else { E::X };
                E::Cast(r.pick(&[BF16, F16]), Box::new(leaf))
            }
            3 => E::Un(U::Tanh, sub(r)),
            _ => E::SelPos(sub(r), sub(r)),
        }
    }

    fn to_expr(&self, x: &Expr, y: &Expr) -> Expr {
        match self {
            E::X => x.clone(),
            E::Y => y.clone(),
            E::C(v) => Expr::float(*v),
            E::Un(u, a) => {
                let a = a.to_expr(x, y);
                match u {
                    U::Neg => -a,
                    U::Abs => abs(a),
                    U::Tanh => tanh(a),
                    U::Sigmoid => sigmoid(a),
                    U::ExpClamped => exp(min(a, 3.0)),
                    U::SqrtAbs => sqrt(abs(a)),
                    U::Sin => sin(a),
                }
            }
            E::Bin(b, l, r) => {
                let (l, r) = (l.to_expr(x, y), r.to_expr(x, y));
                match b {
                    B::Add => l + r,
                    B::Sub => l - r,
                    B::Mul => l * r,
                    B::Max => max(l, r),
                    B::Min => min(l, r),
                }
            }
            E::Cast(dt, a) => a.to_expr(x, y).cast(*dt).cast(F32),
            E::SelPos(a, b) => select(x.gt(0.0), a.to_expr(x, y), b.to_expr(x, y)),
        }
    }

    /// The narrowest float type a value passes through.
    fn narrowest(&self) -> Option<DType> {
        let kids: Vec<&E> = match self {
            E::Un(_, a) | E::Cast(_, a) => vec![a],
            E::Bin(_, a, b) | E::SelPos(a, b) => vec![a, b],
            _ => vec![],
        };
        let mut n = kids.iter().filter_map(|k| k.narrowest()).max_by(cmp_eps);
        if let E::Cast(dt, _) = self {
            n = Some(n.map_or(*dt, |m| [m, *dt].into_iter().max_by(cmp_eps).unwrap_or(m)));
        }
        n
    }

    /// Simpler expressions: each child, and `X`.
    fn shrinks(&self) -> Vec<E> {
        let mut out = vec![];
        if *self != E::X {
            out.push(E::X);
        }
        match self {
            E::Un(u, a) => {
                out.push((**a).clone());
                out.extend(a.shrinks().into_iter().map(|s| E::Un(*u, Box::new(s))));
            }
            E::Cast(d, a) => {
                out.push((**a).clone());
                out.extend(a.shrinks().into_iter().map(|s| E::Cast(*d, Box::new(s))));
            }
            E::Bin(b, l, r) => {
                out.push((**l).clone());
                out.push((**r).clone());
                for s in l.shrinks() {
                    out.push(E::Bin(*b, Box::new(s), r.clone()));
                }
                for s in r.shrinks() {
                    out.push(E::Bin(*b, l.clone(), Box::new(s)));
                }
            }
            E::SelPos(l, r) => {
                out.push((**l).clone());
                out.push((**r).clone());
            }
            _ => {}
        }
        out
    }
}

fn eps(dt: DType) -> f64 {
    match dt {
        BF16 => 2f64.powi(-8),
        F16 => 2f64.powi(-11),
        _ => 2f64.powi(-23),
    }
}

fn cmp_eps(a: &DType, b: &DType) -> std::cmp::Ordering {
    eps(*a).total_cmp(&eps(*b))
}

#[derive(Clone, Debug)]
struct Prog {
    kind: Kind,
    m: usize,
    n: usize,
    k: usize,
    sym_m: bool,
    sym_n: bool,
    bm: i64,
    bn: i64,
    bk: i64,
    threads: u32,
    stages: u32,
    din: DType,
    dout: DType,
    expr: E,
    /// Elementwise: the other branch of `if (bx + by) % 2 == 0`.
    branch: Option<E>,
    via_shared: bool,
    pipelined: bool,
    accumulate: bool,
    /// Gemm: ask for warp specialization (sm_90a takes it where the k loop is pipelined, its
    /// tiles load by TMA and a wgmma gemm consumes them: a producer warpgroup, C out by TMA
    /// store; elsewhere it changes nothing).
    warp_specialize: bool,
}

/// GEMM tiles (bm, bn, bk, threads) that every target lowers.
const GEMM_TILES: [(i64, i64, i64, u32); 2] = [(64, 64, 32, 128), (64, 64, 64, 256)];

impl Prog {
    fn gen(r: &mut Rng) -> Prog {
        let kind = match r.below(11) {
            0..=2 => Kind::Elementwise,
            3 | 4 => {
                Kind::RowReduce(r.pick(&[Red::Sum, Red::Max, Red::Min, Red::AbsSum, Red::AbsMax]))
            }
            5 | 6 => {
                Kind::ColReduce(r.pick(&[Red::Sum, Red::Max, Red::Min, Red::AbsSum, Red::AbsMax]))
            }
            7 => Kind::AtomicRowSum,
            8 => Kind::Cumsum {
                dim: r.below(2),
                reverse: r.coin(),
            },
            _ => Kind::Gemm(r.pick(&[GLayout::NN, GLayout::NT, GLayout::TN])),
        };
        let gemm = matches!(kind, Kind::Gemm(_));
        let size = |r: &mut Rng| r.pick(&[1, 2, 7, 31, 33, 64, 65, 100, 130, 200]);
        // fp8 gemms (NT, K-major as fp8 tensor cores read them) in tiles 128 deep, which
        // sm_90a runs on fp8 wgmma; elsewhere (and in other tiles) they take the FMA path.
        let fp8 = matches!(kind, Kind::Gemm(GLayout::NT)) && r.below(3) == 0;
        let (bm, bn, bk, threads) = if fp8 {
            r.pick(&[(64, 64, 128, 128), (64, 64, 32, 128)])
        } else if gemm {
            r.pick(&GEMM_TILES)
        } else {
            (
                r.pick(&[4, 8, 16, 32]),
                r.pick(&[32, 64, 128]),
                0,
                r.pick(&[64, 128, 256]),
            )
        };
        let with_y = kind == Kind::Elementwise;
        let depth = r.pick(&[0, 1, 2, 3]);
        let expr = E::gen(r, depth, with_y, !gemm);
        let branch =
            (kind == Kind::Elementwise && r.below(3) == 0).then(|| E::gen(r, 2, true, true));
        Prog {
            kind,
            m: size(r),
            n: size(r),
            k: size(r),
            sym_m: r.below(4) != 0,
            sym_n: r.below(4) != 0,
            bm,
            bn,
            bk,
            threads,
            stages: r.pick(&[2, 3]),
            din: r.pick(&if fp8 {
                [F8E4M3, F8E4M3, F8E5M2]
            } else if gemm {
                [F16, BF16, F32]
            } else {
                [F32, BF16, F16]
            }),
            dout: r.pick(&[F32, F32, BF16, F16]),
            expr,
            branch,
            via_shared: r.coin(),
            pipelined: r.coin(),
            accumulate: r.coin(),
            // Drawn last: the fields above stay what this program's seed gave before.
            warp_specialize: gemm && r.coin(),
        }
        .specializable()
    }

    /// A gemm that asks for warp specialization gets what sm_90a needs to take it: a
    /// pipelined k loop and N and K in whole 16-byte rows (M keeps its tail).
    fn specializable(mut self) -> Prog {
        if self.warp_specialize {
            self.pipelined = true;
            self.n = self.n.next_multiple_of(16);
            self.k = self.k.next_multiple_of(16);
        }
        self
    }

    /// Output dtype of the reductions' and the atomics' results.
    fn tolerance(&self) -> f64 {
        let mut narrow = self.expr.narrowest();
        if let Some(b) = &self.branch {
            narrow = [narrow, b.narrowest()]
                .into_iter()
                .flatten()
                .max_by(cmp_eps);
        }
        let out = match self.kind {
            Kind::AtomicRowSum => F32,
            _ => self.dout,
        };
        let worst = narrow.map_or(eps(out), |n| eps(n).max(eps(out)));
        let base = match self.kind {
            Kind::Gemm(_) if self.din == F32 => 2e-3, // TF32 may be used for f32 inputs
            Kind::Gemm(_) | Kind::AtomicRowSum | Kind::RowReduce(_) | Kind::ColReduce(_) => 2e-5,
            Kind::Cumsum { .. } => 2e-5,
            Kind::Elementwise => 1e-5,
        };
        base + 4.0 * worst
    }

    fn dim(&self, k: &mut KernelBuilder, name: &str, sym: bool, v: usize) -> Expr {
        if sym {
            k.dim(name)
        } else {
            Expr::from(v as i64)
        }
    }

    /// The kernel and its tensors' shapes.
    fn build(&self) -> (Kernel, Vec<Vec<usize>>) {
        let p = self.clone();
        let (bm, bn) = (p.bm, p.bn);
        let mut shapes = vec![];
        let k = Kernel::build("fuzz", |k| {
            let m = p.dim(k, "M", p.sym_m, p.m);
            let n = p.dim(k, "N", p.sym_n, p.n);
            match p.kind {
                Kind::Elementwise => {
                    let a = k.input("A", [&m, &n], p.din);
                    let b = k.input("B", [&m, &n], p.din);
                    let c = k.output("C", [&m, &n], p.dout);
                    shapes = vec![vec![p.m, p.n]; 3];
                    k.launch(
                        [ceildiv(&n, bn), ceildiv(&m, bm)],
                        p.threads,
                        |t, [bx, by]| {
                            let af = t.alloc_fragment([bm, bn], p.din);
                            let bf = t.alloc_fragment([bm, bn], p.din);
                            let cf = t.alloc_fragment([bm, bn], p.dout);
                            if p.via_shared {
                                let s = t.alloc_shared([bm, bn], p.din);
                                t.copy(a.tile([&by * bm, &bx * bn]), &s);
                                t.copy(&s, &af);
                            } else {
                                t.copy(a.tile([&by * bm, &bx * bn]), &af);
                            }
                            t.copy(b.tile([&by * bm, &bx * bn]), &bf);
                            let body = |t: &mut TileScope, e: &E| {
                                t.parallel([bm, bn], |t, [i, j]| {
                                    let x = af.at([&i, &j]).cast(F32);
                                    let y = bf.at([&i, &j]).cast(F32);
                                    t.store(&cf, [&i, &j], e.to_expr(&x, &y).cast(p.dout));
                                });
                            };
                            match &p.branch {
                                None => body(t, &p.expr),
                                Some(other) => t
                                    .if_(floormod(&bx + &by, 2).lt(1), |t| body(t, &p.expr))
                                    .else_(|t| body(t, other)),
                            }
                            t.copy(&cf, c.tile([&by * bm, &bx * bn]));
                        },
                    );
                }
                Kind::RowReduce(red) | Kind::ColReduce(red) => {
                    let rows = matches!(p.kind, Kind::RowReduce(_));
                    let a = k.input("A", [&m, &n], p.din);
                    let r = k.output("R", [if rows { &m } else { &n }], p.dout);
                    shapes = vec![vec![p.m, p.n], vec![if rows { p.m } else { p.n }]];
                    let (grid, len, outer, block_len) = if rows {
                        (ceildiv(&m, bm), n.clone(), bm, bn)
                    } else {
                        (ceildiv(&n, bn), m.clone(), bn, bm)
                    };
                    k.launch([grid], p.threads, |t, [bx]| {
                        let xf = t.alloc_fragment([bm, bn], F32);
                        let part = t.alloc_fragment([outer], F32);
                        let acc = t.alloc_fragment([outer], F32);
                        let shared = t.alloc_shared([bm, bn], p.din);
                        t.fill(&acc, identity(red));
                        let body = |t: &mut TileScope, j: Expr| {
                            let tile = if rows {
                                a.tile([&bx * bm, &j * bn])
                            } else {
                                a.tile([&j * bm, &bx * bn])
                            };
                            if p.via_shared || p.pipelined {
                                t.copy(tile, &shared);
                                t.copy(&shared, &xf);
                            } else {
                                t.copy(tile, &xf);
                            }
                            t.parallel([bm, bn], |t, [i, c]| {
                                let pos = if rows { &c } else { &i };
                                let valid = (&j * block_len + pos).lt(&len);
                                let x = xf.at([&i, &c]);
                                let v = p.expr.to_expr(&x, &x);
                                t.store(&xf, [&i, &c], select(valid, v, identity(red)));
                            });
                            let dim = if rows { 1 } else { 0 };
                            if p.accumulate {
                                reduce(t, red, &xf, &acc, dim).accumulate();
                            } else {
                                reduce(t, red, &xf, &part, dim);
                                t.parallel([outer], |t, [i]| {
                                    let (a, b) = (acc.at([&i]), part.at([&i]));
                                    let v = match red {
                                        Red::Sum | Red::AbsSum => a + b,
                                        Red::Max | Red::AbsMax => max(a, b),
                                        Red::Min => min(a, b),
                                    };
                                    t.store(&acc, [&i], v);
                                });
                            }
                        };
                        let trips = ceildiv(&len, block_len);
                        if p.pipelined {
                            t.pipelined(trips, p.stages, body);
                        } else {
                            t.serial(trips, body);
                        }
                        t.copy(&acc, r.tile([&bx * outer]));
                    });
                }
                Kind::AtomicRowSum => {
                    let a = k.input("A", [&m, &n], p.din);
                    let r = k.inout("R", [&m], F32);
                    shapes = vec![vec![p.m, p.n], vec![p.m]];
                    k.launch(
                        [ceildiv(&n, bn), ceildiv(&m, bm)],
                        p.threads,
                        |t, [bx, by]| {
                            let xf = t.alloc_fragment([bm, bn], F32);
                            let rs = t.alloc_fragment([bm], F32);
                            t.copy(a.tile([&by * bm, &bx * bn]), &xf);
                            t.parallel([bm, bn], |t, [i, c]| {
                                let valid = (&bx * bn + &c).lt(&n);
                                let x = xf.at([&i, &c]);
                                t.store(&xf, [&i, &c], select(valid, p.expr.to_expr(&x, &x), 0.0));
                            });
                            t.reduce_sum(&xf, &rs, 1);
                            t.atomic_add(r.tile([&by * bm]), &rs);
                        },
                    );
                }
                Kind::Cumsum { dim, reverse } => {
                    let a = k.input("A", [&m, &n], p.din);
                    let c = k.output("C", [&m, &n], p.dout);
                    shapes = vec![vec![p.m, p.n]; 2];
                    k.launch(
                        [ceildiv(&n, bn), ceildiv(&m, bm)],
                        p.threads,
                        |t, [bx, by]| {
                            let xf = t.alloc_fragment([bm, bn], F32);
                            let cf = t.alloc_fragment([bm, bn], F32);
                            t.copy(a.tile([&by * bm, &bx * bn]), &xf);
                            t.parallel([bm, bn], |t, [i, j]| {
                                let valid = (&by * bm + &i).lt(&m).and((&bx * bn + &j).lt(&n));
                                let x = xf.at([&i, &j]);
                                t.store(&xf, [&i, &j], select(valid, p.expr.to_expr(&x, &x), 0.0));
                            });
                            let h = t.cumsum(&xf, &cf, dim);
                            if reverse {
                                h.reverse();
                            }
                            t.copy(&cf, c.tile([&by * bm, &bx * bn]));
                        },
                    );
                }
                Kind::Gemm(layout) => {
                    let kd = p.dim(k, "K", true, p.k);
                    let (bk, din) = (p.bk, p.din);
                    let a = match layout {
                        GLayout::TN => k.input("A", [&kd, &m], din),
                        _ => k.input("A", [&m, &kd], din),
                    };
                    let b = match layout {
                        GLayout::NT => k.input("B", [&n, &kd], din),
                        _ => k.input("B", [&kd, &n], din),
                    };
                    let c = k.output("C", [&m, &n], p.dout);
                    shapes = vec![
                        if layout == GLayout::TN {
                            vec![p.k, p.m]
                        } else {
                            vec![p.m, p.k]
                        },
                        if layout == GLayout::NT {
                            vec![p.n, p.k]
                        } else {
                            vec![p.k, p.n]
                        },
                        vec![p.m, p.n],
                    ];
                    k.launch(
                        [ceildiv(&n, bn), ceildiv(&m, bm)],
                        p.threads,
                        |t, [bx, by]| {
                            let a_s = match layout {
                                GLayout::TN => t.alloc_shared([bk, bm], din),
                                _ => t.alloc_shared([bm, bk], din),
                            };
                            let b_s = match layout {
                                GLayout::NT => t.alloc_shared([bn, bk], din),
                                _ => t.alloc_shared([bk, bn], din),
                            };
                            if p.warp_specialize {
                                t.warp_specialize(true);
                            }
                            let acc = t.alloc_fragment([bm, bn], F32);
                            t.clear(&acc);
                            let body = |t: &mut TileScope, ko: Expr| {
                                match layout {
                                    GLayout::TN => t.copy(a.tile([&ko * bk, &by * bm]), &a_s),
                                    _ => t.copy(a.tile([&by * bm, &ko * bk]), &a_s),
                                }
                                match layout {
                                    GLayout::NT => t.copy(b.tile([&bx * bn, &ko * bk]), &b_s),
                                    _ => t.copy(b.tile([&ko * bk, &bx * bn]), &b_s),
                                }
                                let mut g = t.gemm(&a_s, &b_s, &acc);
                                if layout == GLayout::TN {
                                    g = g.transpose_a();
                                }
                                if layout == GLayout::NT {
                                    g.transpose_b();
                                }
                            };
                            if p.pipelined {
                                t.pipelined(ceildiv(&kd, bk), p.stages, body);
                            } else {
                                t.serial(ceildiv(&kd, bk), body);
                            }
                            if p.expr != E::X {
                                t.parallel([bm, bn], |t, [i, j]| {
                                    let x = acc.at([&i, &j]);
                                    t.store(&acc, [&i, &j], p.expr.to_expr(&x, &x));
                                });
                            }
                            t.copy(&acc, c.tile([&by * bm, &bx * bn]));
                        },
                    );
                }
            }
        });
        (k, shapes)
    }

    /// Smaller or simpler programs, most promising first.
    fn shrinks(&self) -> Vec<Prog> {
        let mut out = vec![];
        let mut with = |f: &dyn Fn(&mut Prog)| {
            let mut q = self.clone();
            f(&mut q);
            out.push(q);
        };
        for v in [1, self.m / 2, self.m.saturating_sub(1)] {
            if v >= 1 && v < self.m {
                with(&|q| q.m = v);
            }
        }
        for v in [1, self.n / 2, self.n.saturating_sub(1)] {
            if v >= 1 && v < self.n {
                with(&|q| q.n = v);
            }
        }
        for v in [1, self.k / 2, self.k.saturating_sub(1)] {
            if v >= 1 && v < self.k && matches!(self.kind, Kind::Gemm(_)) {
                with(&|q| q.k = v);
            }
        }
        if self.branch.is_some() {
            with(&|q| q.branch = None);
        }
        for e in self.expr.shrinks() {
            with(&|q| q.expr = e.clone());
        }
        if self.via_shared {
            with(&|q| q.via_shared = false);
        }
        if self.pipelined {
            with(&|q| q.pipelined = false);
        }
        if self.accumulate {
            with(&|q| q.accumulate = false);
        }
        if self.warp_specialize {
            with(&|q| q.warp_specialize = false);
        }
        if self.dout != F32 {
            with(&|q| q.dout = F32);
        }
        if self.din != F32 && !matches!(self.kind, Kind::Gemm(_)) {
            with(&|q| q.din = F32);
        }
        if self.sym_m || self.sym_n {
            with(&|q| (q.sym_m, q.sym_n) = (false, false));
        }
        if !matches!(self.kind, Kind::Gemm(_)) {
            if self.threads > 64 {
                with(&|q| q.threads = 64);
            }
            if self.bn > 32 {
                with(&|q| q.bn = 32);
            }
            if self.bm > 4 {
                with(&|q| q.bm = 4);
            }
        }
        out
    }
}

fn identity(red: Red) -> f64 {
    match red {
        Red::Max => f64::NEG_INFINITY,
        Red::Min => f64::INFINITY,
        _ => 0.0,
    }
}

fn reduce<'a>(
    t: &'a mut TileScope,
    red: Red,
    src: &Buffer,
    dst: &Buffer,
    dim: usize,
) -> tilelang::dsl::ReduceHandle<'a> {
    match red {
        Red::Sum => t.reduce_sum(src, dst, dim),
        Red::Max => t.reduce_max(src, dst, dim),
        Red::Min => t.reduce_min(src, dst, dim),
        Red::AbsSum => t.reduce_abssum(src, dst, dim),
        Red::AbsMax => t.reduce_absmax(src, dst, dim),
    }
}

// ----- running a program -----

enum Failure {
    Build(String),
    Cpu(String),
    Lower(String),
    Sim(String),
    Gpu(String),
    Mismatch { err: f64, tol: f64, output: String },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Build(e) => write!(f, "the DSL refused the program: {e}"),
            Failure::Cpu(e) => write!(f, "CPU backend: {e}"),
            Failure::Lower(e) => write!(f, "lowering: {e}"),
            Failure::Sim(e) => write!(f, "simulator: {e}"),
            Failure::Gpu(e) => write!(f, "GPU: {e}"),
            Failure::Mismatch { err, tol, output } => {
                write!(
                    f,
                    "output {output} differs: rel err {err:.3e} > tolerance {tol:.3e}"
                )
            }
        }
    }
}

impl Failure {
    /// Failures of one kind shrink toward each other (a shrink that fails differently is a
    /// different bug).
    fn same_kind(&self, o: &Failure) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(o)
    }
}

fn cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("tl-fuzz-cache-{}", std::process::id()))
}

/// The CPU outputs for `p` (inputs from `seed`), then each target's simulator run against them.
fn check(p: &Prog, seed: u64, targets: &[Target]) -> Result<(), (Target, Failure)> {
    let none = Target::Cpu;
    let (k, shapes) = p.build();
    k.verify()
        .map_err(|d| (none, Failure::Build(d.to_string())))?;
    let ir = k.ir();
    let dev = Device::Cpu;
    let tensors: Vec<Tensor> = ir
        .tensors()
        .zip(&shapes)
        .enumerate()
        .map(|(i, ((b, _), s))| Tensor::randn(s, b.dtype(), seed + i as u64, &dev))
        .collect::<Result<_, _>>()
        .map_err(|e| (none, Failure::Cpu(e.to_string())))?;
    let inputs: Vec<Vec<f64>> = tensors
        .iter()
        .map(|t| t.to_f64_vec().expect("values"))
        .collect();
    let opts = CompileOptions {
        cache_dir: Some(cache_dir()),
        ..Default::default()
    };
    let exe = k
        .compile_with(&dev, &opts)
        .map_err(|e| (none, Failure::Cpu(e.to_string())))?;
    let refs: Vec<&Tensor> = tensors.iter().collect();
    exe.run(&refs)
        .map_err(|e| (none, Failure::Cpu(e.to_string())))?;
    let want: Vec<Vec<f64>> = tensors
        .iter()
        .map(|t| t.to_f64_vec().expect("values"))
        .collect();
    let tol = p.tolerance();
    // The variant for any sizes on every target; on sm_90a also the one for 16-byte rows
    // when these sizes are such (the one TMA and warp specialization take).
    let rows_aligned = ir.tensors().zip(&shapes).all(|((b, _), s)| {
        s.last()
            .is_some_and(|&n| n % (16 / b.dtype().bytes().max(1)) == 0)
    });
    let mut variants = vec![];
    for &target in targets {
        variants.push((target, false));
        if target == Target::SM90 && rows_aligned {
            variants.push((target, true));
        }
    }
    for (target, aligned) in variants {
        let lowered = if aligned {
            k.lower_aligned(target)
        } else {
            k.lower(target)
        }
        .map_err(|d| (target, Failure::Lower(d.to_string())))?;
        let mut args: Vec<SimArg> = ir
            .tensors()
            .zip(&shapes)
            .zip(&inputs)
            .map(|(((b, role), s), v)| {
                let mut v = v.clone();
                if role == tilelang::ir::Role::Output {
                    v.iter_mut().for_each(|x| *x = f64::NAN);
                }
                SimArg::tensor(b.dtype(), s, &v)
            })
            .collect();
        tl_sim::run(&lowered, &mut args, &SimOptions::default())
            .map_err(|e| (target, Failure::Sim(e.to_string())))?;
        for (((b, role), arg), w) in ir.tensors().zip(&args).zip(&want) {
            if role == tilelang::ir::Role::Input {
                continue;
            }
            if let Some(f) = mismatch(b.name(), &arg.to_f64(b.dtype()), w, tol) {
                return Err((target, f));
            }
        }
    }
    if let Some(dev) = gpu() {
        // Hopper's fp8 tensor cores add products in about 14 bits, not f32's 24 (why fp8
        // GEMMs promote): a relative error near 2^-14 is the hardware's, not a bug (seed 19,
        // programs 212 and 337: 3e-5 to 6e-5 over 15 to 47 products).
        let tol = if p.din.is_fp8() { tol.max(2.5e-4) } else { tol };
        on_gpu(&k, &shapes, &inputs, &want, tol, dev, &opts)?;
    }
    Ok(())
}

/// Output `name`'s values `got` against the CPU's `want`: a mismatch beyond `tol` (a NaN, an
/// unwritten element, counts as one).
fn mismatch(name: &str, got: &[f64], want: &[f64], tol: f64) -> Option<Failure> {
    let err = rel_err(got, want).unwrap_or(f64::INFINITY);
    (err.is_nan() || err > tol).then(|| Failure::Mismatch {
        err,
        tol,
        output: name.to_string(),
    })
}

/// The GPU a campaign also runs every program on: `TILELANG_FUZZ_GPU=1` asks for the first
/// CUDA device (a campaign that asks for one and finds none fails, rather than pass without
/// it).
fn gpu() -> Option<&'static Device> {
    static GPU: std::sync::OnceLock<Option<Device>> = std::sync::OnceLock::new();
    GPU.get_or_init(|| {
        if std::env::var("TILELANG_FUZZ_GPU").ok().as_deref() != Some("1") {
            return None;
        }
        match Device::parse("cuda") {
            Ok(d) => Some(d),
            Err(e) => panic!("TILELANG_FUZZ_GPU=1, but there is no CUDA device: {e}"),
        }
    })
    .as_ref()
}

/// Run the program on the GPU (the variant its sizes choose, as for any launch) on the
/// inputs the CPU took, outputs poisoned with NaN, and compare with the CPU's outputs.
fn on_gpu(
    k: &Kernel,
    shapes: &[Vec<usize>],
    inputs: &[Vec<f64>],
    want: &[Vec<f64>],
    tol: f64,
    dev: &Device,
    opts: &CompileOptions,
) -> Result<(), (Target, Failure)> {
    let target = dev.target().unwrap_or(Target::SM90);
    let fail = |e: String| (target, Failure::Gpu(e));
    let ir = k.ir();
    let exe = k.compile_with(dev, opts).map_err(|e| fail(e.to_string()))?;
    let tensors: Vec<Tensor> = ir
        .tensors()
        .zip(shapes)
        .zip(inputs)
        .map(|(((b, role), s), v)| {
            let mut v = v.clone();
            if role == tilelang::ir::Role::Output {
                v.iter_mut().for_each(|x| *x = f64::NAN);
            }
            Tensor::from_f64(s, b.dtype(), &v, dev)
        })
        .collect::<Result<_, _>>()
        .map_err(|e| fail(e.to_string()))?;
    let refs: Vec<&Tensor> = tensors.iter().collect();
    exe.run(&refs).map_err(|e| fail(e.to_string()))?;
    for (((b, role), t), w) in ir.tensors().zip(&tensors).zip(want) {
        if role == tilelang::ir::Role::Input {
            continue;
        }
        let got = t.to_f64_vec().map_err(|e| fail(e.to_string()))?;
        if let Some(f) = mismatch(b.name(), &got, w, tol) {
            return Err((target, f));
        }
    }
    Ok(())
}

/// Shrink a failing program while it keeps failing the same way on `target`.
fn shrink(mut p: Prog, seed: u64, target: Target, failure: &Failure) -> Prog {
    let mut steps = 0;
    'outer: while steps < 300 {
        for q in p.shrinks() {
            steps += 1;
            if let Err((t, f)) = check(&q, seed, &[target]) {
                if (t == target || t == Target::Cpu) && f.same_kind(failure) {
                    p = q;
                    continue 'outer;
                }
            }
        }
        break;
    }
    p
}

fn program_seed(base: u64, i: usize) -> u64 {
    Rng(base ^ (i as u64).wrapping_mul(0x9E37_79B9)).next()
}

/// Run `cases` programs from `base` on `workers` threads; return the shrunk reproducers.
fn campaign(base: u64, cases: usize, workers: usize) -> (usize, Vec<String>) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let found = std::sync::Mutex::new(vec![]);
    let ran = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= cases {
                    break;
                }
                let seed = program_seed(base, i);
                let p = Prog::gen(&mut Rng(seed));
                ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Err((target, f)) = check(&p, seed, &TARGETS) {
                    let small = shrink(p.clone(), seed, target, &f);
                    let now = match check(&small, seed, &[target]) {
                        Err((_, f)) => f.to_string(),
                        Ok(()) => "(passes after shrinking: flaky?)".into(),
                    };
                    let report = format!(
                        "program {i} (seed {seed:#x}) on {target}: {f}\n  generated: {p:?}\n  \
                         shrunk: {small:?}\n  shrunk fails with: {now}"
                    );
                    eprintln!("{report}");
                    found.lock().expect("lock").push(report);
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(cache_dir());
    (
        ran.load(std::sync::atomic::Ordering::SeqCst),
        found.into_inner().expect("lock"),
    )
}

fn env_usize(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn fixed_seed_budget() {
    let t = std::time::Instant::now();
    let (ran, found) = campaign(CI_SEED, CI_CASES, 2);
    println!("fuzz: {ran} programs in {:.1} s", t.elapsed().as_secs_f64());
    assert!(
        found.is_empty(),
        "{} failing programs:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The long campaign: `TILELANG_FUZZ_CASES` programs (default 1000) from
/// `TILELANG_FUZZ_SEED` (default 1).
#[test]
#[ignore = "long campaign: TILELANG_FUZZ_CASES=5000 cargo test --release -p tilelang --test fuzz campaign -- --ignored"]
fn campaign_from_env() {
    let cases = env_usize("TILELANG_FUZZ_CASES").unwrap_or(1000) as usize;
    let seed = env_usize("TILELANG_FUZZ_SEED").unwrap_or(1);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let t = std::time::Instant::now();
    let (ran, found) = campaign(seed, cases, workers);
    println!(
        "fuzz campaign: seed {seed}, {ran} programs, {} failing, {:.0} s",
        found.len(),
        t.elapsed().as_secs_f64()
    );
    assert!(
        found.is_empty(),
        "{} failing programs:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The generator makes every kind of program, and its programs pass the DSL's checks.
#[test]
fn generator_covers_every_kind() {
    let mut kinds = std::collections::HashSet::new();
    let mut specialized = 0;
    for i in 0..400 {
        let p = Prog::gen(&mut Rng(program_seed(CI_SEED, i)));
        kinds.insert(std::mem::discriminant(&p.kind));
        let (k, _) = p.build();
        k.verify().unwrap_or_else(|d| panic!("{p:?}: {d}"));
        if p.warp_specialize && p.pipelined {
            let low = k
                .lower_aligned(Target::SM90)
                .unwrap_or_else(|d| panic!("{p:?}: {d}"));
            specialized += usize::from(low.attrs.warp_specialized.is_some());
        }
    }
    assert_eq!(kinds.len(), 6);
    // Some gemms run warp-specialized on sm_90a (a producer warpgroup, C by TMA store).
    assert!(specialized >= 5, "{specialized} specialized programs");
}

// ----- regressions found by the campaigns -----

/// Campaign of seed 2 (programs 17, 53, 116, 123, 154 of 400, all shrunk to this): a tile
/// wider than a static width (32 columns over 8) with a symbolic row count. The CPU backend's
/// store loop `#pragma omp simd for c < 32 { if (row < M && c < 8) C[..] = .. }` was
/// miscompiled by GCC 12.2 at -O3 -march=znver3 (it stored nothing); the C printer now tests
/// the row condition outside the loop. Elementwise and cumsum along both axes.
#[test]
fn regression_static_width_narrower_than_the_tile() {
    for kind in [
        Kind::Elementwise,
        Kind::Cumsum {
            dim: 1,
            reverse: false,
        },
        Kind::Cumsum {
            dim: 0,
            reverse: false,
        },
    ] {
        for (m, n) in [(1, 8), (4, 8), (2, 16)] {
            let p = Prog {
                kind,
                m,
                n,
                k: 1,
                sym_m: true,
                sym_n: false,
                bm: 4,
                bn: 32,
                bk: 0,
                threads: 64,
                stages: 2,
                din: F32,
                dout: F32,
                expr: E::X,
                branch: None,
                via_shared: false,
                pipelined: false,
                accumulate: false,
                warp_specialize: false,
            };
            if let Err((t, f)) = check(&p, 1, &TARGETS) {
                panic!("{p:?} on {t}: {f}");
            }
        }
    }
}

/// Found by the campaign of seed 4 (programs 464, 495 and 558 of 1,500, shrunk to these):
/// when the length of the reduced axis is static, a reduction into a fragment (`part`) that a
/// parallel loop then folds into the running result (`acc[i] = max(acc[i], part[i])`) was
/// refused with `error[layout-conflict]` on every GPU target: the fold loop, settled before the
/// chunk fragment the reduction reads, fixed a blocked layout that the reduction's output
/// contradicted. Layout inference now settles again biggest-first where that ends in a conflict.
#[test]
fn regression_static_reduced_length_layout() {
    let base = Prog {
        kind: Kind::RowReduce(Red::Max),
        m: 1,
        n: 32,
        k: 1,
        sym_m: false,
        sym_n: false,
        bm: 4,
        bn: 32,
        bk: 0,
        threads: 64,
        stages: 2,
        din: F32,
        dout: F32,
        expr: E::X,
        branch: None,
        via_shared: false,
        pipelined: false,
        accumulate: false,
        warp_specialize: false,
    };
    let col = Prog {
        kind: Kind::ColReduce(Red::Max),
        m: 100,
        n: 1,
        dout: F16,
        ..base.clone()
    };
    let mut failures = vec![];
    for p in [base, col] {
        for t in TARGETS {
            if let Err((t, f)) = check(&p, 1, &[t]) {
                failures.push(format!("{:?} on {t}: {f}", p.kind));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
