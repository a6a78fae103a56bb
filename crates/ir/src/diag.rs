//! Diagnostics: what went wrong, at which line of the user's kernel, and what to change.

use std::fmt;

use crate::span::Span;

/// The class of a diagnostic; tests and tools match on it, people read the message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum DiagKind {
    ShapeMismatch,
    DTypeMismatch,
    ScopeMismatch,
    OutOfRange,
    UndefinedVariable,
    UndefinedBuffer,
    InvalidArgument,
    LayoutConflict,
    Unsupported,
    /// A bug in the compiler, reported instead of panicking.
    Internal,
}

impl DiagKind {
    pub fn code(self) -> &'static str {
        match self {
            DiagKind::ShapeMismatch => "shape-mismatch",
            DiagKind::DTypeMismatch => "dtype-mismatch",
            DiagKind::ScopeMismatch => "scope-mismatch",
            DiagKind::OutOfRange => "out-of-range",
            DiagKind::UndefinedVariable => "undefined-variable",
            DiagKind::UndefinedBuffer => "undefined-buffer",
            DiagKind::InvalidArgument => "invalid-argument",
            DiagKind::LayoutConflict => "layout-conflict",
            DiagKind::Unsupported => "unsupported",
            DiagKind::Internal => "internal",
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct Diagnostic {
    pub kind: DiagKind,
    pub message: String,
    /// The user's line the problem is reported at.
    pub span: Span,
    /// Other places that explain it (where a buffer was declared, the other conflicting op).
    pub notes: Vec<(Span, String)>,
    /// What to change.
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(kind: DiagKind, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            kind,
            message: message.into(),
            span,
            notes: vec![],
            help: None,
        }
    }
    pub fn note(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.notes.push((span, text.into()));
        self
    }
    pub fn help(mut self, text: impl Into<String>) -> Diagnostic {
        self.help = Some(text.into());
        self
    }
    pub fn internal(message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(DiagKind::Internal, Span::UNKNOWN, message)
            .help("this is a compiler bug; please report it with the kernel that triggers it")
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.kind.code(), self.message)?;
        if self.span.is_known() {
            write!(f, "\n  --> {}", self.span)?;
        }
        for (span, text) in &self.notes {
            if span.is_known() {
                write!(f, "\n  note: {text} (at {span})")?;
            } else {
                write!(f, "\n  note: {text}")?;
            }
        }
        if let Some(h) = &self.help {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

/// One or more diagnostics, as returned by the verifier and the compiler.
#[derive(Clone, PartialEq, Debug)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn first(&self) -> Option<&Diagnostic> {
        self.0.first()
    }
    pub fn has(&self, kind: DiagKind) -> bool {
        self.0.iter().any(|d| d.kind == kind)
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Diagnostics {
        Diagnostics(vec![d])
    }
}
