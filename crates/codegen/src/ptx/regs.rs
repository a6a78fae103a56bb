//! Virtual registers and operands of the PTX printer. PTX has unlimited typed virtual
//! registers; ptxas allocates the physical ones, so every value gets a fresh register and the
//! printer only declares how many of each class it used.

use std::fmt;

/// A PTX register class (the declared type of a virtual register).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Class {
    Pred,
    B16,
    B32,
    F32,
    B64,
}

impl Class {
    const ALL: [Class; 5] = [Class::Pred, Class::B16, Class::B32, Class::F32, Class::B64];

    fn prefix(self) -> &'static str {
        match self {
            Class::Pred => "%p",
            Class::B16 => "%h",
            Class::B32 => "%r",
            Class::F32 => "%f",
            Class::B64 => "%rd",
        }
    }

    fn declared(self) -> &'static str {
        match self {
            Class::Pred => ".pred",
            Class::B16 => ".b16",
            Class::B32 => ".b32",
            Class::F32 => ".f32",
            Class::B64 => ".b64",
        }
    }

    fn index(self) -> usize {
        match self {
            Class::Pred => 0,
            Class::B16 => 1,
            Class::B32 => 2,
            Class::F32 => 3,
            Class::B64 => 4,
        }
    }
}

/// An operand: a register, or an immediate the instruction can take as it is.
#[derive(Clone, PartialEq, Debug)]
pub enum Val {
    Reg(String, Class),
    /// An integer (or predicate, 0/1) constant.
    Int(i64),
    /// An f32 constant.
    F32(f32),
}

impl Val {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Val::Int(v) => Some(*v),
            _ => None,
        }
    }
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Reg(r, _) => f.write_str(r),
            Val::Int(v) => write!(f, "{v}"),
            // PTX's exact single-precision form: `0f` and the IEEE bits.
            Val::F32(v) => write!(f, "0f{:08X}", v.to_bits()),
        }
    }
}

/// Counts of the registers used per class.
#[derive(Default)]
pub struct Regs {
    counts: [u32; 5],
}

impl Regs {
    pub fn fresh(&mut self, c: Class) -> String {
        let n = &mut self.counts[c.index()];
        *n += 1;
        format!("{}{}", c.prefix(), *n)
    }

    /// The `.reg` declarations for everything handed out.
    pub fn declarations(&self) -> String {
        let mut out = String::new();
        for c in Class::ALL {
            let n = self.counts[c.index()];
            if n > 0 {
                out.push_str(&format!(
                    "  .reg {} {}<{}>;\n",
                    c.declared(),
                    c.prefix(),
                    n + 1
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_are_numbered_per_class_and_declared_once() {
        let mut r = Regs::default();
        assert_eq!(r.fresh(Class::F32), "%f1");
        assert_eq!(r.fresh(Class::F32), "%f2");
        assert_eq!(r.fresh(Class::B64), "%rd1");
        let d = r.declarations();
        assert!(d.contains(".reg .f32 %f<3>;"), "{d}");
        assert!(d.contains(".reg .b64 %rd<2>;"), "{d}");
        assert!(!d.contains(".pred"), "{d}");
    }

    #[test]
    fn f32_immediates_are_exact() {
        assert_eq!(Val::F32(1.0).to_string(), "0f3F800000");
        assert_eq!(Val::F32(f32::NEG_INFINITY).to_string(), "0fFF800000");
    }
}
