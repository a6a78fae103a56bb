//! Source locations: every node the builder makes remembers the user's line, so diagnostics can
//! point at it instead of at the compiler.

use std::fmt;
use std::panic::Location;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Span {
    pub file: &'static str,
    pub line: u32,
    pub col: u32,
}

impl Span {
    pub const UNKNOWN: Span = Span {
        file: "<unknown>",
        line: 0,
        col: 0,
    };

    /// The location of the caller of the `#[track_caller]` function that calls this.
    #[track_caller]
    pub fn caller() -> Span {
        let l = Location::caller();
        Span {
            file: l.file(),
            line: l.line(),
            col: l.column(),
        }
    }

    pub fn is_known(&self) -> bool {
        self.line != 0
    }
}

impl Default for Span {
    fn default() -> Self {
        Span::UNKNOWN
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}
