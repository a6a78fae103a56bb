//! Fused element-wise: C = relu(A + B) on vectors of any length.

use crate::prelude::*;

pub fn add_relu(dtype: DType, block: i64, threads: u32) -> Kernel {
    Kernel::build("add_relu", |k| {
        let n = k.dim("N");
        let a = k.input("A", [&n], dtype);
        let b = k.input("B", [&n], dtype);
        let c = k.output("C", [&n], dtype);
        k.launch([ceildiv(&n, block)], threads, |t, [bx]| {
            let af = t.alloc_fragment_named("a", [block], dtype);
            let bf = t.alloc_fragment_named("b", [block], dtype);
            t.copy(a.tile([&bx * block]), &af);
            t.copy(b.tile([&bx * block]), &bf);
            t.parallel([block], |t, [i]| {
                t.store(&af, [&i], max(af.at([&i]) + bf.at([&i]), 0));
            });
            t.copy(&af, c.tile([&bx * block]));
        });
    })
}
