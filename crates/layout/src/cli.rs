//! The logic behind `tilelang layout ...`: parse words, run one algebra operation, and return
//! exactly what to print. The binary prints `Ok` text with `print!` (it ends with a newline)
//! and an `Err` with `eprintln!` before exiting with status 2.

use crate::atoms::atom_by_name;
use crate::error::LayoutError;
use crate::layout::Layout;
use crate::ops::coalesce::{coalesce, coalesce_by};
use crate::ops::complement::complement_shape;
use crate::ops::composition::composition;
use crate::ops::divide::{flat_divide, logical_divide, tiled_divide, zipped_divide};
use crate::ops::inverse::{left_inverse, right_inverse};
use crate::ops::product::{
    blocked_product, flat_product, logical_product, raked_product, tiled_product, zipped_product,
};
use crate::parse::{parse_composed, parse_int_tuple, parse_layout, parse_tiler};
use crate::smem::smem_swizzle_layout;
use crate::svg::{composed_grid, composed_layout_svg, layout_grid, layout_svg, tv_svg, MAX_CELLS};
use crate::swizzle::{ComposedLayout, Swizzle};
use crate::tiler::Tiler;
use std::fmt;

/// A one-line description of what was wrong with the command line and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    message: String,
}

impl CliError {
    fn new(message: impl Into<String>) -> CliError {
        // Keep it to one line whatever the source of the text.
        let message: String = message.into();
        CliError {
            message: message.replace('\n', " "),
        }
    }

    /// The message (one line).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for CliError {}

/// The `help` text.
pub const USAGE: &str = "\
usage: tilelang layout <command> [args]   (layouts in CuTe notation, quote them in the shell)
  coalesce <L> [profile]            simplify L; with a profile like (1,1), mode by mode
  compose <A> <B>                   A o B; B may be a layout, a tiler <3:4,8:2> or a shape (2,4)
  complement <A> <M>                complement of A up to cosize M
  divide logical|zipped|tiled|flat <A> <B>
  product logical|zipped|tiled|flat <A> <B>   (B a layout or tiler)
  product blocked|raked <A> <B>               (B a layout)
  inverse right|left <L>
  swizzle <B> <M> <S> <x>...        Sw<B,M,S>(x) for each x
  eval <L> [i...]                   L(i) for each i (all of 0..size when none given);
                                    L may be a composed layout 'Sw<3,4,3> o 0 o (8,64):(64,1)'
  show <L> [--svg FILE]             2-D table of L (rows = mode 0, columns = the rest);
                                    L may be a composed layout
  atom <name> [--svg FILE]          TV layout of an atom (copy atoms print src and dst)
                                    e.g. mma_m16n8k16_a, ldmatrix_x4_trans, wgmma_m64n128k16_c,
                                    mfma_16x16x16f16_c
  smem <rows> <cols> <elem_bytes>   swizzled shared-memory layout of a row-major tile
  help                              this text
";

type CliResult<T> = Result<T, CliError>;

fn layout_err(cmd: &str, e: LayoutError) -> CliError {
    CliError::new(format!("{cmd}: {e}"))
}

fn want_args(cmd: &str, args: &[String], n: usize, what: &str) -> CliResult<()> {
    if args.len() != n {
        return Err(CliError::new(format!(
            "{cmd}: expected {n} argument{} {what}, got {} (see `tilelang layout help`)",
            if n == 1 { "" } else { "s" },
            args.len()
        )));
    }
    Ok(())
}

fn layout_arg(cmd: &str, name: &str, s: &str) -> CliResult<Layout> {
    parse_layout(s).map_err(|e| {
        CliError::new(format!(
            "{cmd}: cannot parse layout {name} '{s}': {e} (expected e.g. (4,2):(2,1))"
        ))
    })
}

fn tiler_arg(cmd: &str, name: &str, s: &str) -> CliResult<Tiler> {
    parse_tiler(s).map_err(|e| {
        CliError::new(format!(
            "{cmd}: cannot parse {name} '{s}': {e} (expected a layout, a tiler <3:4,8:2> or a shape)"
        ))
    })
}

fn int_arg(cmd: &str, name: &str, s: &str) -> CliResult<i64> {
    s.trim()
        .parse::<i64>()
        .map_err(|_| CliError::new(format!("{cmd}: {name} must be an integer, got '{s}'")))
}

/// A plain or swizzled layout, for commands that accept either.
enum AnyLayout {
    Plain(Layout),
    Composed(ComposedLayout),
}

impl AnyLayout {
    fn size(&self) -> i64 {
        match self {
            AnyLayout::Plain(l) => l.size(),
            AnyLayout::Composed(c) => c.size(),
        }
    }
    fn call(&self, i: i64) -> i64 {
        match self {
            AnyLayout::Plain(l) => l.call(i),
            AnyLayout::Composed(c) => c.call(i),
        }
    }
}

fn any_layout_arg(cmd: &str, name: &str, s: &str) -> CliResult<AnyLayout> {
    if s.trim_start().starts_with("Sw") {
        parse_composed(s).map(AnyLayout::Composed).map_err(|e| {
            CliError::new(format!(
                "{cmd}: cannot parse composed layout '{s}': {e} (expected e.g. Sw<3,4,3> o 0 o (8,64):(64,1))"
            ))
        })
    } else {
        layout_arg(cmd, name, s).map(AnyLayout::Plain)
    }
}

/// Split off `--svg FILE`, rejecting other `--` options.
fn take_svg(cmd: &str, args: &[String]) -> CliResult<(Vec<String>, Option<String>)> {
    let mut rest = Vec::new();
    let mut svg = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--svg" {
            match it.next() {
                Some(f) if svg.is_none() => svg = Some(f.clone()),
                Some(_) => return Err(CliError::new(format!("{cmd}: --svg given twice"))),
                None => return Err(CliError::new(format!("{cmd}: --svg needs a file name"))),
            }
        } else if a.starts_with("--") {
            return Err(CliError::new(format!(
                "{cmd}: unknown option '{a}' (only --svg FILE)"
            )));
        } else {
            rest.push(a.clone());
        }
    }
    Ok((rest, svg))
}

