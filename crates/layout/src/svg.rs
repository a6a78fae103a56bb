//! Pictures of layouts as hand-written SVG (no dependencies).
//!
//! * [`layout_svg`]: a grid of cells, one per coordinate, labelled with the index it maps to.
//! * [`tv_svg`]: a thread-value layout drawn over its `M x N` tile: each cell is labelled
//!   `T<thread>V<value>` and filled with its thread's colour (a fixed palette, cycling), like
//!   CuTe's `print_latex` and TileLang's layout plots.

use crate::atoms::TvAtom;
use crate::error::{LayoutError, Result};
use crate::layout::Layout;
use crate::swizzle::ComposedLayout;
use std::fmt::Write;

/// Largest number of cells we are willing to draw or print.
pub const MAX_CELLS: i64 = 1 << 16;

/// 16 light colours, distinct enough to tell neighbouring threads apart.
const PALETTE: [&str; 16] = [
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d",
    "#9edae5", "#e0e0e0", "#b5cf6b", "#fdd0a2", "#bcbddc", "#fcbba1", "#a1d99b", "#d9d9f3",
];

/// The 2-D view of a layout used by pictures and the CLI: `rows x cols` values, row-major in
/// the returned vector. Rank 1 is one row; rank 2 is mode 0 down, mode 1 across; higher ranks
/// put mode 0 down and all remaining modes across (colexicographically).
pub fn layout_grid(l: &Layout) -> Result<(i64, i64, Vec<i64>)> {
    grid_with(l, &|i| l.call(i))
}

/// [`layout_grid`] for a swizzled layout: the grid of the inner layout's shape, filled with
/// the swizzled offsets.
pub fn composed_grid(c: &ComposedLayout) -> Result<(i64, i64, Vec<i64>)> {
    grid_with(&c.layout, &|i| c.call(i))
}

fn grid_with(l: &Layout, f: &dyn Fn(i64) -> i64) -> Result<(i64, i64, Vec<i64>)> {
    let size = l.size();
    if size > MAX_CELLS {
        return Err(LayoutError::Unsupported(format!(
            "{l} has {size} elements; at most {MAX_CELLS} can be shown"
        )));
    }
    let rows = if l.rank() == 1 {
        1
    } else {
        l.mode(0).map_or(1, |m| m.size())
    };
    let cols = size / rows;
    let mut v = Vec::with_capacity(size as usize);
    for r in 0..rows {
        for c in 0..cols {
            v.push(f(r + rows * c));
        }
    }
    Ok((rows, cols, v))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Canvas {
    /// Header text (titles, row and column numbers).
    labels: String,
    /// Cell rectangles (stroke attributes shared through their group).
    rects: String,
    /// Cell labels (font attributes shared through their group).
    texts: String,
    width: i64,
    height: i64,
}

impl Canvas {
    fn text(&mut self, x: i64, y: i64, anchor: &str, size: i64, s: &str) {
        let _ = writeln!(
            self.labels,
            r#"<text x="{x}" y="{y}" text-anchor="{anchor}" font-size="{size}">{}</text>"#,
            escape(s)
        );
    }

    /// A filled, outlined cell `(x, y, width, height)` with a centred label.
    fn cell(&mut self, (x, y, w, h): (i64, i64, i64, i64), fill: &str, label: &str) {
        let _ = writeln!(
            self.rects,
            r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}"/>"#
        );
        if !label.is_empty() {
            let _ = writeln!(
                self.texts,
                r#"<text x="{}" y="{}">{}</text>"#,
                x + w / 2,
                y + h / 2,
                escape(label)
            );
        }
    }

    fn finish(self, cell_font: i64) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\">\n\
             <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
             <g dominant-baseline=\"central\">\n{}</g>\n\
             <g stroke=\"#333\" stroke-width=\"0.6\">\n{}</g>\n\
             <g text-anchor=\"middle\" dominant-baseline=\"central\" font-size=\"{cell_font}\">\n{}</g>\n</svg>\n",
            self.labels,
            self.rects,
            self.texts,
            w = self.width,
            h = self.height
        )
    }
}

