//! Conversions that let kernels pass shapes, indices and tiles naturally: `[m, k]`,
//! `(m, 64)`, `a.tile([by * bm, ko * bk])`, `&a_s`.

use tl_ir::{Buffer, DType, Expr, Intrinsic, Span};

/// A list of expressions: an array, a vector, or a tuple mixing `Expr`s and integers.
pub trait IntoExprs {
    fn into_exprs(self) -> Vec<Expr>;
}

impl<T: Into<Expr>, const N: usize> IntoExprs for [T; N] {
    fn into_exprs(self) -> Vec<Expr> {
        self.into_iter().map(Into::into).collect()
    }
}
impl<T: Into<Expr>> IntoExprs for Vec<T> {
    fn into_exprs(self) -> Vec<Expr> {
        self.into_iter().map(Into::into).collect()
    }
}
impl<T: Into<Expr> + Clone> IntoExprs for &[T] {
    fn into_exprs(self) -> Vec<Expr> {
        self.iter().cloned().map(Into::into).collect()
    }
}
macro_rules! tuple_exprs {
    ($($t:ident $i:tt),*) => {
        impl<$($t: Into<Expr>),*> IntoExprs for ($($t,)*) {
            fn into_exprs(self) -> Vec<Expr> {
                vec![$(self.$i.into()),*]
            }
        }
    };
}
tuple_exprs!(A 0);
tuple_exprs!(A 0, B 1);
tuple_exprs!(A 0, B 1, C 2);
tuple_exprs!(A 0, B 1, C 2, D 3);
tuple_exprs!(A 0, B 1, C 2, D 3, E 4);

/// A tile of a buffer as a tile op argument: its origin, and its extents when known. A tile
/// made with [`BufferExt::tile`] takes its extents from the other side of the copy.
#[derive(Clone, Debug)]
pub struct Tile {
    pub buffer: Buffer,
    pub offsets: Vec<Expr>,
    pub extents: Option<Vec<Expr>>,
    pub span: Span,
}

impl From<&Buffer> for Tile {
    fn from(b: &Buffer) -> Tile {
        Tile {
            buffer: b.clone(),
            offsets: vec![Expr::int(0); b.rank()],
            extents: Some(b.shape().to_vec()),
            span: Span::UNKNOWN,
        }
    }
}
impl From<Buffer> for Tile {
    fn from(b: Buffer) -> Tile {
        Tile::from(&b)
    }
}
impl From<&Tile> for Tile {
    fn from(t: &Tile) -> Tile {
        t.clone()
    }
}

/// Tile slicing on buffers.
pub trait BufferExt {
    /// The tile starting at `offsets`; its extents come from the other operand of the op.
    fn tile(&self, offsets: impl IntoExprs) -> Tile;
    /// The tile `[offsets[d] .. offsets[d] + extents[d]]`.
    fn region(&self, offsets: impl IntoExprs, extents: impl IntoExprs) -> Tile;
}

impl BufferExt for Buffer {
    #[track_caller]
    fn tile(&self, offsets: impl IntoExprs) -> Tile {
        Tile {
            buffer: self.clone(),
            offsets: offsets.into_exprs(),
            extents: None,
            span: Span::caller(),
        }
    }
    #[track_caller]
    fn region(&self, offsets: impl IntoExprs, extents: impl IntoExprs) -> Tile {
        Tile {
            buffer: self.clone(),
            offsets: offsets.into_exprs(),
            extents: Some(extents.into_exprs()),
            span: Span::caller(),
        }
    }
}

/// The address of element `idx` of `buf`: the memory operand of an intrinsic a kernel calls
/// through [`TileScope::evaluate`](super::TileScope::evaluate), which the compiler's analyses
/// read as an access to that buffer.
pub fn element_address(buf: &Buffer, idx: impl IntoExprs) -> Expr {
    Expr::call(
        Intrinsic::AddressOf,
        vec![Expr::load(buf, idx.into_exprs())],
        DType::U64,
    )
}