fn write_file(cmd: &str, path: &str, text: &str) -> CliResult<()> {
    std::fs::write(path, text)
        .map_err(|e| CliError::new(format!("{cmd}: cannot write '{path}': {e}")))
}

/// A text table in the style of CuTe's `print_layout`.
fn table(title: &str, rows: i64, cols: i64, cell: &dyn Fn(i64, i64) -> String) -> String {
    let mut w = 1;
    for r in 0..rows {
        for c in 0..cols {
            w = w.max(cell(r, c).len());
        }
    }
    w = w.max((cols.max(1) - 1).to_string().len());
    let rw = (rows.max(1) - 1).to_string().len();
    let mut out = format!("{title}\n");
    out.push_str(&" ".repeat(rw + 2));
    for c in 0..cols {
        out.push_str(&format!("  {:>w$} ", c));
    }
    out.push('\n');
    let sep = format!(
        "{}{}+\n",
        " ".repeat(rw + 2),
        format!("+{}", "-".repeat(w + 2)).repeat(cols as usize)
    );
    out.push_str(&sep);
    for r in 0..rows {
        out.push_str(&format!("{r:>rw$}  "));
        for c in 0..cols {
            out.push_str(&format!("| {:>w$} ", cell(r, c)));
        }
        out.push_str("|\n");
        out.push_str(&sep);
    }
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Run `tilelang layout <args...>` and return the text to print (ending with a newline).
pub fn run(args: &[String]) -> Result<String, CliError> {
    let Some((cmd, rest)) = args.split_first() else {
        return Err(CliError::new("missing command; try `tilelang layout help`"));
    };
    let out = match cmd.as_str() {
        "help" | "--help" | "-h" => USAGE.trim_end().to_string(),
        "coalesce" => {
            if rest.len() == 2 {
                let l = layout_arg(cmd, "L", &rest[0])?;
                let p = parse_int_tuple(&rest[1]).map_err(|e| {
                    CliError::new(format!(
                        "coalesce: cannot parse profile '{}': {e} (expected e.g. (1,1))",
                        rest[1]
                    ))
                })?;
                coalesce_by(&l, &p)
                    .map_err(|e| layout_err(cmd, e))?
                    .to_string()
            } else {
                want_args(cmd, rest, 1, "<L> [profile]")?;
                coalesce(&layout_arg(cmd, "L", &rest[0])?).to_string()
            }
        }
        "compose" => {
            want_args(cmd, rest, 2, "<A> <B>")?;
            let b = tiler_arg(cmd, "B", &rest[1])?;
            match any_layout_arg(cmd, "A", &rest[0])? {
                AnyLayout::Plain(a) => composition(&a, b)
                    .map_err(|e| layout_err(cmd, e))?
                    .to_string(),
                AnyLayout::Composed(a) => a.compose(b).map_err(|e| layout_err(cmd, e))?.to_string(),
            }
        }
        "complement" => {
            want_args(cmd, rest, 2, "<A> <M>")?;
            let a = layout_arg(cmd, "A", &rest[0])?;
            let m = parse_int_tuple(&rest[1]).map_err(|e| {
                CliError::new(format!(
                    "complement: cannot parse cotarget M '{}': {e} (expected an integer)",
                    rest[1]
                ))
            })?;
            complement_shape(&a, &m)
                .map_err(|e| layout_err(cmd, e))?
                .to_string()
        }
        "divide" | "product" => {
            let kinds: &[&str] = if cmd == "divide" {
                &["logical", "zipped", "tiled", "flat"]
            } else {
                &["logical", "blocked", "raked", "zipped", "tiled", "flat"]
            };
            want_args(cmd, rest, 3, &format!("{} <A> <B>", kinds.join("|")))?;
            let kind = rest[0].as_str();
            if !kinds.contains(&kind) {
                return Err(CliError::new(format!(
                    "{cmd}: unknown kind '{kind}', expected one of {}",
                    kinds.join(", ")
                )));
            }
            let a = layout_arg(cmd, "A", &rest[1])?;
            let r = if kind == "blocked" || kind == "raked" {
                let b = layout_arg(&format!("{cmd} {kind}"), "B", &rest[2])?;
                if kind == "blocked" {
                    blocked_product(&a, &b)
                } else {
                    raked_product(&a, &b)
                }
            } else {
                let b = tiler_arg(cmd, "B", &rest[2])?;
                match (cmd.as_str(), kind) {
                    ("divide", "logical") => logical_divide(&a, b),
                    ("divide", "zipped") => zipped_divide(&a, b),
                    ("divide", "tiled") => tiled_divide(&a, b),
                    ("divide", _) => flat_divide(&a, b),
                    (_, "logical") => logical_product(&a, b),
                    (_, "zipped") => zipped_product(&a, b),
                    (_, "tiled") => tiled_product(&a, b),
                    _ => flat_product(&a, b),
                }
            };
            r.map_err(|e| layout_err(&format!("{cmd} {kind}"), e))?
                .to_string()
        }
        "inverse" => {
            want_args(cmd, rest, 2, "right|left <L>")?;
            let l = layout_arg(cmd, "L", &rest[1])?;
            match rest[0].as_str() {
                "right" => right_inverse(&l).to_string(),
                "left" => left_inverse(&l)
                    .map_err(|e| layout_err(cmd, e))?
                    .to_string(),
                k => {
                    return Err(CliError::new(format!(
                        "inverse: unknown kind '{k}', expected right or left"
                    )))
                }
            }
        }
        "swizzle" => {
            if rest.len() < 4 {
                return Err(CliError::new(format!(
                    "swizzle: expected <B> <M> <S> <x>..., got {} argument(s)",
                    rest.len()
                )));
            }
            let p = |i: usize, name: &str| -> CliResult<i32> {
                let v = int_arg(cmd, name, &rest[i])?;
                i32::try_from(v)
                    .map_err(|_| CliError::new(format!("swizzle: {name} = {v} is out of range")))
            };
            let sw =
                Swizzle::new(p(0, "B")?, p(1, "M")?, p(2, "S")?).map_err(|e| layout_err(cmd, e))?;
            let xs = rest[3..]
                .iter()
                .map(|x| int_arg(cmd, "x", x))
                .collect::<CliResult<Vec<_>>>()?;
            xs.iter()
                .map(|&x| sw.apply(x).to_string())
                .collect::<Vec<_>>()
                .join(" ")
        }
        "eval" => {
            if rest.is_empty() {
                return Err(CliError::new("eval: expected <L> [i...]"));
            }
            let l = any_layout_arg(cmd, "L", &rest[0])?;
            let size = l.size();
            let idx: Vec<i64> = if rest.len() == 1 {
                if size > MAX_CELLS {
                    return Err(CliError::new(format!(
                        "eval: the layout has {size} elements; give the indices to evaluate"
                    )));
                }
                (0..size).collect()
            } else {
                rest[1..]
                    .iter()
                    .map(|x| int_arg(cmd, "i", x))
                    .collect::<CliResult<_>>()?
            };
            let mut vals = Vec::with_capacity(idx.len());
            for i in idx {
                if !(0..size).contains(&i) {
                    return Err(CliError::new(format!(
                        "eval: index {i} is outside [0, {size})"
                    )));
                }
                vals.push(l.call(i).to_string());
            }
            vals.join(" ")
        }
        "show" => {
            let (args, svg) = take_svg(cmd, rest)?;
            want_args(cmd, &args, 1, "<L> [--svg FILE]")?;
            let (title, grid, picture) = match any_layout_arg(cmd, "L", &args[0])? {
                AnyLayout::Plain(l) => (
                    l.to_string(),
                    layout_grid(&l),
                    svg.as_ref().map(|_| layout_svg(&l)),
                ),
                AnyLayout::Composed(c) => (
                    c.to_string(),
                    composed_grid(&c),
                    svg.as_ref().map(|_| composed_layout_svg(&c)),
                ),
            };
            let (rows, cols, v) = grid.map_err(|e| layout_err(cmd, e))?;
            if let (Some(path), Some(picture)) = (svg, picture) {
                write_file(cmd, &path, &picture.map_err(|e| layout_err(cmd, e))?)?;
            }
            table(&title, rows, cols, &|r, c| {
                v[(r * cols + c) as usize].to_string()
            })
        }
        "atom" => {
            let (args, svg) = take_svg(cmd, rest)?;
            want_args(cmd, &args, 1, "<name> [--svg FILE]")?;
            let atom = atom_by_name(&args[0]).map_err(|e| layout_err(cmd, e))?;
            if let Some(path) = svg {
                write_file(cmd, &path, &tv_svg(&atom).map_err(|e| layout_err(cmd, e))?)?;
            }
            match &atom.src_tv {
                Some(src) => format!("src {src}\ndst {}", atom.tv),
                None => atom.tv.to_string(),
            }
        }
        "smem" => {
            want_args(cmd, rest, 3, "<rows> <cols> <elem_bytes>")?;
            let (r, c, e) = (
                int_arg(cmd, "rows", &rest[0])?,
                int_arg(cmd, "cols", &rest[1])?,
                int_arg(cmd, "elem_bytes", &rest[2])?,
            );
            let s = smem_swizzle_layout(r, c, e).map_err(|e| layout_err(cmd, e))?;
            s.layout.to_string()
        }
        other => {
            return Err(CliError::new(format!(
                "unknown command '{other}'; expected one of coalesce, compose, complement, divide, \
                 product, inverse, swizzle, eval, show, atom, smem, help"
            )))
        }
    };
    Ok(out + "\n")
}

/// Convenience for callers holding `&str`s (tests, other front ends).
pub fn run_strs(args: &[&str]) -> Result<String, CliError> {
    run(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(args: &[&str]) -> String {
        match run_strs(args) {
            Ok(s) => s,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }
    fn err(args: &[&str]) -> String {
        match run_strs(args) {
            Ok(s) => panic!("{args:?} should fail, printed {s}"),
            Err(e) => {
                assert!(!e.to_string().contains('\n'));
                e.to_string()
            }
        }
    }

    #[test]
    fn algebra_commands() {
        assert_eq!(ok(&["coalesce", "(2,(1,6)):(1,(6,2))"]), "12:1\n");
        assert_eq!(
            ok(&["coalesce", "(2,(1,6)):(1,(6,2))", "(1,1)"]),
            "(2,6):(1,2)\n"
        );
        assert_eq!(
            ok(&["compose", "(6,2):(8,2)", "(4,3):(3,1)"]),
            "((2,2),3):((24,2),8)\n"
        );
        assert_eq!(
            ok(&["compose", "(12,(4,8)):(59,(13,1))", "<3:4,8:2>"]),
            "(3,(2,4)):(236,(26,1))\n"
        );
        assert_eq!(
            ok(&["compose", "Sw<3,3,3> o 0 o (8,64):(64,1)", "(8,8):(1,8)"]),
            "Sw<3,3,3> o 0 o (8,8):(64,1)\n"
        );
        assert_eq!(ok(&["complement", "(2,2):(1,6)", "24"]), "(3,2):(2,12)\n");
        assert_eq!(
            ok(&["divide", "logical", "(4,2,3):(2,1,8)", "4:2"]),
            "((2,2),(2,3)):((4,1),(2,8))\n"
        );
        assert_eq!(
            ok(&[
                "divide",
                "flat",
                "(9,(4,8)):(59,(13,1))",
                "<3:3,(2,4):(1,8)>"
            ]),
            "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))\n"
        );
        assert_eq!(
            ok(&["product", "logical", "(2,2):(4,1)", "6:1"]),
            "((2,2),(2,3)):((4,1),(2,8))\n"
        );
        assert_eq!(
            ok(&["product", "blocked", "(2,5):(5,1)", "(3,4):(1,3)"]),
            "((2,3),(5,4)):((5,10),(1,30))\n"
        );
        assert_eq!(
            ok(&["product", "raked", "(2,5):(5,1)", "(3,4):(1,3)"]),
            "((3,2),(4,5)):((10,5),(30,1))\n"
        );
        assert_eq!(
            ok(&["product", "zipped", "(2,5):(5,1)", "<3:5,4:6>"]),
            "((2,5),(3,4)):((5,1),(10,30))\n"
        );
        assert_eq!(ok(&["inverse", "right", "(4,8):(8,1)"]), "(8,4):(4,1)\n");
        assert_eq!(ok(&["inverse", "left", "4:2"]), "(2,4):(0,1)\n");
    }

    #[test]
    fn eval_swizzle_smem() {
        assert_eq!(ok(&["eval", "(3,(2,3)):(3,(12,1))", "16"]), "17\n");
        assert_eq!(ok(&["eval", "4:2"]), "0 2 4 6\n");
        assert_eq!(ok(&["eval", "Sw<1,0,1> o 0 o 4:1"]), "0 1 3 2\n");
        assert_eq!(
            ok(&["swizzle", "3", "4", "3", "128", "144", "0"]),
            "144 128 0\n"
        );
        assert_eq!(ok(&["swizzle", "2", "1", "-3", "2"]), "18\n");
        assert_eq!(
            ok(&["smem", "64", "64", "2"]),
            "Sw<3,3,3> o 0 o ((8,8),(64,1)):((64,512),(1,0))\n"
        );
    }

    #[test]
    fn show_and_atom() {
        let s = ok(&["show", "(2,3):(3,1)"]);
        assert_eq!(
            s,
            "(2,3):(3,1)\n     0   1   2\n   +---+---+---+\n0  | 0 | 1 | 2 |\n   +---+---+---+\n1  | 3 | 4 | 5 |\n   +---+---+---+\n"
        );
        assert_eq!(
            ok(&["show", "4:2"]).lines().nth(3).unwrap(),
            "0  | 0 | 2 | 4 | 6 |"
        );
        let s = ok(&["show", "Sw<1,0,1> o 0 o (2,2):(2,1)"]);
        assert_eq!(s.lines().nth(3).unwrap(), "0  | 0 | 1 |");
        assert_eq!(s.lines().nth(5).unwrap(), "1  | 3 | 2 |");
        assert_eq!(
            ok(&["atom", "mma_m16n8k16_c"]),
            "((4,8),(2,2)):((32,1),(16,8))\n"
        );
        assert_eq!(
            ok(&["atom", "ldmatrix_x4"]),
            "src (32,8):(8,1)\ndst (32,(2,4)):(2,(1,64))\n"
        );
        let dir = std::env::temp_dir().join(format!("tl_layout_cli_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.svg");
        let f = f.to_str().unwrap();
        ok(&["atom", "mma_m16n8k16_a", "--svg", f]);
        assert!(std::fs::read_to_string(f).unwrap().contains("T31V7"));
        ok(&["show", "--svg", f, "(4,8):(8,1)"]);
        assert!(std::fs::read_to_string(f).unwrap().contains(">31<"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn errors_are_one_line_and_helpful() {
        assert!(err(&[]).contains("missing command"));
        assert!(err(&["frobnicate"]).contains("unknown command 'frobnicate'"));
        assert!(err(&["coalesce"]).contains("expected 1 argument"));
        assert!(err(&["compose", "(3,4"]).contains("expected 2 arguments"));
        let e = err(&["compose", "(3,4:(1,3)", "2:1"]);
        assert!(
            e.contains("at byte") && e.contains("cannot parse layout A"),
            "{e}"
        );
        let e = err(&["complement", "(4,2):(1,2)", "24"]);
        assert!(e.contains("not injective"), "{e}");
        let e = err(&["compose", "(3,2):(1,10)", "4:2"]);
        assert!(e.contains("divisibility"), "{e}");
        assert!(err(&["divide", "sideways", "4:1", "2:1"]).contains("unknown kind"));
        assert!(err(&["product", "blocked", "4:1", "<2:1>"]).contains("cannot parse layout B"));
        assert!(err(&["inverse", "up", "4:1"]).contains("expected right or left"));
        assert!(err(&["inverse", "left", "(2,2):(3,2)"]).contains("no left inverse"));
        assert!(err(&["swizzle", "3", "4", "2", "1"]).contains("|S| must be >= B"));
        assert!(err(&["swizzle", "3", "4", "3"]).contains("expected <B> <M> <S> <x>"));
        assert!(err(&["swizzle", "3", "4", "3", "x"]).contains("x must be an integer"));
        assert!(err(&["eval", "4:1", "4"]).contains("outside [0, 4)"));
        assert!(err(&["eval", "(1024,1024):(1,1024)"]).contains("give the indices"));
        assert!(err(&["atom", "mma_m16n8k8_a"]).contains("unknown atom"));
        assert!(err(&["atom", "mma_m16n8k16_a", "--svg"]).contains("--svg needs a file"));
        assert!(err(&["show", "4:1", "--png", "x"]).contains("unknown option"));
        assert!(err(&["show", "(1024,1024):(1,1024)"]).contains("at most"));
        assert!(err(&["smem", "64", "64", "3"]).contains("power of two"));
        assert!(ok(&["help"]).contains("usage: tilelang layout"));
    }

    fn arb_word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "coalesce",
                "compose",
                "complement",
                "divide",
                "product",
                "inverse",
                "swizzle",
                "eval",
                "show",
                "atom",
                "smem",
                "help",
                "logical",
                "zipped",
                "tiled",
                "flat",
                "blocked",
                "raked",
                "right",
                "left",
                "4:2",
                "(2,3):(3,1)",
                "<2:1,3:1>",
                "(4,2)",
                "24",
                "3",
                "-3",
                "0",
                "Sw<3,4,3> o 0 o (8,64):(64,1)",
                "mma_m16n8k16_a",
                "wgmma_m64n256k16_c",
                "(1,1)",
                "99999999999999999999",
            ])
            .prop_map(String::from),
            "[()<>,:_0-9 Swo-]{0,12}",
            "\\PC{0,12}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn run_never_panics(args in prop::collection::vec(arb_word(), 0..6)) {
            // Never write files from the fuzzer.
            prop_assume!(!args.iter().any(|a| a == "--svg"));
            if let Err(e) = run(&args) {
                prop_assert!(!e.to_string().contains('\n'));
            }
        }
    }
}