/// Shared grid drawing: a title, column headers, row headers and `rows x cols` cells.
struct Grid<'a> {
    title: &'a str,
    corner: &'a str,
    rows: i64,
    cols: i64,
    label: &'a dyn Fn(i64, i64) -> String,
    fill: &'a dyn Fn(i64, i64) -> &'static str,
}

fn draw(g: Grid) -> String {
    let font = 11i64;
    let char_w = 7i64; // approximate advance of an 11px monospace glyph
    let mut longest = 1usize;
    for r in 0..g.rows {
        for c in 0..g.cols {
            longest = longest.max((g.label)(r, c).len());
        }
    }
    let cw = (longest as i64 * char_w + 12).max(26);
    let ch = 22i64;
    let header_w = (g.rows.max(1) - 1).to_string().len().max(g.corner.len()) as i64 * char_w + 14;
    let top = 46i64; // title + column headers
    let x0 = header_w;
    let y0 = top;
    let width = (x0 + g.cols * cw + 10).max(g.title.len() as i64 * 8 + 20);
    let height = y0 + g.rows * ch + 10;
    let mut cv = Canvas {
        labels: String::new(),
        rects: String::new(),
        texts: String::new(),
        width,
        height,
    };
    cv.text(6, 12, "start", 13, g.title);
    cv.text(x0 - 6, y0 - 11, "end", 9, g.corner);
    for c in 0..g.cols {
        cv.text(x0 + c * cw + cw / 2, y0 - 11, "middle", 10, &c.to_string());
    }
    for r in 0..g.rows {
        cv.text(x0 - 6, y0 + r * ch + ch / 2, "end", 10, &r.to_string());
        for c in 0..g.cols {
            cv.cell(
                (x0 + c * cw, y0 + r * ch, cw, ch),
                (g.fill)(r, c),
                &(g.label)(r, c),
            );
        }
    }
    cv.finish(font)
}

/// A layout as a grid of cells labelled with the index each coordinate maps to (rows = mode
/// 0, columns = the rest; see [`layout_grid`]). Cells are shaded by index so that equal
/// indices (broadcasts) stand out.
pub fn layout_svg(l: &Layout) -> Result<String> {
    grid_svg(&l.to_string(), layout_grid(l)?, 0)
}

/// A swizzled layout drawn like [`layout_svg`]: cells hold the swizzled offsets and are
/// coloured by the `2^M`-element vector they land in (`offset >> M`), so the XOR pattern
/// shows as a permutation of colours from row to row.
pub fn composed_layout_svg(c: &ComposedLayout) -> Result<String> {
    grid_svg(
        &c.to_string(),
        composed_grid(c)?,
        c.swizzle.m().clamp(0, 62) as u32,
    )
}

/// Cells are coloured by `(value >> shift) % 8`.
fn grid_svg(title: &str, (rows, cols, v): (i64, i64, Vec<i64>), shift: u32) -> Result<String> {
    let label = |r: i64, c: i64| v[(r * cols + c) as usize].to_string();
    let fill =
        |r: i64, c: i64| PALETTE[(v[(r * cols + c) as usize] >> shift).rem_euclid(8) as usize];
    Ok(draw(Grid {
        title,
        corner: "",
        rows,
        cols,
        label: &label,
        fill: &fill,
    }))
}

