//! # tl_layout — CuTe-semantics layout algebra for tilelang
//!
//! Layouts are functions from coordinates to indices, `shape:stride`, with the semantics of
//! C++ CuTe (CUTLASS >= 3.8): colexicographic index splitting, coalesce, composition,
//! complement, inverses, divides and products, swizzles, recasts between element widths, and
//! the thread-value (TV) layouts of tensor-core atoms. The compiler uses it for shared-memory
//! layouts, fragment layouts and vector widths; everything is `i64`, every operation whose
//! precondition can fail returns `Result<_, LayoutError>`, and nothing panics on user input.
//!
//! ## Public API summary
//!
//! ```text
//! // Core types
//! enum IntTuple { Int(i64), Tuple(Vec<IntTuple>) }          // Display: 4, (3,(2,4))
//!   rank() depth() product() -> Result<i64> leaves() flatten() congruent() weakly_congruent()
//!   mode(i) modes() map() try_map() unflatten_like()
//! fn compact_col_major(&IntTuple, start) / compact_row_major(&IntTuple, start) -> Result<IntTuple>  // extent-1 leaves get stride 0
//! fn ceil_div_tuple(&IntTuple, i64) -> IntTuple
//! struct Layout  (private shape/stride, always valid)            // Display: (3,(2,4)):(177,(13,2))
//!   Layout::new(shape, stride) -> Result<Layout>, from_flat(&[i64], &[i64]), identity(n),
//!   col_major(shape), row_major(shape), from_modes(Vec<Layout>)
//!   shape() stride() size() cosize() rank() depth() mode(i) -> Option<Layout> modes()
//!   flat_modes() -> Vec<(extent, stride)> flatten() append(&L) prepend(&L) concat(&L)
//!   pad_to_rank(r) call(i) -> i64 try_call(i) -> Result<i64> crd2idx(&IntTuple) -> Result<i64>
//!   idx2crd(i) -> IntTuple values() is_injective()
//! fn make_ordered_layout(shape: &IntTuple, order: &IntTuple) -> Result<Layout>
//! enum Tiler { Layout(Layout), Tuple(Vec<Tiler>) }             // Display: <3:3,(2,4):(1,8)>
//!   Tiler::from_shape(&IntTuple), Tiler::tuple(Vec<Layout>); From<Layout>, From<&Layout>
//!
//! // Algebra (free functions; `impl Into<Tiler>` accepts &Layout, Layout, Tiler, &Tiler)
//! fn coalesce(&Layout) -> Layout            fn coalesce_by(&Layout, profile: &IntTuple) -> Result<Layout>
//! fn filter(&Layout) -> Layout              fn filter_zeros(&Layout) -> Layout
//! fn composition(&Layout, impl Into<Tiler>) -> Result<Layout>
//! fn complement(&Layout, cotarget: i64) -> Result<Layout>
//! fn complement_shape(&Layout, cotarget: &IntTuple) -> Result<Layout>
//! fn rest_shape(target: &IntTuple, tiler: &Layout) -> Result<IntTuple>   // CuTe ceil_div(shape, layout)
//! fn right_inverse(&Layout) -> Layout       fn left_inverse(&Layout) -> Result<Layout>
//! fn max_common_vector(&Layout, &Layout) -> i64     fn max_common_layout(&Layout, &Layout) -> Layout
//! fn logical_divide / zipped_divide / tiled_divide / flat_divide(&Layout, impl Into<Tiler>) -> Result<Layout>
//! fn logical_product / zipped_product / tiled_product / flat_product(&Layout, impl Into<Tiler>) -> Result<Layout>
//! fn blocked_product / raked_product(&Layout, &Layout) -> Result<Layout>
//! fn tile_to_shape(&Layout, target: &IntTuple, order: Option<&IntTuple>) -> Result<Layout>
//! fn upcast(&Layout, n) / downcast(&Layout, n) -> Result<Layout>
//! fn recast_layout(&Layout, old_bits, new_bits) -> Result<Layout>
//!
//! // Swizzles and shared memory
//! struct Swizzle (b, m, s)                                       // Display: Sw<3,4,3>
//!   Swizzle::new(b, m, s) -> Result, identity(), b() m() s() apply(x) yyy_mask() zzz_mask()
//!   upcast(n) downcast(n) recast(old_bits, new_bits) -> Result<Swizzle>
//!   nv32b() nv64b() nv128b()  (byte offsets), nv{32,64,128}b_for_elem_bytes(e) -> Result<Swizzle>
//! struct ComposedLayout { swizzle, offset, layout }              // Display: Sw<3,4,3> o 0 o (8,64):(64,1)
//!   new() call(i) size() compose(tiler) tile_to_shape(shape, order) recast(old_bits, new_bits)
//! enum NvSwizzle { None, B32, B64, B128 }
//!   bytes() tensor_map_code() wgmma_layout_type() byte_swizzle() swizzle_for_elem_bytes(e)
//!   from_tensor_map_code(u32) from_wgmma_layout_type(u32)
//! fn amd_ds_read_b128_swizzle(row_bytes, elem_bytes) -> Result<Swizzle>
//! fn amd_ds_read_b128_chunk(row, chunk, row_bytes) -> i64
//! struct SmemLayout { mode: NvSwizzle, layout: ComposedLayout }
//! fn smem_swizzle_layout(rows, cols, elem_bytes) -> Result<SmemLayout>   // row-major tile
//!
//! // Tensor-core / ldmatrix atoms: (thread, value) -> m + M*n of the M x N tile
//! struct TvAtom { name, m, n, dims, threads, values, tv: Layout, src_tv: Option<Layout> }
//!   element(thread, value) -> Option<(m, n)>
//! fn mma_m16n8k16_a() / _b() / _c() -> TvAtom          (A: MxK 16x16, B: NxK 8x16, C: MxN 16x8)
//! fn ldmatrix(count: 1|2|4, trans: bool) -> Result<TvAtom>   (16-bit elements; src_tv set)
//! fn wgmma_m64nnk16_c(n) / wgmma_m64nnk16_a(n) -> Result<TvAtom>
//! fn mfma_16x16x16f16_{a,b,c}() / mfma_16x16x32_bf16_{a,b,c}() -> TvAtom
//! fn atom_by_name(&str) -> Result<TvAtom>;  const ATOM_NAMES: &[&str]
//!
//! // Text, pictures, CLI
//! fn parse_int_tuple / parse_layout / parse_tiler / parse_swizzle / parse_composed(&str)
//!     -> Result<_, ParseError { offset, message }>   (also FromStr for each type)
//! fn layout_svg(&Layout) -> Result<String>   fn tv_svg(&TvAtom) -> Result<String>
//! fn tv_layout_svg(&Layout, m, n, title, dims) -> Result<String>
//! fn composed_layout_svg(&ComposedLayout) -> Result<String>
//! fn layout_grid(&Layout) / composed_grid(&ComposedLayout) -> Result<(rows, cols, Vec<i64>)>
//! mod cli: fn run(&[String]) -> Result<String, CliError>   (`tilelang layout ...`)
//! enum LayoutError (thiserror), type Result<T> = std::result::Result<T, LayoutError>
//! ```
//!
//! ## Example
//!
//! ```
//! use tl_layout::{composition, logical_divide, parse_layout, parse_tiler, Swizzle};
//!
//! let a = parse_layout("(6,2):(8,2)")?;
//! let b = parse_layout("(4,3):(3,1)")?;
//! let r = composition(&a, &b)?;
//! assert_eq!(r.to_string(), "((2,2),3):((24,2),8)");
//! assert!((0..b.size()).all(|i| r.call(i) == a.call(b.call(i))));
//!
//! let tiles = logical_divide(&parse_layout("(9,(4,8)):(59,(13,1))")?, parse_tiler("<3:3,(2,4):(1,8)>")?)?;
//! assert_eq!(tiles.to_string(), "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))");
//!
//! // Indivisible requests are errors, not wrong layouts.
//! assert!(composition(&parse_layout("(3,2):(1,10)")?, parse_layout("4:2")?).is_err());
//! assert_eq!(Swizzle::nv128b_for_elem_bytes(2)?.to_string(), "Sw<3,3,3>");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! See `docs/layout/README.md` for the notation, the CLI and pictures of the atoms.

