//! How arguments reach a generated kernel. One convention for every backend, so the runtime
//! packs arguments without looking at generated code: tensors in parameter order as pointers;
//! integers (the symbolic sizes in declaration order, then integer and bool scalars in
//! parameter order) as int64; float scalars in parameter order as double.

use tl_ir::{ExprKind, Intrinsic, Kernel, Param, Var};

/// One integer slot.
#[derive(Clone, Debug, PartialEq)]
pub enum IntSlot {
    Dim(Var),
    Scalar(Var),
}

/// A TMA descriptor (`CUtensorMap`) the kernel takes after its other parameters: built at
/// launch from a tensor argument, for boxes of `box_dims` (one per tensor dim, outermost
/// first) with a shared-memory swizzle of `swizzle` bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TmaSpec {
    /// Index into `Kernel::params` of the tensor.
    pub param: usize,
    pub box_dims: Vec<u32>,
    pub swizzle: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Abi {
    /// Indices into `Kernel::params` of the tensors, in pointer order.
    pub tensors: Vec<usize>,
    pub ints: Vec<IntSlot>,
    /// Float scalars, in order.
    pub floats: Vec<Var>,
    /// TMA descriptors, in parameter order (after every other parameter).
    pub tmaps: Vec<TmaSpec>,
    /// Tensors the kernel stages itself (`KernelAttrs::staged_rows`), by index into
    /// `Kernel::params`: after the tensor maps, each takes two pointers the runtime fills, its
    /// pitched scratch (which its tensor maps then describe) and its flags.
    pub staged: Vec<usize>,
}

/// The parameter index of each tensor the kernel stages itself, in `staged_rows` order.
pub fn staged_params(k: &Kernel) -> Vec<usize> {
    k.attrs
        .staged_rows
        .iter()
        .filter_map(|st| {
            k.params.iter().position(
                |p| matches!(p, Param::Tensor { buffer, .. } if buffer.id() == st.tensor.id()),
            )
        })
        .collect()
}

/// The TMA descriptors a lowered kernel's `TmaLoad`s and `TmaStore`s use, in order of first
/// use: one per (tensor, box, swizzle).
pub fn tma_specs(k: &Kernel) -> Vec<TmaSpec> {
    let mut out: Vec<TmaSpec> = vec![];
    k.body.walk(&mut |s| {
        for e in s.exprs() {
            e.visit(&mut |x| {
                let (box_dims, swizzle, args) = match x.kind() {
                    ExprKind::Call(
                        Intrinsic::TmaLoad {
                            box_dims, swizzle, ..
                        },
                        args,
                    )
                    | ExprKind::Call(Intrinsic::TmaStore { box_dims, swizzle }, args) => {
                        (box_dims, swizzle, args)
                    }
                    _ => return,
                };
                let Some(param) = args.get(1).and_then(|t| tensor_param(k, t)) else {
                    return;
                };
                let spec = TmaSpec {
                    param,
                    box_dims: box_dims.clone(),
                    swizzle: *swizzle,
                };
                if !out.contains(&spec) {
                    out.push(spec);
                }
            });
        }
    });
    out
}

/// The parameter index of the tensor `address_of(t[..])` names.
pub fn tensor_param(k: &Kernel, addr: &tl_ir::Expr) -> Option<usize> {
    let ExprKind::Call(Intrinsic::AddressOf, a) = addr.kind() else {
        return None;
    };
    let ExprKind::Load(b, _) = a.first()?.kind() else {
        return None;
    };
    k.params
        .iter()
        .position(|p| matches!(p, Param::Tensor { buffer, .. } if buffer.id() == b.id()))
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
            tmaps: tma_specs(k),
            staged: staged_params(k),
        }
    }
}
