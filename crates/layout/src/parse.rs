//! Parsing CuTe notation.
//!
//! Grammar (whitespace allowed between tokens):
//! ```text
//! int      := ['_'] ['-'] digits            -- '_' is CuTe's marker for static ints; ignored
//! tuple    := int | '(' tuple (',' tuple)* ')'
//! layout   := tuple ':' tuple               -- e.g. (3,(2,4)):(177,(13,2)) or 4:2
//! tiler    := '<' tiler (',' tiler)* '>' | layout | tuple   -- a bare shape means stride 1
//! swizzle  := 'Sw<' int ',' int ',' int '>'
//! composed := swizzle 'o' [int 'o'] layout  -- e.g. Sw<3,4,3> o 0 o (8,64):(64,1)
//! ```
//! Errors carry the byte offset where parsing stopped and what was expected there. Nesting is
//! limited to 64 levels so that hostile input cannot overflow the stack.

use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use crate::swizzle::{ComposedLayout, Swizzle};
use crate::tiler::Tiler;
use std::fmt;
use std::str::FromStr;

/// Where and why parsing failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset into the input.
    pub offset: usize,
    /// What was expected (and what was found) there.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for ParseError {}

const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        Parser {
            src,
            pos: 0,
            depth: 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        self.src.as_bytes()
    }

    fn skip_ws(&mut self) {
        while self.pos < self.src.len() && self.bytes()[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes().get(self.pos).copied()
    }

    fn found(&self) -> String {
        match self.src.get(self.pos..).and_then(|s| s.chars().next()) {
            Some(c) => format!("'{c}'"),
            None => "end of input".to_string(),
        }
    }

    fn fail<T>(&self, expected: &str) -> Result<T, ParseError> {
        Err(ParseError {
            offset: self.pos,
            message: format!("expected {expected}, found {}", self.found()),
        })
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            self.fail(what)
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError {
                offset: self.pos,
                message: format!("nesting deeper than {MAX_DEPTH} levels"),
            });
        }
        Ok(())
    }

    fn int(&mut self) -> Result<i64, ParseError> {
        self.skip_ws();
        let start = self.pos;
        let b = self.bytes();
        let mut p = self.pos;
        if b.get(p) == Some(&b'_') {
            p += 1;
        }
        let neg = b.get(p) == Some(&b'-');
        if neg {
            p += 1;
        }
        let digits_start = p;
        while p < b.len() && b[p].is_ascii_digit() {
            p += 1;
        }
        if p == digits_start {
            self.pos = p.min(b.len());
            return self.fail("an integer");
        }
        let text = &self.src[digits_start..p];
        let mag: i128 = text.parse().unwrap_or(i128::MAX);
        let v = if neg { -mag } else { mag };
        match i64::try_from(v) {
            Ok(v) => {
                self.pos = p;
                Ok(v)
            }
            Err(_) => Err(ParseError {
                offset: start,
                message: format!("integer {} does not fit in 64 bits", &self.src[start..p]),
            }),
        }
    }

    fn int_tuple(&mut self) -> Result<IntTuple, ParseError> {
        if self.eat(b'(') {
            self.enter()?;
            let mut v = vec![self.int_tuple()?];
            loop {
                if self.eat(b',') {
                    v.push(self.int_tuple()?);
                } else if self.eat(b')') {
                    break;
                } else {
                    return self.fail("',' or ')'");
                }
            }
            self.depth -= 1;
            Ok(IntTuple::Tuple(v))
        } else {
            match self.peek() {
                Some(c) if c.is_ascii_digit() || c == b'-' || c == b'_' => {
                    Ok(IntTuple::Int(self.int()?))
                }
                _ => self.fail("an integer or '('"),
            }
        }
    }

    fn layout_after_shape(
        &mut self,
        shape: IntTuple,
        shape_at: usize,
    ) -> Result<Layout, ParseError> {
        self.expect(b':', "':' between shape and stride")?;
        self.skip_ws();
        let stride_at = self.pos;
        let stride = self.int_tuple()?;
        if !shape.congruent(&stride) {
            return Err(ParseError {
                offset: stride_at,
                message: format!("stride {stride} is not congruent with shape {shape}"),
            });
        }
        Layout::new(shape, stride).map_err(|e| ParseError {
            offset: shape_at,
            message: e.to_string(),
        })
    }

    fn layout(&mut self) -> Result<Layout, ParseError> {
        self.skip_ws();
        let at = self.pos;
        let shape = self.int_tuple()?;
        self.layout_after_shape(shape, at)
    }

    fn tiler(&mut self) -> Result<Tiler, ParseError> {
        if self.eat(b'<') {
            self.enter()?;
            let mut v = vec![self.tiler()?];
            loop {
                if self.eat(b',') {
                    v.push(self.tiler()?);
                } else if self.eat(b'>') {
                    break;
                } else {
                    return self.fail("',' or '>'");
                }
            }
            self.depth -= 1;
            return Ok(Tiler::Tuple(v));
        }
        self.skip_ws();
        let at = self.pos;
        let shape = self.int_tuple()?;
        if self.peek() == Some(b':') {
            Ok(Tiler::Layout(self.layout_after_shape(shape, at)?))
        } else {
            Tiler::from_shape(&shape).map_err(|e| ParseError {
                offset: at,
                message: e.to_string(),
            })
        }
    }

    fn swizzle(&mut self) -> Result<Swizzle, ParseError> {
        self.skip_ws();
        if !self.src[self.pos..].starts_with("Sw") {
            return self.fail("'Sw<'");
        }
        let at = self.pos;
        self.pos += 2;
        self.expect(b'<', "'<' after 'Sw'")?;
        let b = self.int()?;
        self.expect(b',', "','")?;
        let m = self.int()?;
        self.expect(b',', "','")?;
        let s = self.int()?;
        self.expect(b'>', "'>'")?;
        let small = |x: i64| i32::try_from(x).ok();
        match (small(b), small(m), small(s)) {
            (Some(b), Some(m), Some(s)) => Swizzle::new(b, m, s).map_err(|e| ParseError {
                offset: at,
                message: e.to_string(),
            }),
            _ => Err(ParseError {
                offset: at,
                message: "swizzle parameters out of range".into(),
            }),
        }
    }

    fn composed(&mut self) -> Result<ComposedLayout, ParseError> {
        let sw = self.swizzle()?;
        self.expect(b'o', "'o' after the swizzle")?;
        self.skip_ws();
        let at = self.pos;
        let first = self.int_tuple()?;
        if self.peek() == Some(b':') {
            let layout = self.layout_after_shape(first, at)?;
            return Ok(ComposedLayout::new(sw, 0, layout));
        }
        let offset = match first {
            IntTuple::Int(v) => v,
            IntTuple::Tuple(_) => {
                return Err(ParseError {
                    offset: at,
                    message: "expected an integer offset or a layout".into(),
                })
            }
        };
        self.expect(b'o', "'o' after the offset")?;
        let layout = self.layout()?;
        Ok(ComposedLayout::new(sw, offset, layout))
    }

    fn end(&mut self) -> Result<(), ParseError> {
        self.skip_ws();
        if self.pos < self.src.len() {
            return self.fail("end of input");
        }
        Ok(())
    }
}

