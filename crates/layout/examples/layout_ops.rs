//! Line-oriented driver for differential testing against another layout implementation: each
//! stdin line is `op|arg|arg`, each output line is
//! `OK <result>` or `ERR <message>`.

use std::io::BufRead;
use tl_layout::*;

fn run(p: &[&str]) -> std::result::Result<String, String> {
    let arg = |i: usize| {
        p.get(i)
            .copied()
            .ok_or_else(|| format!("missing argument {i}"))
    };
    let l = |i: usize| parse_layout(arg(i)?).map_err(|e| e.to_string());
    let t = |i: usize| parse_tiler(arg(i)?).map_err(|e| e.to_string());
    let it = |i: usize| parse_int_tuple(arg(i)?).map_err(|e| e.to_string());
    let n = |i: usize| arg(i)?.parse::<i64>().map_err(|e| e.to_string());
    let e = |x: LayoutError| x.to_string();
    Ok(match arg(0)? {
        "coalesce" => coalesce(&l(1)?).to_string(),
        "coalesce11" => coalesce_by(&l(1)?, &IntTuple::from([1, 1]))
            .map_err(e)?
            .to_string(),
        "compose" => composition(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "complement" => complement(&l(1)?, n(2)?).map_err(e)?.to_string(),
        "rinv" => right_inverse(&l(1)?).to_string(),
        "linv" => left_inverse(&l(1)?).map_err(e)?.to_string(),
        "ldiv" => logical_divide(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "zdiv" => zipped_divide(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "tdiv" => tiled_divide(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "fdiv" => flat_divide(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "lprod" => logical_product(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "zprod" => zipped_product(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "tprod" => tiled_product(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "fprod" => flat_product(&l(1)?, t(2)?).map_err(e)?.to_string(),
        "bprod" => blocked_product(&l(1)?, &l(2)?).map_err(e)?.to_string(),
        "rprod" => raked_product(&l(1)?, &l(2)?).map_err(e)?.to_string(),
        "mcv" => max_common_vector(&l(1)?, &l(2)?).to_string(),
        "up" => upcast(&l(1)?, n(2)?).map_err(e)?.to_string(),
        "down" => downcast(&l(1)?, n(2)?).map_err(e)?.to_string(),
        "ord" => make_ordered_layout(&it(1)?, &it(2)?)
            .map_err(e)?
            .to_string(),
        "t2s" => tile_to_shape(&l(1)?, &it(2)?, None).map_err(e)?.to_string(),
        op => return Err(format!("unknown op {op}")),
    })
}

fn main() {
    for line in std::io::stdin().lock().lines().map_while(|l| l.ok()) {
        let p: Vec<&str> = line.split('|').collect();
        match run(&p) {
            Ok(s) => println!("OK {s}"),
            Err(s) => println!("ERR {s}"),
        }
    }
}
