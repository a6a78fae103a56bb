//! The layout algebra proper: every operation is a free function, as in CuTe.
//!
//! One module per family; all are re-exported at the crate root.

pub mod coalesce;
pub mod complement;
pub mod composition;
pub mod divide;
pub mod inverse;
pub mod product;
pub mod recast;
