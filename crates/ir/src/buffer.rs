//! Buffers (named n-d arrays in a memory scope) and regions (rectangular windows into them).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::dtype::DType;
use crate::expr::{fresh_id, Expr};
use crate::span::Span;

/// Where a buffer lives. The scope decides who can see it and what it costs to touch.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Scope {
    /// Device memory, visible to every block (kernel parameters).
    Global,
    /// On-chip memory shared by the threads of one block.
    Shared,
    /// A block-level tile held in the registers of the block's threads, distributed by a
    /// thread-value layout the compiler infers.
    Fragment,
    /// Per-thread registers (after lowering, or an explicit per-thread array).
    Local,
    /// A single per-thread scalar variable.
    Var,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Shared => "shared",
            Scope::Fragment => "fragment",
            Scope::Local => "local",
            Scope::Var => "var",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug)]
pub struct BufferData {
    pub id: u64,
    pub name: String,
    pub shape: Vec<Expr>,
    pub dtype: DType,
    pub scope: Scope,
    /// Where the user declared it (for diagnostics).
    pub span: Span,
}

/// A buffer handle. Identity is by id: two buffers with the same name are different buffers.
#[derive(Clone)]
pub struct Buffer(Arc<BufferData>);

impl Buffer {
    pub fn new(
        name: impl Into<String>,
        shape: Vec<Expr>,
        dtype: DType,
        scope: Scope,
        span: Span,
    ) -> Buffer {
        Buffer(Arc::new(BufferData {
            id: fresh_id(),
            name: name.into(),
            shape,
            dtype,
            scope,
            span,
        }))
    }
    pub fn id(&self) -> u64 {
        self.0.id
    }
    pub fn name(&self) -> &str {
        &self.0.name
    }
    pub fn shape(&self) -> &[Expr] {
        &self.0.shape
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    pub fn scope(&self) -> Scope {
        self.0.scope
    }
    pub fn span(&self) -> Span {
        self.0.span
    }
    pub fn rank(&self) -> usize {
        self.0.shape.len()
    }
    /// The shape as integers, when every extent is a constant.
    pub fn const_shape(&self) -> Option<Vec<i64>> {
        self.shape().iter().map(|e| e.as_int()).collect()
    }
    pub fn const_numel(&self) -> Option<i64> {
        self.const_shape().map(|s| s.iter().product())
    }
    /// Row-major strides, innermost last.
    pub fn row_major_strides(&self) -> Vec<Expr> {
        let mut strides = vec![Expr::int(1); self.rank()];
        for d in (0..self.rank().saturating_sub(1)).rev() {
            strides[d] =
                crate::simplify::simplify(&(strides[d + 1].clone() * self.shape()[d + 1].clone()));
        }
        strides
    }
    /// A read of one element.
    pub fn at<I: Into<Expr>, const N: usize>(&self, idx: [I; N]) -> Expr {
        Expr::load(self, idx.into_iter().map(Into::into).collect())
    }
    /// A read of one element, indices as a vector.
    pub fn load(&self, idx: Vec<Expr>) -> Expr {
        Expr::load(self, idx)
    }
    /// The whole buffer as a region.
    pub fn full(&self) -> Region {
        Region::full(self)
    }
    /// A copy of this buffer's description with a new identity, name, shape or scope (used by
    /// passes that re-home a buffer, such as multi-versioning for pipelining).
    pub fn derive(&self, name: impl Into<String>, shape: Vec<Expr>, scope: Scope) -> Buffer {
        Buffer::new(name, shape, self.dtype(), scope, self.span())
    }
}

impl PartialEq for Buffer {
    fn eq(&self, o: &Buffer) -> bool {
        self.id() == o.id()
    }
}
impl Eq for Buffer {}
impl Hash for Buffer {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.id().hash(h)
    }
}
impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

/// A rectangular window `buffer[offsets[d] .. offsets[d] + extents[d]]`.
///
/// A region may have fewer extents than its buffer has dims is not allowed: a region always has
/// one offset and one extent per buffer dimension. Tile ops line up two regions by their
/// non-unit extents, so `A[row, 0:128]` (extents `[1, 128]`) copies into a 1-d `[128]` tile.
#[derive(Clone, PartialEq, Debug)]
pub struct Region {
    pub buffer: Buffer,
    pub offsets: Vec<Expr>,
    pub extents: Vec<Expr>,
}

impl Region {
    pub fn full(buf: &Buffer) -> Region {
        Region {
            buffer: buf.clone(),
            offsets: vec![Expr::int(0); buf.rank()],
            extents: buf.shape().to_vec(),
        }
    }
    pub fn new(buf: &Buffer, offsets: Vec<Expr>, extents: Vec<Expr>) -> Region {
        Region {
            buffer: buf.clone(),
            offsets,
            extents,
        }
    }
    pub fn rank(&self) -> usize {
        self.extents.len()
    }
    pub fn const_extents(&self) -> Option<Vec<i64>> {
        self.extents.iter().map(|e| e.as_int()).collect()
    }
    /// The extents with unit dimensions dropped: what two regions must agree on to be copied.
    pub fn squeezed_extents(&self) -> Vec<Expr> {
        self.extents
            .iter()
            .filter(|e| e.as_int() != Some(1))
            .cloned()
            .collect()
    }
    /// Is this the whole buffer, from the origin?
    pub fn is_full(&self) -> bool {
        self.offsets.iter().all(|o| o.as_int() == Some(0))
            && self
                .extents
                .iter()
                .zip(self.buffer.shape())
                .all(|(e, s)| e == s)
    }
    pub fn numel_const(&self) -> Option<i64> {
        self.const_extents().map(|e| e.iter().product())
    }
}

impl From<&Buffer> for Region {
    fn from(b: &Buffer) -> Region {
        Region::full(b)
    }
}
impl From<Buffer> for Region {
    fn from(b: Buffer) -> Region {
        Region::full(&b)
    }
}
