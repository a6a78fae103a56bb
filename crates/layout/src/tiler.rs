//! Tilers: a layout, or a tuple of tilers applied mode by mode.
//!
//! CuTe's `Tile<...>` lets composition, divides and products act on each mode of a layout
//! separately. We print a tuple tiler as `<3:3,(2,4):(1,8)>` so that it cannot be confused
//! with a layout, and accept a plain shape (`(2,4)`) as shorthand for `<2:1,4:1>`.

use crate::error::{LayoutError, Result};
use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use std::fmt;

/// A layout or a (possibly nested) tuple of tilers, applied mode by mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Tiler {
    /// Applied to a whole mode (or the whole layout).
    Layout(Layout),
    /// Element `i` applies to mode `i`; modes past the tuple's length are left alone
    /// (dropped by `composition`, kept by divides and products, as in CuTe).
    Tuple(Vec<Tiler>),
}

impl Tiler {
    /// A shape used as a tiler: an integer `n` is the layout `n:1`, a tuple is a tuple tiler of
    /// its modes (CuTe's semantics for a `Shape` passed where a `Tile` is expected).
    pub fn from_shape(shape: &IntTuple) -> Result<Tiler> {
        match shape {
            IntTuple::Int(n) => Ok(Tiler::Layout(Layout::identity(*n)?)),
            IntTuple::Tuple(v) if v.is_empty() => Err(LayoutError::EmptyTuple {
                what: "tiler".into(),
            }),
            IntTuple::Tuple(v) => Ok(Tiler::Tuple(
                v.iter().map(Tiler::from_shape).collect::<Result<_>>()?,
            )),
        }
    }

    /// A tuple tiler of layouts.
    pub fn tuple(layouts: Vec<Layout>) -> Tiler {
        Tiler::Tuple(layouts.into_iter().map(Tiler::Layout).collect())
    }

    /// Number of modes the tiler acts on (1 for a layout).
    pub fn rank(&self) -> usize {
        match self {
            Tiler::Layout(_) => 1,
            Tiler::Tuple(v) => v.len(),
        }
    }

    /// The layout, if this tiler is a single layout.
    pub fn as_layout(&self) -> Option<&Layout> {
        match self {
            Tiler::Layout(l) => Some(l),
            Tiler::Tuple(_) => None,
        }
    }

    /// The profile of the tiler as an IntTuple of 1s (used to guide zipping of results).
    pub(crate) fn check_nonempty(&self) -> Result<()> {
        match self {
            Tiler::Layout(_) => Ok(()),
            Tiler::Tuple(v) if v.is_empty() => Err(LayoutError::EmptyTuple {
                what: "tiler".into(),
            }),
            Tiler::Tuple(v) => v.iter().try_for_each(Tiler::check_nonempty),
        }
    }
}

impl From<Layout> for Tiler {
    fn from(l: Layout) -> Self {
        Tiler::Layout(l)
    }
}

impl From<&Layout> for Tiler {
    fn from(l: &Layout) -> Self {
        Tiler::Layout(l.clone())
    }
}

impl From<&Tiler> for Tiler {
    fn from(t: &Tiler) -> Self {
        t.clone()
    }
}

impl From<Vec<Layout>> for Tiler {
    fn from(v: Vec<Layout>) -> Self {
        Tiler::tuple(v)
    }
}

impl fmt::Display for Tiler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tiler::Layout(l) => write!(f, "{l}"),
            Tiler::Tuple(v) => {
                write!(f, "<")?;
                for (i, t) in v.iter().enumerate() {
                    if i > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{t}")?;
                }
                write!(f, ">")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse_int_tuple, parse_layout};

    #[test]
    fn display() {
        let t = Tiler::tuple(vec![
            parse_layout("3:3").unwrap(),
            parse_layout("(2,4):(1,8)").unwrap(),
        ]);
        assert_eq!(t.to_string(), "<3:3,(2,4):(1,8)>");
        assert_eq!(t.rank(), 2);
    }

    #[test]
    fn from_shape() {
        let t = Tiler::from_shape(&parse_int_tuple("(2,(3,4))").unwrap()).unwrap();
        assert_eq!(t.to_string(), "<2:1,<3:1,4:1>>");
        assert_eq!(
            Tiler::from_shape(&IntTuple::Int(5)).unwrap().to_string(),
            "5:1"
        );
    }
}
