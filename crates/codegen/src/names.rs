//! Identifiers for generated source: unique per kernel, valid in C/C++/CUDA, never a keyword
//! or one of the runtime headers' names.

use std::collections::{HashMap, HashSet};

use tl_ir::{Buffer, Var};

const RESERVED: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "class",
    "namespace",
    "template",
    "this",
    "new",
    "delete",
    "operator",
    "private",
    "public",
    "using",
    "half",
    "dim3",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "main",
    "NAN",
    "INFINITY",
    "asm",
    "ptrs",
    "ints",
    "floats",
    "grid",
    "begin",
    "end",
    "blk",
    "uint4",
    "int4",
    "float4",
    "float2",
    "min",
    "max",
    "abs",
    "exp",
    "log",
    "sqrt",
    "pow",
];

#[derive(Default)]
pub struct Names {
    vars: HashMap<u64, String>,
    bufs: HashMap<u64, String>,
    taken: HashSet<String>,
}

fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.as_bytes()[0].is_ascii_digit() {
        out.insert(0, 'v');
    }
    if out.starts_with("tl_") || out.starts_with("__") || RESERVED.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

impl Names {
    pub fn new() -> Names {
        Names::default()
    }
    fn fresh(&mut self, base: &str) -> String {
        let base = sanitize(base);
        let mut name = base.clone();
        let mut n = 1;
        while self.taken.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
    pub fn var(&mut self, v: &Var) -> String {
        if let Some(n) = self.vars.get(&v.id()) {
            return n.clone();
        }
        let n = self.fresh(v.name());
        self.vars.insert(v.id(), n.clone());
        n
    }
    pub fn buf(&mut self, b: &Buffer) -> String {
        if let Some(n) = self.bufs.get(&b.id()) {
            return n.clone();
        }
        let n = self.fresh(b.name());
        self.bufs.insert(b.id(), n.clone());
        n
    }
    /// Reserve a name for generated helpers so user names never collide with it.
    pub fn reserve(&mut self, name: &str) {
        self.taken.insert(name.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tl_ir::DType;

    #[test]
    fn names_are_unique_and_valid() {
        let mut n = Names::new();
        let a = Var::new("i", DType::I32);
        let b = Var::new("i", DType::I32);
        let c = Var::new("float", DType::I32);
        let d = Var::new("tl_x", DType::I32);
        let e = Var::new("9 lives", DType::I32);
        assert_eq!(n.var(&a), "i");
        assert_eq!(n.var(&b), "i_1");
        assert_eq!(n.var(&a), "i");
        assert_eq!(n.var(&c), "float_");
        assert_eq!(n.var(&d), "tl_x_");
        assert_eq!(n.var(&e), "v9_lives");
    }
}