/// A TV layout over its `m x n` tile: cell (row i, column j) is element `i + m*j`, labelled
/// `T<t>V<v>` for the first (lowest thread, then value) pair that maps there, coloured by
/// thread. Errors when the layout maps outside the tile or the tile is too large.
pub fn tv_layout_svg(
    tv: &Layout,
    m: i64,
    n: i64,
    title: &str,
    dims: (&str, &str),
) -> Result<String> {
    if m < 1 || n < 1 || m.saturating_mul(n) > MAX_CELLS {
        return Err(LayoutError::Unsupported(format!(
            "cannot draw a {m}x{n} tile"
        )));
    }
    let (threads, values) = match (tv.mode(0), tv.mode(1)) {
        (Some(t), Some(v)) if tv.rank() == 2 => (t.size(), v.size()),
        _ => {
            return Err(LayoutError::Unsupported(format!(
                "{tv} is not a rank-2 (thread, value) layout"
            )))
        }
    };
    let mut owner: Vec<Option<(i64, i64)>> = vec![None; (m * n) as usize];
    for t in 0..threads {
        for v in 0..values {
            let idx = tv.call(t + threads * v);
            if idx < 0 || idx >= m * n {
                return Err(LayoutError::Unsupported(format!(
                    "{tv} maps (T{t},V{v}) to {idx}, outside the {m}x{n} tile"
                )));
            }
            let slot = &mut owner[idx as usize];
            if slot.is_none() {
                *slot = Some((t, v));
            }
        }
    }
    let at = |r: i64, c: i64| owner[(r + m * c) as usize];
    let label = |r: i64, c: i64| at(r, c).map_or_else(String::new, |(t, v)| format!("T{t}V{v}"));
    let fill = |r: i64, c: i64| at(r, c).map_or("#ffffff", |(t, _)| PALETTE[(t % 16) as usize]);
    let corner = format!("{}\\{}", dims.0, dims.1);
    Ok(draw(Grid {
        title,
        corner: &corner,
        rows: m,
        cols: n,
        label: &label,
        fill: &fill,
    }))
}

/// An atom's TV layout over its tile (for copy atoms, the destination registers).
pub fn tv_svg(atom: &TvAtom) -> Result<String> {
    let title = format!(
        "{}  {}x{} ({}x{})  {}",
        atom.name, atom.m, atom.n, atom.dims.0, atom.dims.1, atom.tv
    );
    tv_layout_svg(&atom.tv, atom.m, atom.n, &title, atom.dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atoms::{mma_m16n8k16_a, wgmma_m64nnk16_c};
    use crate::parse::parse_layout;

    #[test]
    fn grid() {
        let (r, c, v) = layout_grid(&parse_layout("(2,3):(3,1)").unwrap()).unwrap();
        assert_eq!((r, c), (2, 3));
        assert_eq!(v, vec![0, 1, 2, 3, 4, 5]);
        let (r, c, v) = layout_grid(&parse_layout("4:2").unwrap()).unwrap();
        assert_eq!((r, c, v), (1, 4, vec![0, 2, 4, 6]));
        let (r, c, _) = layout_grid(&parse_layout("(2,3,4):(1,2,6)").unwrap()).unwrap();
        assert_eq!((r, c), (2, 12));
        assert!(layout_grid(&parse_layout("(1024,1024):(1,1024)").unwrap()).is_err());
        let c = crate::parse::parse_composed("Sw<1,0,1> o 0 o (2,2):(2,1)").unwrap();
        assert_eq!(composed_grid(&c).unwrap(), (2, 2, vec![0, 1, 3, 2]));
        assert!(composed_layout_svg(&c).unwrap().contains(">3</text>"));
    }

    #[test]
    fn svgs_are_well_formed() {
        let s = layout_svg(&parse_layout("(4,8):(8,1)").unwrap()).unwrap();
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<rect").count(), 1 + 32);
        assert!(s.contains(">31</text>"));
        let a = tv_svg(&mma_m16n8k16_a()).unwrap();
        assert_eq!(a.matches("<rect").count(), 1 + 256);
        assert!(a.contains(">T0V0</text>") && a.contains(">T31V7</text>"));
        let c = tv_svg(&wgmma_m64nnk16_c(64).unwrap()).unwrap();
        assert!(c.contains(">T127V31</text>"));
        assert!(!c.contains("<<"));
    }

    #[test]
    fn tv_errors() {
        let tv = parse_layout("(32,4):(1,32)").unwrap();
        assert!(tv_layout_svg(&tv, 8, 8, "x", ("m", "n")).is_err());
        assert!(tv_layout_svg(&parse_layout("8:1").unwrap(), 8, 1, "x", ("m", "n")).is_err());
    }
}
