//! The `schedule` stage on AMD (thread-level IR): the LDS reads and MFMAs of each gemm step,
//! which lowering emits in dependence order (all reads, then all MFMAs), interleaved in rounds
//! so that reads for the next MFMAs are in flight while the current ones run:
//!
//! ```text
//! sched_barrier | preamble reads (the resident rows, the first column) | sched_barrier
//! set_prio 1 | round 0: MFMAs of column 0 | set_prio 0 | sched_barrier
//! reads of column 2 | sched_barrier | set_prio 1 | round 1: column 1 | set_prio 0 | ...
//! ```
//!
//! A "row" is an atom of the operand every MFMA of the step reuses (kept in registers for the
//! whole step), a "column" an atom of the other operand (streamed: read for one round).
//! `sched_barrier(0)` stops LLVM's scheduler from merging the rounds back together; the
//! priority raise around each round's MFMAs (pinned to the accumulators it touches, so the
//! compiler keeps it in place) lets this wave's MFMAs issue ahead of other waves' reads. The
//! preamble has two forms (the seed notes' 6→4 and 10→8): half the rows and column 0, then
//! the first half-round while the other rows load (`Preamble::HalfRows`), or all rows and
//! column 0, then the whole first round (`Preamble::AllRows`). Columns are read one round
//! ahead (`prefetch` 1) or just before their round (0).
//!
//! The schedule only reorders statements the dependences allow (a read before every MFMA that
//! uses its registers, MFMAs on one accumulator in their order), so what the program computes
//! does not change; the simulator runs the scheduled code.

use std::collections::HashSet;

use tl_ir::{Buffer, Diagnostics, Expr, ExprKind, Intrinsic, Kernel, Scope, Stmt, StmtKind};
use tl_target::Target;

use crate::tile_util::eval;

/// How a step's first round gets its operands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Preamble {
    /// Half the rows and the first column, then the first half-round while the rest of the
    /// rows load (6 reads → 4 MFMAs for the 256×256×64 tile).
    HalfRows,
    /// All rows and the first column, then the whole first round (10 reads → 8 MFMAs).
    AllRows,
}

/// The schedule's options.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Options {
    pub preamble: Preamble,
    /// Rounds ahead that a column's reads are issued (0 or 1).
    pub prefetch: u32,
    /// Raise the wave's priority around each round's MFMAs.
    pub setprio: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            preamble: Preamble::AllRows,
            prefetch: 1,
            setprio: true,
        }
    }
}

impl Options {
    /// The options `TILELANG_AMD_SCHEDULE` asks for (comma-separated: `half-rows`,
    /// `all-rows`, `prefetch0`, `prefetch1`, `no-setprio`, `off`), for experiments; `None`
    /// when it says `off`.
    pub fn from_env() -> Option<Options> {
        let mut o = Options::default();
        if let Ok(v) = std::env::var("TILELANG_AMD_SCHEDULE") {
            for w in v.split(',').map(str::trim) {
                match w {
                    "off" => return None,
                    "half-rows" => o.preamble = Preamble::HalfRows,
                    "all-rows" => o.preamble = Preamble::AllRows,
                    "prefetch0" => o.prefetch = 0,
                    "prefetch1" => o.prefetch = 1,
                    "no-setprio" => o.setprio = false,
                    _ => {}
                }
            }
        }
        Some(o)
    }
}

/// The `schedule` stage (AMD targets; others pass through).
pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    if !target.is_hip() {
        return Ok(k);
    }
    let Some(opts) = Options::from_env() else {
        return Ok(k);
    };
    Ok(schedule_kernel(k, opts))
}

/// Schedule every gemm step of `k` with `opts`.
pub fn schedule_kernel(k: Kernel, opts: Options) -> Kernel {
    let body = k.body.map_post(&mut |s| match s.kind {
        StmtKind::Seq(v) => Stmt::seq(schedule_seq(v, opts), s.span),
        kind => Stmt::new(kind, s.span),
    });
    k.with_body(body)
}

/// A statement of a step: a read of LDS into registers, or an MFMA.
#[derive(Clone, Debug)]
enum Item {
    /// Writes local `buf` elements `lo..hi`.
    Read { buf: u64, lo: i64, hi: i64 },
    /// Reads the two operand ranges, accumulates into `acc` elements `lo..hi`.
    Mfma {
        a: (u64, i64, i64),
        b: (u64, i64, i64),
        acc: (Buffer, i64, i64),
    },
}

/// A constant element offset into a local buffer: `AddressOf(Load(local, [c]))`.
fn local_addr(e: &Expr) -> Option<(Buffer, i64)> {
    let ExprKind::Call(Intrinsic::AddressOf, a) = e.kind() else {
        return None;
    };
    let ExprKind::Load(b, idx) = a.first()?.kind() else {
        return None;
    };
    (b.scope() == Scope::Local && idx.len() == 1).then_some(())?;
    Some((b.clone(), idx[0].as_int()?))
}

