//! Source locations of Python code: the IR's `Span` holds a `&'static str` file name (Rust's
//! `Location` gives static names), so Python file names are interned once each, for the life
//! of the process (a program has few kernel files).

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use tl_ir::Span;

/// The one `&'static str` for `file`.
pub fn intern(file: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(|| Mutex::new(HashSet::new()));
    // A poisoned lock only means another thread panicked while inserting; the set is fine.
    let mut set = names.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = set.get(file) {
        return s;
    }
    let s: &'static str = Box::leak(file.to_string().into_boxed_str());
    set.insert(s);
    s
}

pub fn span(file: &str, line: u32, col: u32) -> Span {
    Span {
        file: intern(file),
        line,
        col,
    }
}