fn whole<T>(
    s: &str,
    f: impl FnOnce(&mut Parser) -> Result<T, ParseError>,
) -> Result<T, ParseError> {
    let mut p = Parser::new(s);
    let v = f(&mut p)?;
    p.end()?;
    Ok(v)
}

/// Parse a nested integer tuple such as `(3,(2,4))` or `7`.
pub fn parse_int_tuple(s: &str) -> Result<IntTuple, ParseError> {
    whole(s, |p| p.int_tuple())
}

/// Parse a layout such as `(3,(2,4)):(177,(13,2))` or `4:2`.
pub fn parse_layout(s: &str) -> Result<Layout, ParseError> {
    whole(s, |p| p.layout())
}

/// Parse a tiler: `<3:3,(2,4):(1,8)>`, a single layout, or a shape (stride-1 tiles).
pub fn parse_tiler(s: &str) -> Result<Tiler, ParseError> {
    whole(s, |p| p.tiler())
}

/// Parse a swizzle such as `Sw<3,4,3>`.
pub fn parse_swizzle(s: &str) -> Result<Swizzle, ParseError> {
    whole(s, |p| p.swizzle())
}

/// Parse a composed layout `Sw<B,M,S> o offset o layout` (the offset may be omitted).
pub fn parse_composed(s: &str) -> Result<ComposedLayout, ParseError> {
    whole(s, |p| p.composed())
}

