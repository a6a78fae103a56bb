//! Tensors past 2^31 elements on the CPU backend, with symbolic sizes: every element is
//! reached, once (u8 tensors of about 2 GiB; each test is skipped with a note where less than
//! 6 GiB of memory is available).

use tilelang::prelude::*;

/// The big tests run one at a time (each holds 2-4 GiB).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn enough_memory() -> bool {
    let avail_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    if avail_kib < 6 << 20 {
        eprintln!(
            "SKIPPED: {} MiB of memory available, 6 GiB needed",
            avail_kib >> 10
        );
        return false;
    }
    true
}

/// `X += 1` over a tensor of `shape`, tiled as `tile`, zero on entry: how many elements are
/// not 1 afterwards.
fn add_one(shape: &[usize], tile: &[i64], threads: u32) -> usize {
    let k = Kernel::build("add_one", |k| {
        let dims: Vec<Expr> = (0..shape.len()).map(|d| k.dim(["M", "N"][d])).collect();
        let x = k.inout("X", dims.clone(), U8);
        if let [m, n] = &dims[..] {
            let (bm, bn) = (tile[0], tile[1]);
            k.launch([ceildiv(n, bn), ceildiv(m, bm)], threads, |t, [bx, by]| {
                let f = t.alloc_fragment([bm, bn], U8);
                t.copy(x.tile([&by * bm, &bx * bn]), &f);
                t.parallel([bm, bn], |t, [i, j]| {
                    t.store(&f, [&i, &j], (f.at([&i, &j]) + 1).cast(U8));
                });
                t.copy(&f, x.tile([&by * bm, &bx * bn]));
            });
        } else {
            let b = tile[0];
            k.launch([ceildiv(&dims[0], b)], threads, |t, [bx]| {
                let f = t.alloc_fragment([b], U8);
                t.copy(x.tile([&bx * b]), &f);
                t.parallel([b], |t, [i]| {
                    t.store(&f, [&i], (f.at([&i]) + 1).cast(U8));
                });
                t.copy(&f, x.tile([&bx * b]));
            });
        }
    });
    let dev = Device::Cpu;
    let x = Tensor::zeros(shape, U8, &dev).expect("tensor");
    k.compile(&dev).expect("compiles").run(&[&x]).expect("runs");
    let bytes = x.to_bytes().expect("bytes");
    assert_eq!(bytes.len(), shape.iter().product::<usize>());
    bytes.iter().filter(|&&b| b != 1).count()
}

/// 65,537 x 32,769 = 2^31 + 98,305 elements; the tiles at the bottom right edge are partial.
#[test]
fn two_dims_past_two_to_the_31_elements() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !enough_memory() {
        return;
    }
    let shape = [65_537, 32_769];
    assert!(shape[0] * shape[1] > 1 << 31);
    assert_eq!(add_one(&shape, &[8, 256], 128), 0);
}

/// One dimension of the largest symbolic size, 2^31 - 2^24, in blocks of 1,000: the last
/// block's indices run past the size by up to 999 before the bounds check and must not wrap.
/// One more element is refused at launch with a message that says why.
#[test]
fn one_dim_of_the_largest_size_with_an_overhanging_block() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !enough_memory() {
        return;
    }
    let max = tilelang::ir::kernel::MAX_SYMBOLIC_DIM;
    assert_eq!(add_one(&[max], &[1000], 128), 0);
    let k = Kernel::build("copy1", |k| {
        let n = k.dim("N");
        let x = k.inout("X", [&n], U8);
        k.launch([ceildiv(&n, 1000)], 128, |t, [bx]| {
            let f = t.alloc_fragment([1000], U8);
            t.copy(x.tile([&bx * 1000]), &f);
            t.copy(&f, x.tile([&bx * 1000]));
        });
    });
    let x = Tensor::zeros(&[max + 1], U8, &Device::Cpu).expect("tensor");
    let e = k
        .compile(&Device::Cpu)
        .expect("compiles")
        .run(&[&x])
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("2^31 - 2^24") && e.contains(&(max + 1).to_string()),
        "{e}"
    );
}

/// Where the compiler puts the 64-bit arithmetic: the offsets into global tensors widen every
/// index and stride before multiplying, on every backend (the CPU's C, CUDA C++ and PTX for
/// sm_80 and sm_90a, HIP for gfx950), so `row * N + col` past 2^31 does not wrap; block and
/// thread indices, tile indices and shared-memory offsets stay 32-bit.
#[test]
fn global_offsets_widen_before_multiplying_on_every_backend() {
    let k = Kernel::build("add_one_2d", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let x = k.inout("X", [&m, &n], F16);
        k.launch([ceildiv(&n, 256), ceildiv(&m, 8)], 128, |t, [bx, by]| {
            let f = t.alloc_fragment([8, 256], F16);
            t.copy(x.tile([&by * 8, &bx * 256]), &f);
            t.parallel([8, 256], |t, [i, j]| {
                t.store(&f, [&i, &j], f.at([&i, &j]) + 1.0);
            });
            t.copy(&f, x.tile([&by * 8, &bx * 256]));
        });
    });
    for (what, src) in [
        ("C", k.emit(Target::Cpu)),
        ("CUDA sm_80", k.emit(Target::SM80)),
        ("CUDA sm_90a", k.emit(Target::SM90)),
        ("HIP gfx950", k.emit(Target::GFX950)),
    ] {
        let src = src.unwrap_or_else(|e| panic!("{what}: {e}"));
        let accesses: Vec<&str> = src.lines().filter(|l| l.contains("X[")).collect();
        assert!(!accesses.is_empty(), "{what}: no access to X");
        for l in accesses {
            assert!(
                l.contains("X[((((int64_t)(") && l.contains(" * ((int64_t)N))"),
                "{what}: the offset must widen the row index and the row stride: {l}"
            );
        }
    }
    for target in [Target::SM80, Target::SM90] {
        let ptx = k.emit_ptx(target).expect("ptx");
        // The row stride N is the third parameter: it is only ever multiplied 32x32->64.
        let n_reg = ptx
            .lines()
            .find(|l| l.contains("ld.param.s32") && l.contains("_param_2]"))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(|r| r.trim_end_matches(','))
            .expect("N's register");
        let uses = |l: &str| {
            l.split(|c: char| c == ',' || c == ';' || c.is_whitespace())
                .any(|w| w == n_reg)
        };
        let mut wide = 0;
        for l in ptx.lines().map(str::trim) {
            if (l.starts_with("mul.lo.s32") || l.starts_with("mad.lo.s32")) && uses(l) {
                panic!("{target}: N multiplied in 32 bits: {l}");
            }
            if (l.starts_with("mul.wide.s32") || l.starts_with("mad.wide.s32")) && uses(l) {
                wide += 1;
            }
        }
        assert!(wide > 0, "{target}: no 32x32->64 multiply by N:\n{ptx}");
    }
}