fn classify(s: &Stmt) -> Option<Item> {
    match &s.kind {
        StmtKind::Eval(e) => match e.kind() {
            ExprKind::Call(Intrinsic::VecCopy { lanes }, args) if args.len() == 2 => {
                let (dst, off) = local_addr(&args[0])?;
                let from_lds = matches!(args[1].kind(), ExprKind::Call(Intrinsic::AddressOf, a)
                    if matches!(a.first().map(|x| x.kind()), Some(ExprKind::Load(b, _)) if b.scope() == Scope::Shared));
                from_lds.then_some(Item::Read {
                    buf: dst.id(),
                    lo: off,
                    hi: off + *lanes as i64,
                })
            }
            ExprKind::Call(Intrinsic::LdsReadTr16, args) if args.len() == 2 => {
                let (dst, off) = local_addr(&args[0])?;
                Some(Item::Read {
                    buf: dst.id(),
                    lo: off,
                    hi: off + 4,
                })
            }
            ExprKind::Call(Intrinsic::Mfma(m), args) if args.len() == 4 => {
                let (d, doff) = local_addr(&args[0])?;
                let (a, aoff) = local_addr(&args[1])?;
                let (b, boff) = local_addr(&args[2])?;
                let n = m.operand_elems() as i64;
                Some(Item::Mfma {
                    a: (a.id(), aoff, aoff + n),
                    b: (b.id(), boff, boff + n),
                    acc: (d, doff, doff + m.acc_elems() as i64),
                })
            }
            _ => None,
        },
        _ => None,
    }
}

fn overlaps(x: (u64, i64, i64), y: (u64, i64, i64)) -> bool {
    x.0 == y.0 && x.1 < y.2 && y.1 < x.2
}

/// Schedule the steps inside one sequence: each maximal run of reads and MFMAs with at least
/// two rounds.
fn schedule_seq(v: Vec<Stmt>, opts: Options) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(v.len());
    let mut run: Vec<(Stmt, Item)> = vec![];
    let flush = |run: &mut Vec<(Stmt, Item)>, out: &mut Vec<Stmt>| {
        let r = std::mem::take(run);
        match schedule_step(&r, opts) {
            Some(s) => out.extend(s),
            None => out.extend(r.into_iter().map(|(s, _)| s)),
        }
    };
    for s in v {
        match classify(&s) {
            // A read that refills registers an earlier read of this run wrote starts the next
            // step (the k chunks of one gemm reuse their operand registers): nothing moves
            // across that boundary.
            Some(Item::Read { buf, lo, hi })
                if run.iter().any(|(_, it)| match it {
                    Item::Read {
                        buf: b2,
                        lo: l2,
                        hi: h2,
                    } => overlaps((buf, lo, hi), (*b2, *l2, *h2)),
                    Item::Mfma { .. } => false,
                }) =>
            {
                flush(&mut run, &mut out);
                run.push((s, Item::Read { buf, lo, hi }));
            }
            Some(item) => run.push((s, item)),
            None => {
                flush(&mut run, &mut out);
                out.push(s);
            }
        }
    }
    flush(&mut run, &mut out);
    out
}

