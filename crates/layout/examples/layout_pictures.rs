//! Regenerate the pictures in docs/layout/: `cargo run -p tilelang-layout --example
//! layout_pictures [OUT_DIR]` (default `docs/layout`, relative to the workspace root).

use std::path::PathBuf;
use tl_layout::{
    atom_by_name, composed_layout_svg, layout_svg, parse_layout, smem_swizzle_layout, tv_svg,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/layout"));
    std::fs::create_dir_all(&out)?;
    for name in [
        "mma_m16n8k16_a",
        "mma_m16n8k16_b",
        "mma_m16n8k16_c",
        "wgmma_m64n64k16_c",
        "ldmatrix_x4_trans",
        "mfma_16x16x16f16_c",
    ] {
        let path = out.join(format!("{name}.svg"));
        std::fs::write(&path, tv_svg(&atom_by_name(name)?)?)?;
        println!("wrote {}", path.display());
    }
    let l = parse_layout("((2,4),(2,4)):((1,4),(2,16))")?;
    let path = out.join("layout_example.svg");
    std::fs::write(&path, layout_svg(&l)?)?;
    println!("wrote {}", path.display());
    // The 128-byte swizzle of an 8 x 64 bf16 tile: each 8-element (16-byte) chunk of row r
    // moves to chunk position c ^ r.
    let smem = smem_swizzle_layout(8, 64, 2)?;
    let path = out.join("smem_sw128_8x64_bf16.svg");
    std::fs::write(&path, composed_layout_svg(&smem.layout)?)?;
    println!("wrote {}", path.display());
    Ok(())
}
