//! How arguments reach a generated kernel. One convention for every backend, so the runtime
//! packs arguments without looking at generated code: tensors in parameter order as pointers;
//! integers (the symbolic sizes in declaration order, then integer and bool scalars in
//! parameter order) as int64; float scalars in parameter order as double.

use tl_ir::{Kernel, Param, Var};

/// One integer slot.
#[derive(Clone, Debug, PartialEq)]
pub enum IntSlot {
    Dim(Var),
    Scalar(Var),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Abi {
    /// Indices into `Kernel::params` of the tensors, in pointer order.
    pub tensors: Vec<usize>,
    pub ints: Vec<IntSlot>,
    /// Float scalars, in order.
    pub floats: Vec<Var>,
}

impl Abi {
    pub fn of(k: &Kernel) -> Abi {
        let mut tensors = vec![];
        let mut ints: Vec<IntSlot> = k.dims.iter().cloned().map(IntSlot::Dim).collect();
        let mut floats = vec![];
        for (i, p) in k.params.iter().enumerate() {
            match p {
                Param::Tensor { .. } => tensors.push(i),
                Param::Scalar(v) if v.dtype().is_float() => floats.push(v.clone()),
                Param::Scalar(v) => ints.push(IntSlot::Scalar(v.clone())),
            }
        }
        Abi {
            tensors,
            ints,
            floats,
        }
    }
}
