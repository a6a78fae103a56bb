//! The one error type of the layout algebra.
//!
//! Every operation whose precondition can fail returns `Result<_, LayoutError>` instead of
//! panicking or silently producing a layout that does not satisfy the operation's
//! post-condition. The messages name the layouts involved (in CuTe notation) so that a
//! compiler diagnostic can quote them verbatim.

use thiserror::Error;

/// Why a layout operation could not produce a correct result.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// A shape and a stride do not have the same tree structure.
    #[error(
        "shape {shape} and stride {stride} are not congruent (they must have the same nesting)"
    )]
    NotCongruent { shape: String, stride: String },

    /// A shape has an extent below 1 (CuTe shapes are positive).
    #[error("shape {shape} has a non-positive extent {extent}; every extent must be >= 1")]
    NonPositiveShape { shape: String, extent: i64 },

    /// An empty tuple `()` where a shape, stride or tiler needs at least one mode.
    #[error("empty tuple in {what}; a {what} needs at least one mode")]
    EmptyTuple { what: String },

    /// A product, sum or shift does not fit in 64 bits.
    #[error("integer overflow while computing {what}")]
    Overflow { what: String },

    /// Composition hit a stride or shape divisibility condition that does not hold, so no
    /// layout R with R(i) = A(B(i)) and R compatible with B exists in shape:stride form.
    #[error("cannot compose {lhs} o {rhs}: {reason}")]
    Composition {
        lhs: String,
        rhs: String,
        reason: String,
    },

    /// complement(A, M) requires A to be injective with strides that nest.
    #[error("cannot take the complement of {layout} (cotarget {cotarget}): {reason}")]
    Complement {
        layout: String,
        cotarget: String,
        reason: String,
    },

    /// left_inverse needs every stride to be divisible by the size of the smaller modes.
    #[error("{layout} has no left inverse: {reason}")]
    LeftInverse { layout: String, reason: String },

    /// Recasting between element widths does not divide the layout evenly.
    #[error("cannot recast {layout}: {reason}")]
    Recast { layout: String, reason: String },

    /// A tiler has more modes than the layout it is applied to, or modes do not line up.
    #[error("tiler {tiler} does not fit layout {layout}: {reason}")]
    TilerMismatch {
        layout: String,
        tiler: String,
        reason: String,
    },

    /// A by-mode profile (e.g. for coalesce) is deeper or wider than the layout.
    #[error("profile {profile} does not fit layout {layout}: {reason}")]
    ProfileMismatch {
        layout: String,
        profile: String,
        reason: String,
    },

    /// A coordinate does not fit the shape it indexes.
    #[error("coordinate {coord} does not fit shape {shape}")]
    BadCoordinate { coord: String, shape: String },

    /// A linear index outside [0, size).
    #[error("index {index} is outside the domain [0, {size}) of {layout}")]
    IndexOutOfRange {
        layout: String,
        index: i64,
        size: i64,
    },

    /// tile_to_shape: the block does not divide the target shape, or ranks do not fit.
    #[error("cannot tile {block} to shape {target}: {reason}")]
    TileToShape {
        block: String,
        target: String,
        reason: String,
    },

    /// make_ordered_layout: the order does not match the shape or repeats a rank.
    #[error("bad order {order} for shape {shape}: {reason}")]
    Order {
        shape: String,
        order: String,
        reason: String,
    },

    /// A swizzle's parameters violate B >= 0, M >= 0, |S| >= B, or exceed 62 bits.
    #[error("invalid swizzle Sw<{b},{m},{s}>: {reason}")]
    Swizzle {
        b: i32,
        m: i32,
        s: i32,
        reason: String,
    },

    /// An element width or tile shape that no supported shared-memory swizzle accepts.
    #[error("{0}")]
    Unsupported(String),

    /// A tensor-core atom name that is not known.
    #[error("unknown atom '{name}'; expected one of: {expected}")]
    UnknownAtom { name: String, expected: String },
}

/// Shorthand used throughout the crate.
pub type Result<T> = std::result::Result<T, LayoutError>;

/// Checked arithmetic helpers: every product/sum that can overflow on absurd inputs goes
/// through these so that the error says what was being computed instead of panicking.
pub(crate) fn cmul(a: i64, b: i64, what: &str) -> Result<i64> {
    a.checked_mul(b).ok_or_else(|| LayoutError::Overflow {
        what: what.to_string(),
    })
}

/// Ceiling division for positive divisors (callers guarantee `b > 0`, `a >= 0`).
pub(crate) fn ceil_div(a: i64, b: i64) -> i64 {
    if b <= 0 {
        return a;
    }
    a / b + i64::from(a % b != 0)
}