/// The rounds of one step, or `None` when it is not the shape lowering emits (then it stays
/// as it is).
fn schedule_step(run: &[(Stmt, Item)], opts: Options) -> Option<Vec<Stmt>> {
    let mfmas: Vec<usize> = (0..run.len())
        .filter(|&i| matches!(run[i].1, Item::Mfma { .. }))
        .collect();
    let reads: Vec<usize> = (0..run.len())
        .filter(|&i| matches!(run[i].1, Item::Read { .. }))
        .collect();
    if mfmas.len() < 4 || reads.is_empty() {
        return None;
    }
    // The reads that write an operand range.
    let feeding = |op: (u64, i64, i64)| -> Vec<usize> {
        reads
            .iter()
            .copied()
            .filter(|&r| match run[r].1 {
                Item::Read { buf, lo, hi } => overlaps((buf, lo, hi), op),
                _ => false,
            })
            .collect()
    };
    let operands = |i: usize| match &run[i].1 {
        Item::Mfma { a, b, acc } => Some((*a, *b, (acc.0.id(), acc.1))),
        Item::Read { .. } => None,
    };
    // Cells: consecutive MFMAs on one accumulator atom (the k_pack steps of one row and
    // column); the reads feeding each side of a cell are that side's atom.
    let mut cells: Vec<(Vec<usize>, Vec<usize>, Vec<usize>)> = vec![];
    let mut last_acc = None;
    for &i in &mfmas {
        let (a, b, acc) = operands(i)?;
        if last_acc != Some(acc) {
            cells.push((vec![], vec![], vec![]));
            last_acc = Some(acc);
        }
        let cell = cells.last_mut()?;
        cell.0.push(i);
        cell.1.extend(feeding(a));
        cell.2.extend(feeding(b));
    }
    for c in &mut cells {
        c.1.sort_unstable();
        c.1.dedup();
        c.2.sort_unstable();
        c.2.dedup();
    }
    // The column is the side that changes less often from cell to cell (lowering's outer
    // loop); the other side's atoms are the rows.
    let changes = |side: usize| {
        cells
            .windows(2)
            .filter(|w| {
                if side == 1 {
                    w[0].1 != w[1].1
                } else {
                    w[0].2 != w[1].2
                }
            })
            .count()
    };
    let col_side = if changes(1) <= changes(2) { 1 } else { 2 };
    let side = |c: &(Vec<usize>, Vec<usize>, Vec<usize>), s: usize| -> Vec<usize> {
        if s == 1 {
            c.1.clone()
        } else {
            c.2.clone()
        }
    };
    // Rounds: consecutive cells of one column.
    let mut rounds: Vec<(Vec<usize>, Vec<usize>)> = vec![];
    for c in &cells {
        let col = side(c, col_side);
        match rounds.last_mut() {
            Some((mf, rc)) if *rc == col => mf.extend(c.0.iter().copied()),
            _ => rounds.push((c.0.clone(), col)),
        }
    }
    if rounds.len() < 2 {
        return None;
    }
    let row_reads: Vec<usize> = {
        let mut v: Vec<usize> = cells.iter().flat_map(|c| side(c, 3 - col_side)).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let span = run[0].0.span;
    let barrier = || eval(Intrinsic::SchedBarrier { mask: 0 }, vec![], span);
    let stmt = |i: usize| run[i].0.clone();
    let prio = |p: u32, group: &[usize]| -> Stmt {
        // Pinned to the accumulator atoms the group writes.
        let mut pins: Vec<Expr> = vec![];
        let mut seen = HashSet::new();
        for &i in group {
            if let Item::Mfma { acc, .. } = &run[i].1 {
                if seen.insert((acc.0.id(), acc.1)) && acc.2 - acc.1 == 4 {
                    pins.push(crate::tile_util::address_of(&acc.0, vec![Expr::int(acc.1)]));
                }
            }
        }
        eval(Intrinsic::SetPrio { prio: p }, pins, span)
    };
    let mut out = vec![barrier()];
    let mut emitted: HashSet<usize> = HashSet::new();
    let mut emit = |out: &mut Vec<Stmt>, rs: &[usize]| {
        for &r in rs {
            if emitted.insert(r) {
                out.push(stmt(r));
            }
        }
    };
    let round = |out: &mut Vec<Stmt>, group: &[usize]| {
        out.push(barrier());
        if opts.setprio {
            out.push(prio(1, group));
        }
        out.extend(group.iter().map(|&i| stmt(i)));
        if opts.setprio {
            out.push(prio(0, group));
        }
        out.push(barrier());
    };
    let prefetch = opts.prefetch as usize;
    let (first, first_col) = &rounds[0];
    match opts.preamble {
        Preamble::AllRows => {
            emit(&mut out, &row_reads);
            emit(&mut out, first_col);
            for (_, col) in rounds.iter().skip(1).take(prefetch) {
                emit(&mut out, col);
            }
            round(&mut out, first);
        }
        Preamble::HalfRows => {
            // The first half of round 0 needs only some rows: read those and the column, run
            // it, then read the remaining rows while its MFMAs run.
            let half = cells
                .iter()
                .take_while(|c| first.contains(&c.0[0]))
                .count()
                .div_ceil(2);
            let head: Vec<usize> = cells.iter().take(half).flat_map(|c| c.0.clone()).collect();
            let head_rows: Vec<usize> = cells
                .iter()
                .take(half)
                .flat_map(|c| side(c, 3 - col_side))
                .collect();
            emit(&mut out, &head_rows);
            emit(&mut out, first_col);
            round(&mut out, &head);
            emit(&mut out, &row_reads);
            for (_, col) in rounds.iter().skip(1).take(prefetch) {
                emit(&mut out, col);
            }
            let tail: Vec<usize> = first
                .iter()
                .copied()
                .filter(|i| !head.contains(i))
                .collect();
            if !tail.is_empty() {
                round(&mut out, &tail);
            }
        }
    }
    for r in 1..rounds.len() {
        if let Some((_, col)) = rounds.get(r + prefetch) {
            emit(&mut out, col);
        }
        // What this round still needs (its column without prefetch).
        emit(&mut out, &rounds[r].1);
        round(&mut out, &rounds[r].0);
    }
    // Reads no MFMA uses (none in lowering's output) stay, at the end.
    emit(&mut out, &reads);
    if out.len() != run.len() + count_fences(&out) {
        return None;
    }
    Some(out)
}

/// Statements the schedule added (sched barriers and priority changes).
fn count_fences(v: &[Stmt]) -> usize {
    v.iter()
        .filter(|s| {
            crate::tile_util::is_call(s, |op| {
                matches!(
                    op,
                    Intrinsic::SchedBarrier { .. } | Intrinsic::SetPrio { .. }
                )
            })
        })
        .count()
}
