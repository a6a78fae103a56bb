//! A printer whose text a person can read. Names are made unique in order of first appearance
//! (`i`, `i_1`, …), so the text is also a normal form: equal kernels print equally whatever the
//! ids of their variables, which is what the compile cache hashes.

use std::collections::HashMap;
use std::fmt::{self, Write};

use crate::buffer::{Buffer, Region};
use crate::dtype::DType;
use crate::expr::{BinOp, Expr, ExprKind, UnOp, Var};
use crate::kernel::{Kernel, Param};
use crate::stmt::{ForKind, Stmt, StmtKind, TileOp};

#[derive(Default)]
pub struct Printer {
    unique: bool,
    vars: HashMap<u64, String>,
    bufs: HashMap<u64, String>,
    taken: HashMap<String, usize>,
    out: String,
    indent: usize,
}

fn prec(e: &Expr) -> u8 {
    match e.kind() {
        ExprKind::Or(..) => 1,
        ExprKind::And(..) => 2,
        ExprKind::Cmp(..) => 3,
        ExprKind::Bin(op, ..) => match op {
            BinOp::BitOr => 4,
            BinOp::BitXor => 5,
            BinOp::BitAnd => 6,
            BinOp::Shl | BinOp::Shr => 7,
            BinOp::Add | BinOp::Sub => 8,
            BinOp::Mul | BinOp::Div | BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod => 9,
            BinOp::Min | BinOp::Max | BinOp::Pow => 11,
        },
        ExprKind::Unary(UnOp::Neg | UnOp::Not, _) => 10,
        ExprKind::Int(v) if *v < 0 => 10,
        ExprKind::Float(v) if *v < 0.0 => 10,
        _ => 11,
    }
}

fn fmt_float(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }
    } else if v.is_nan() {
        "nan".into()
    } else if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v:?}")
    }
}

impl Printer {
    /// A printer that renames variables and buffers apart (`i`, `i_1`).
    pub fn new() -> Printer {
        Printer {
            unique: true,
            ..Default::default()
        }
    }
    /// A printer that prints names as they are (for one-off expressions).
    pub fn raw() -> Printer {
        Printer::default()
    }
    pub fn finish(self) -> String {
        self.out
    }

    fn fresh(&mut self, base: &str) -> String {
        let n = self.taken.entry(base.to_string()).or_insert(0);
        let name = if *n == 0 {
            base.to_string()
        } else {
            format!("{base}_{n}")
        };
        *n += 1;
        name
    }
    pub fn var_name(&mut self, v: &Var) -> String {
        if !self.unique {
            return v.name().to_string();
        }
        if let Some(n) = self.vars.get(&v.id()) {
            return n.clone();
        }
        let n = self.fresh(v.name());
        self.vars.insert(v.id(), n.clone());
        n
    }
    pub fn buf_name(&mut self, b: &Buffer) -> String {
        if !self.unique {
            return b.name().to_string();
        }
        if let Some(n) = self.bufs.get(&b.id()) {
            return n.clone();
        }
        let n = self.fresh(b.name());
        self.bufs.insert(b.id(), n.clone());
        n
    }

    pub fn expr_string(&mut self, e: &Expr) -> String {
        let mut s = String::new();
        self.expr(e, &mut s);
        s
    }

    fn child(&mut self, e: &Expr, min_prec: u8, s: &mut String) {
        if prec(e) < min_prec {
            s.push('(');
            self.expr(e, s);
            s.push(')');
        } else {
            self.expr(e, s);
        }
    }