impl FromStr for IntTuple {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_int_tuple(s)
    }
}

impl FromStr for Layout {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_layout(s)
    }
}

impl FromStr for Tiler {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_tiler(s)
    }
}

impl FromStr for Swizzle {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_swizzle(s)
    }
}

impl FromStr for ComposedLayout {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_composed(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::arb_layout;
    use proptest::prelude::*;

    #[test]
    fn round_trips() {
        for s in [
            "(3,(2,4)):(177,(13,2))",
            "4:2",
            "(4):(2)",
            "((4,3)):((1,4))",
            "(2,3):(-1,0)",
        ] {
            assert_eq!(parse_layout(s).unwrap().to_string(), s);
        }
        assert_eq!(
            parse_tiler("<3:3,(2,4):(1,8)>").unwrap().to_string(),
            "<3:3,(2,4):(1,8)>"
        );
        assert_eq!(parse_tiler("(2,4)").unwrap().to_string(), "<2:1,4:1>");
        assert_eq!(parse_tiler("8").unwrap().to_string(), "8:1");
        assert_eq!(parse_swizzle("Sw<3,4,3>").unwrap().to_string(), "Sw<3,4,3>");
        let c = parse_composed("Sw<3,4,3> o 0 o (8,64):(64,1)").unwrap();
        assert_eq!(c.to_string(), "Sw<3,4,3> o 0 o (8,64):(64,1)");
        let c = parse_composed("Sw<2,3,-3> o 5:1").unwrap();
        assert_eq!(c.to_string(), "Sw<2,3,-3> o 0 o 5:1");
        assert_eq!("(2, 3)".parse::<IntTuple>().unwrap().to_string(), "(2,3)");
    }

    #[test]
    fn cute_static_markers_and_whitespace() {
        let l = parse_layout(" ( _8 , _4 ) : ( _1 , _8 ) ").unwrap();
        assert_eq!(l.to_string(), "(8,4):(1,8)");
        assert_eq!(parse_layout("_4:_-1").unwrap().to_string(), "4:-1");
    }

    #[test]
    fn errors_say_where() {
        let e = parse_layout("(3,(2,4)):(177,(13,2)").unwrap_err();
        assert_eq!(e.offset, 21);
        assert!(e.message.contains("',' or ')'"), "{e}");
        let e = parse_layout("(3,4):(1,(2,3))").unwrap_err();
        assert_eq!(e.offset, 6);
        assert!(e.message.contains("not congruent"), "{e}");
        let e = parse_layout("(3,4)").unwrap_err();
        assert!(e.message.contains("':'"), "{e}");
        let e = parse_layout("4:2 x").unwrap_err();
        assert_eq!(e.offset, 4);
        assert!(
            e.to_string()
                .starts_with("at byte 4: expected end of input"),
            "{e}"
        );
        assert!(parse_layout("99999999999999999999:1").is_err());
        assert!(parse_layout("0:1").is_err());
        assert!(parse_layout("():()").is_err());
        assert!(parse_swizzle("Sw<3,4,0>").is_err());
        assert!(parse_composed("Sw<3,4,3> o (1,2) o 4:1").is_err());
        let deep = "(".repeat(10_000);
        assert!(parse_int_tuple(&deep)
            .unwrap_err()
            .message
            .contains("nesting"));
        let deep = "<".repeat(10_000);
        assert!(parse_tiler(&deep).is_err());
        assert!(parse_layout("é:1").is_err());
    }

    proptest! {
        #[test]
        fn print_parse_round_trip(a in arb_layout()) {
            prop_assert_eq!(parse_layout(&a.to_string()).unwrap(), a);
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,40}") {
            let _ = parse_layout(&s);
            let _ = parse_tiler(&s);
            let _ = parse_composed(&s);
            let _ = parse_int_tuple(&s);
        }

        #[test]
        fn parsers_never_panic_on_near_misses(s in "[()<>,:_0-9 Swo-]{0,40}") {
            let _ = parse_layout(&s);
            let _ = parse_tiler(&s);
            let _ = parse_composed(&s);
            let _ = parse_swizzle(&s);
        }
    }
}