pub mod atoms;
pub mod cli;
pub mod error;
pub mod int_tuple;
pub mod layout;
pub mod ops;
pub mod parse;
pub mod smem;
pub mod svg;
pub mod swizzle;
pub mod tiler;

#[cfg(test)]
pub(crate) mod testutil;

pub use atoms::{
    atom_by_name, ldmatrix, mfma_16x16x16f16_a, mfma_16x16x16f16_b, mfma_16x16x16f16_c,
    mfma_16x16x32_bf16_a, mfma_16x16x32_bf16_b, mfma_16x16x32_bf16_c, mma_m16n8k16_a,
    mma_m16n8k16_b, mma_m16n8k16_c, wgmma_m64nnk16_a, wgmma_m64nnk16_c, TvAtom, ATOM_NAMES,
};
pub use error::{LayoutError, Result};
pub use int_tuple::{ceil_div_tuple, compact_col_major, compact_row_major, IntTuple};
pub use layout::{make_ordered_layout, Layout};
pub use ops::coalesce::{coalesce, coalesce_by, filter, filter_zeros};
pub use ops::complement::{complement, complement_shape, rest_shape};
pub use ops::composition::composition;
pub use ops::divide::{flat_divide, logical_divide, tiled_divide, zipped_divide};
pub use ops::inverse::{left_inverse, max_common_layout, max_common_vector, right_inverse};
pub use ops::product::{
    blocked_product, flat_product, logical_product, raked_product, tile_to_shape, tiled_product,
    zipped_product,
};
pub use ops::recast::{downcast, recast_layout, upcast};
pub use parse::{
    parse_composed, parse_int_tuple, parse_layout, parse_swizzle, parse_tiler, ParseError,
};
pub use smem::{smem_swizzle_layout, SmemLayout};
pub use svg::{composed_grid, composed_layout_svg, layout_grid, layout_svg, tv_layout_svg, tv_svg};
pub use swizzle::{
    amd_ds_read_b128_chunk, amd_ds_read_b128_swizzle, ComposedLayout, NvSwizzle, Swizzle,
};
pub use tiler::Tiler;
