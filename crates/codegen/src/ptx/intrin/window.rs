//! `Intrinsic::LoadWindow` and `Intrinsic::StoreShifted` in PTX: 16 bytes from any element to a
//! 16-byte-aligned destination in three vector accesses (two `ld.global.nc.v4`, one `st.v4`)
//! and a few ALU instructions, instead of an access per element. Stages rows TMA cannot read.

use tl_ir::{DType, Expr};

use super::super::emit::{Addr, Emitter, R};
use super::super::regs::Class;
use super::GLOBAL;

impl Emitter {
    /// `e` (an integer of 32 or 64 bits) in a 64-bit register, widened as any cast is.
    fn wide(&mut self, e: &Expr) -> R<String> {
        let v = self.expr(&e.clone().cast(DType::I64))?;
        Ok(self.reg(&v, Class::B64))
    }

    /// The byte address of element `e` from `base` (a tensor's first element, of `eb`-byte
    /// elements).
    fn element_address(&mut self, base: &Addr, e: &Expr, eb: usize) -> R<String> {
        let first = match base.off {
            0 => base.base.clone(),
            off => {
                let r = self.fresh(Class::B64);
                self.ins(&format!("add.s64 {r}, {}, {off}", base.base));
                r
            }
        };
        if e.as_int() == Some(0) {
            return Ok(first);
        }
        let n = self.wide(e)?;
        let at = self.fresh(Class::B64);
        self.ins(&format!("mad.lo.s64 {at}, {n}, {eb}, {first}"));
        Ok(at)
    }

    /// `Intrinsic::LoadWindow`: args window, tensor, offset, count.
    pub(super) fn load_window(&mut self, args: &[Expr]) -> R<()> {
        let (w, wt) = self.reg_words(args.first(), 8)?;
        if wt.bytes() != 4 {
            return Err("load_window into a window of other than 32-bit words".into());
        }
        let (t, tb) = self.mem_arg(args.get(1), GLOBAL)?;
        let eb = tb.dtype().bytes();
        if !matches!(eb, 1 | 2 | 4) {
            return Err(format!("load_window of {}-byte elements", eb));
        }
        let lo = self.element_address(&t, &Expr::int_of(0, DType::I64), eb)?;
        let src = self.element_address(&t, &args[2], eb)?;
        let hi = self.element_address(&t, &args[3], eb)?;
        let (a0, end) = (self.fresh(Class::B64), self.fresh(Class::B64));
        self.ins(&format!("and.b64 {a0}, {src}, -16"));
        self.ins(&format!("add.s64 {end}, {a0}, 32"));
        let (p0, p1) = (self.fresh(Class::Pred), self.fresh(Class::Pred));
        self.ins(&format!("setp.ge.u64 {p0}, {a0}, {lo}"));
        self.ins(&format!("setp.le.u64 {p1}, {end}, {hi}"));
        self.ins(&format!("and.pred {p0}, {p0}, {p1}"));
        let (slow, join) = (self.label(), self.label());
        self.flush_writes();
        self.ins(&format!("@!{p0} bra {slow}"));
        self.ins(&format!(
            "ld.global.nc.v4.b32 {{{}}}, [{a0}]",
            w[..4].join(", ")
        ));
        self.ins(&format!(
            "ld.global.nc.v4.b32 {{{}}}, [{a0}+16]",
            w[4..].join(", ")
        ));
        self.ins(&format!("bra.uni {join}"));
        // The window leaves the tensor: its elements inside, one by one.
        self.place(&slow);
        for r in &w {
            self.ins(&format!("mov.b32 {r}, 0"));
        }
        let ty = match eb {
            1 => "u8",
            2 => "u16",
            _ => "b32",
        };
        let (at, piece) = (self.fresh(Class::B64), self.fresh(Class::B32));
        let (inside, below) = (self.fresh(Class::Pred), self.fresh(Class::Pred));
        for e in 0..32 / eb {
            let byte = e * eb;
            self.ins(&format!("add.s64 {at}, {a0}, {byte}"));
            self.ins(&format!("setp.ge.u64 {inside}, {at}, {lo}"));
            self.ins(&format!("setp.lt.u64 {below}, {at}, {hi}"));
            self.ins(&format!("and.pred {inside}, {inside}, {below}"));
            self.ins(&format!("mov.b32 {piece}, 0"));
            self.ins(&format!("@{inside} ld.global.nc.{ty} {piece}, [{at}]"));
            self.ins(&format!("shl.b32 {piece}, {piece}, {}", 8 * (byte % 4)));
            let word = &w[byte / 4];
            self.ins(&format!("or.b32 {word}, {word}, {piece}"));
        }
        self.place(&join);
        Ok(())
    }

