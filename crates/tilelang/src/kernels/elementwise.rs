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

/// C = relu(A + B) on `[rows, cols]` tensors of any shape: a block takes `block` columns of one
/// row (rows along the grid's x, which allows 2^31 - 1 of them). A tensor may have more than
/// 2^31 elements: offsets into global tensors are 64-bit.
pub fn add_relu_2d(dtype: DType, block: i64, threads: u32) -> Kernel {
    Kernel::build("add_relu_2d", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let a = k.input("A", [&m, &n], dtype);
        let b = k.input("B", [&m, &n], dtype);
        let c = k.output("C", [&m, &n], dtype);
        k.launch([m.clone(), ceildiv(&n, block)], threads, |t, [row, bx]| {
            let af = t.alloc_fragment_named("a", [1, block], dtype);
            let bf = t.alloc_fragment_named("b", [1, block], dtype);
            t.copy(a.tile([row.clone(), &bx * block]), &af);
            t.copy(b.tile([row.clone(), &bx * block]), &bf);
            t.parallel([1, block], |t, [i, j]| {
                t.store(&af, [&i, &j], max(af.at([&i, &j]) + bf.at([&i, &j]), 0));
            });
            t.copy(&af, c.tile([row.clone(), &bx * block]));
        });
    })
}
