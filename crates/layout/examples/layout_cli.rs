//! Run the `tilelang layout` subcommand logic without the main binary:
//! `cargo run -p tilelang-layout --example layout_cli -- compose '(6,2):(8,2)' '(4,3):(3,1)'`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match tl_layout::cli::run(&args) {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