    /// `Intrinsic::StoreShifted`: args destination, window, tensor, offset. The words
    /// `q .. q + 5` of the window (`q` the source's word within its 16-byte unit) by selects,
    /// so that the window stays in registers; four funnel shifts by the byte within the word.
    pub(super) fn store_shifted(&mut self, args: &[Expr]) -> R<()> {
        let (d, _) = self.mem_arg(args.first(), GLOBAL)?;
        let (w, wt) = self.reg_words(args.get(1), 8)?;
        if wt.bytes() != 4 {
            return Err("store_shifted from a window of other than 32-bit words".into());
        }
        let (t, tb) = self.mem_arg(args.get(2), GLOBAL)?;
        let src = self.element_address(&t, &args[3], tb.dtype().bytes())?;
        let (s, q, r) = (
            self.fresh(Class::B32),
            self.fresh(Class::B32),
            self.fresh(Class::B32),
        );
        self.ins(&format!("cvt.u32.u64 {s}, {src}"));
        self.ins(&format!("bfe.u32 {q}, {s}, 2, 2"));
        self.ins(&format!("and.b32 {r}, {s}, 3"));
        self.ins(&format!("shl.b32 {r}, {r}, 3"));
        let picks: Vec<String> = (1..4).map(|_| self.fresh(Class::Pred)).collect();
        for (i, p) in picks.iter().enumerate() {
            self.ins(&format!("setp.eq.u32 {p}, {q}, {}", i + 1));
        }
        let mut v = vec![];
        for i in 0..5 {
            let x = self.fresh(Class::B32);
            self.ins(&format!("mov.b32 {x}, {}", w[i]));
            for (j, p) in picks.iter().enumerate() {
                self.ins(&format!("selp.b32 {x}, {}, {x}, {p}", w[i + j + 1]));
            }
            v.push(x);
        }
        let o: Vec<String> = (0..4).map(|_| self.fresh(Class::B32)).collect();
        for i in 0..4 {
            self.ins(&format!(
                "shf.r.wrap.b32 {}, {}, {}, {r}",
                o[i],
                v[i],
                v[i + 1]
            ));
        }
        self.ins(&format!(
            "st.global.v4.b32 {}, {{{}}}",
            d.operand(),
            o.join(", ")
        ));
        Ok(())
    }
}

impl Emitter {
    /// `Intrinsic::ShiftedVecCopy`: args destination, source (both shared, 2-byte elements).
    /// Four `ld.shared.b32` from the word holding the source (a fifth, predicated, where it
    /// starts mid-word), four funnel shifts by that half, one `st.shared.v4`.
    pub(super) fn shifted_vec_copy(&mut self, args: &[Expr]) -> R<()> {
        let (d, db) = self.mem_arg(args.first(), super::SHARED)?;
        let (s, sb) = self.mem_arg(args.get(1), super::SHARED)?;
        if db.dtype().bytes() != 2 || sb.dtype().bytes() != 2 {
            return Err(format!(
                "shifted_vec_copy of {} into {} (2-byte elements only)",
                sb.dtype(),
                db.dtype()
            ));
        }
        // A shared address is a 32-bit register plus a constant (`Emitter::address`).
        let a = self.fresh(Class::B32);
        self.ins(&format!("add.u32 {a}, {}, {}", s.base, s.off));
        let (w0, r, p) = (
            self.fresh(Class::B32),
            self.fresh(Class::B32),
            self.fresh(Class::Pred),
        );
        self.ins(&format!("and.b32 {w0}, {a}, -4"));
        self.ins(&format!("and.b32 {r}, {a}, 2"));
        self.ins(&format!("shl.b32 {r}, {r}, 3"));
        self.ins(&format!("setp.ne.u32 {p}, {r}, 0"));
        let w: Vec<String> = (0..5).map(|_| self.fresh(Class::B32)).collect();
        for (i, x) in w.iter().take(4).enumerate() {
            self.ins(&format!("ld.shared.b32 {x}, [{w0}+{}]", 4 * i));
        }
        self.ins(&format!("mov.b32 {}, 0", w[4]));
        self.ins(&format!("@{p} ld.shared.b32 {}, [{w0}+16]", w[4]));
        let o: Vec<String> = (0..4).map(|_| self.fresh(Class::B32)).collect();
        for i in 0..4 {
            self.ins(&format!(
                "shf.r.clamp.b32 {}, {}, {}, {r}",
                o[i],
                w[i],
                w[i + 1]
            ));
        }
        self.ins(&format!(
            "st.shared.v4.b32 {}, {{{}}}",
            d.operand(),
            o.join(", ")
        ));
        Ok(())
    }
}