    fn list(&mut self, es: &[Expr], s: &mut String) {
        for (i, e) in es.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            self.expr(e, s);
        }
    }

    pub fn expr(&mut self, e: &Expr, s: &mut String) {
        let p = prec(e);
        match e.kind() {
            ExprKind::Int(v) => {
                if e.dtype() == DType::I32 {
                    let _ = write!(s, "{v}");
                } else {
                    let _ = write!(s, "{}({v})", e.dtype());
                }
            }
            ExprKind::Float(v) => {
                if e.dtype() == DType::F32 {
                    s.push_str(&fmt_float(*v));
                } else {
                    let _ = write!(s, "{}({})", e.dtype(), fmt_float(*v));
                }
            }
            ExprKind::Bool(b) => {
                let _ = write!(s, "{b}");
            }
            ExprKind::Var(v) => {
                let n = self.var_name(v);
                s.push_str(&n);
            }
            ExprKind::Bin(op @ (BinOp::Min | BinOp::Max | BinOp::Pow), a, b) => {
                s.push_str(op.symbol());
                s.push('(');
                self.expr(a, s);
                s.push_str(", ");
                self.expr(b, s);
                s.push(')');
            }
            ExprKind::Bin(op, a, b) => {
                self.child(a, p, s);
                let _ = write!(s, " {} ", op.symbol());
                self.child(b, p + 1, s);
            }
            ExprKind::Cmp(op, a, b) => {
                self.child(a, p + 1, s);
                let _ = write!(s, " {} ", op.symbol());
                self.child(b, p + 1, s);
            }
            ExprKind::And(a, b) => {
                self.child(a, p, s);
                s.push_str(" && ");
                self.child(b, p + 1, s);
            }
            ExprKind::Or(a, b) => {
                self.child(a, p, s);
                s.push_str(" || ");
                self.child(b, p + 1, s);
            }
            ExprKind::Unary(UnOp::Neg, a) => {
                s.push('-');
                self.child(a, 10, s);
            }
            ExprKind::Unary(UnOp::Not, a) => {
                s.push('!');
                self.child(a, 10, s);
            }
            ExprKind::Unary(op, a) => {
                let _ = write!(s, "{}(", op.name());
                self.expr(a, s);
                s.push(')');
            }
            ExprKind::Select(c, a, b) | ExprKind::IfThenElse(c, a, b) => {
                let name = if matches!(e.kind(), ExprKind::Select(..)) {
                    "select"
                } else {
                    "if_then_else"
                };
                let _ = write!(s, "{name}(");
                self.list(&[c.clone(), a.clone(), b.clone()], s);
                s.push(')');
            }
            ExprKind::Cast(a) => {
                let _ = write!(s, "cast<{}>(", e.dtype());
                self.expr(a, s);
                s.push(')');
            }
            ExprKind::Load(b, idx) => {
                let n = self.buf_name(b);
                s.push_str(&n);
                s.push('[');
                self.list(idx, s);
                s.push(']');
            }
            ExprKind::Call(op, args) => {
                let _ = write!(s, "{}(", op.name());
                self.list(args, s);
                s.push(')');
            }
        }
    }

    fn line(&mut self, text: &str) {
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    pub fn region(&mut self, r: &Region) -> String {
        let mut s = self.buf_name(&r.buffer);
        if r.is_full() {
            return s;
        }
        s.push('[');
        for d in 0..r.rank() {
            if d > 0 {
                s.push_str(", ");
            }
            let o = self.expr_string(&r.offsets[d]);
            let e = self.expr_string(&r.extents[d]);
            if r.extents[d].as_int() == Some(1) {
                s.push_str(&o);
            } else {
                let _ = write!(s, "{o} +: {e}");
            }
        }
        s.push(']');
        s
    }

    fn decl(&mut self, b: &Buffer) -> String {
        let name = self.buf_name(b);
        let mut shape = String::new();
        self.list(b.shape(), &mut shape);
        format!("{} {name}: {}[{shape}]", b.scope(), b.dtype())
    }

    pub fn stmt(&mut self, st: &Stmt) {
        match &st.kind {
            StmtKind::Seq(v) => {
                for s in v {
                    self.stmt(s);
                }
            }
            StmtKind::Let { var, value } => {
                let n = self.var_name(var);
                let v = self.expr_string(value);
                self.line(&format!("let {n}: {} = {v}", var.dtype()));
            }
            StmtKind::Alloc(b) => {
                let d = self.decl(b);
                self.line(&format!("alloc {d}"));
            }
            StmtKind::If { cond, then_, else_ } => {
                let c = self.expr_string(cond);
                self.line(&format!("if {c} {{"));
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
                let n = self.buf_name(buffer);
                let mut idx = String::new();
                self.list(indices, &mut idx);
                let v = self.expr_string(value);
                self.line(&format!("{n}[{idx}] = {v}"));
            }
            StmtKind::For(l) => {
                let v = self.var_name(&l.var);
                let lo = self.expr_string(&l.min);
                let ext = self.expr_string(&l.extent);
                let range = if l.min.as_int() == Some(0) {
                    format!("0..{ext}")
                } else {
                    format!("{lo}..{lo} + {ext}")
                };
                let extra = match &l.kind {
                    ForKind::Pipelined {
                        stages,
                        order,
                        stage,
                    } => {
                        let mut x = format!(" stages={stages}");
                        if let Some(o) = order {
                            let _ = write!(x, " order={o:?}");
                        }
                        if let Some(s) = stage {
                            let _ = write!(x, " stage={s:?}");
                        }
                        x
                    }
                    _ => String::new(),
                };
                self.line(&format!("for {v} in {range} {}{extra} {{", l.kind.name()));
                self.indent += 1;
                self.stmt(&l.body);
                self.indent -= 1;
                self.line("}");
            }
            StmtKind::Op(op) => {
                let text = self.tile_op(op);
                self.line(&text);
            }
            StmtKind::Eval(e) => {
                let s = self.expr_string(e);
                self.line(&s);
            }
            StmtKind::AnnotateLayout { buffer, layout } => {
                let n = self.buf_name(buffer);
                self.line(&format!("annotate_layout {n} = {layout}"));
            }
        }
    }

    fn tile_op(&mut self, op: &TileOp) -> String {
        match op {
            TileOp::Copy(c) => {
                let s = self.region(&c.src);
                let d = self.region(&c.dst);
                let a = if c.asynchronous { " async" } else { "" };
                let g = match &c.guard {
                    Some(g) => format!(" where {}", self.expr_string(g)),
                    None => String::new(),
                };
                let t = match &c.tma_barrier {
                    Some(b) => format!(" tma on {}", self.expr_string(b)),
                    None => String::new(),
                };
                format!("copy {s} -> {d}{a}{g}{t}")
            }
            TileOp::Gemm(g) => {
                let a = self.region(&g.a);
                let b = self.region(&g.b);
                let c = self.region(&g.c);
                let mut flags = vec![];
                if g.trans_a {
                    flags.push("trans_a".to_string());
                }
                if g.trans_b {
                    flags.push("trans_b".to_string());
                }
                if let Some(i) = g.instruction {
                    flags.push(i.name());
                }
                if g.overlap {
                    flags.push("overlap".to_string());
                }
                if g.schedule.in_flight > 0 {
                    flags.push(format!("in_flight={}", g.schedule.in_flight));
                }
                if g.schedule.operands_fenced {
                    flags.push("operands_fenced".to_string());
                }
                if g.clear_accum {
                    flags.push("clear_accum".to_string());
                }
                if g.policy != Default::default() {
                    flags.push(format!("policy={:?}", g.policy));
                }
                let f = if flags.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", flags.join(", "))
                };
                format!("gemm {a} x {b} -> {c}{f}")
            }
            TileOp::Reduce(r) => {
                let s = self.region(&r.src);
                let d = self.region(&r.dst);
                let acc = if r.clear { "" } else { " accumulate" };
                format!("reduce_{} {s} dim={} -> {d}{acc}", r.kind.name(), r.dim)
            }
            TileOp::Fill(f) => {
                let d = self.region(&f.dst);
                let v = self.expr_string(&f.value);
                format!("fill {d} = {v}")
            }
            TileOp::Atomic(a) => {
                let s = self.region(&a.src);
                let d = self.region(&a.dst);
                format!("{} {s} -> {d}", a.kind.op_name())
            }
            TileOp::Cumsum(c) => {
                let s = self.region(&c.src);
                let d = self.region(&c.dst);
                let r = if c.reverse { " reverse" } else { "" };
                format!("cumsum {s} dim={} -> {d}{r}", c.dim)
            }
        }
    }

    pub fn kernel(&mut self, k: &Kernel) {
        let mut params = vec![];
        for p in &k.params {
            match p {
                Param::Tensor { buffer, role } => {
                    let d = self.decl(buffer);
                    params.push(format!("{} {d}", role.name()));
                }
                Param::Scalar(v) => {
                    let n = self.var_name(v);
                    params.push(format!("{n}: {}", v.dtype()));
                }
            }
        }
        let dims: Vec<String> = k.dims.iter().map(|d| self.var_name(d)).collect();
        let mut grid = String::new();
        self.list(&k.grid, &mut grid);
        let bvars: Vec<String> = k.block_vars.iter().map(|v| self.var_name(v)).collect();
        self.line(&format!("kernel {}<{}>(", k.name, dims.join(", ")));
        self.indent += 1;
        for p in &params {
            self.line(&format!("{p},"));
        }
        self.indent -= 1;
        let mut head = format!(
            ") grid [{grid}] as [{}] threads {}",
            bvars.join(", "),
            k.threads
        );
        if let Some(p) = k.attrs.swizzle_panel {
            let _ = write!(head, " swizzle_panel {p}");
        }
        if let Some(b) = k.attrs.min_blocks_per_sm {
            let _ = write!(head, " min_blocks_per_sm {b}");
        }
        if let Some(b) = k.attrs.persistent_blocks {
            let _ = write!(head, " persistent_blocks {b}");
        }
        if let Some(c) = k.attrs.cluster {
            let _ = write!(head, " cluster {}x{}", c.dim, c.size);
        }
        if let Some(r) = k.attrs.producer_registers {
            let _ = write!(head, " producer_registers {r}");
        }
        if let Some(b) = k.attrs.wgmma_batch {
            let _ = write!(head, " wgmma_batch {b}");
        }
        head.push_str(" {");
        self.line(&head);
        self.indent += 1;
        for (b, f) in &k.attrs.fragments {
            let n = self.buf_name(b);
            self.line(&format!("layout {n} = {}", f.to_cute()));
        }
        for (b, l) in &k.attrs.smem_layouts {
            let n = self.buf_name(b);
            self.line(&format!("layout {n} = {l}"));
        }
        for (v, f) in &k.attrs.nest_layouts {
            let n = self.var_name(v);
            self.line(&format!("layout loop {n} = {}", f.to_cute()));
        }
        self.stmt(&k.body);
        self.indent -= 1;
        self.line("}");
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Printer::raw().expr_string(self))
    }
}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = Printer::new();
        p.stmt(self);
        f.write_str(&p.finish())
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = Printer::new();
        p.kernel(self);
        f.write_str(&p.finish())
    }
}
