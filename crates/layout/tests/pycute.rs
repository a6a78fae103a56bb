//! Differential test of coalesce and composition against pycute, the Python port of CuTe that
//! ships in the `nvidia-cutlass` wheel (pure Python, no GPU). `scripts/install-pycute.sh`
//! unpacks it and names its directory in `TILELANG_PYCUTE`; without it the test says SKIPPED
//! (and fails when `TILELANG_REQUIRE_PYCUTE=1`, as `scripts/test.sh` sets once it is
//! installed).
//!
//! Both sides get the same layouts: the fixed cases of issue 17 and the documented examples,
//! then random small layouts from a fixed seed. Where both answer, the answers must be the
//! same layout, printed alike. Where pycute answers and we refuse (our divisibility and carry
//! checks), pycute's answer must be wrong, i.e. `R(i) != coalesce(A)(B(i))` for some `i`; where
//! pycute's asserts refuse and we answer, ours must be right.

use std::io::Write;
use std::process::{Command, Stdio};

use tl_layout::{coalesce, composition, parse_layout, IntTuple, Layout};

/// Reads `op|shapeA|strideA[|shapeB|strideB]` lines (Python literals), prints `OK <layout>` in
/// our notation or `ERR <exception>` per line.
const DRIVER: &str = r#"
import sys
from pycute import Layout, coalesce, composition
def fmt(t):
    if isinstance(t, tuple):
        return "(" + ",".join(fmt(x) for x in t) + ")"
    return str(t)
for line in sys.stdin:
    p = line.rstrip("\n").split("|")
    try:
        a = Layout(eval(p[1]), eval(p[2]))
        if p[0] == "coalesce":
            r = coalesce(a)
        else:
            r = composition(a, Layout(eval(p[3]), eval(p[4])))
        print("OK " + fmt(r.shape) + ":" + fmt(r.stride))
    except Exception as e:
        print("ERR " + type(e).__name__)
"#;

fn py(t: &IntTuple) -> String {
    match t {
        IntTuple::Int(v) => v.to_string(),
        IntTuple::Tuple(v) if v.len() == 1 => format!("({},)", py(&v[0])),
        IntTuple::Tuple(v) => format!("({})", v.iter().map(py).collect::<Vec<_>>().join(",")),
    }
}

/// xorshift64*: the cases are the same on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64
    }
}

/// A random shape of depth <= 2 (1..=3 top modes of extents 1..=4 or pairs of them), with
/// strides in 0..=12, or for `compact` a bijection onto [0, size) in a random mode order.
fn random_layout(r: &mut Rng, compact: bool) -> Layout {
    let modes = 1 + r.below(3);
    let mut shape = vec![];
    for _ in 0..modes {
        if r.below(4) == 0 {
            shape.push(IntTuple::Tuple(
                (0..1 + r.below(2))
                    .map(|_| IntTuple::Int(1 + r.below(4)))
                    .collect(),
            ));
        } else {
            shape.push(IntTuple::Int(1 + r.below(4)));
        }
    }
    let shape = if modes == 1 && r.below(2) == 0 {
        IntTuple::Int(1 + r.below(8))
    } else {
        IntTuple::Tuple(shape)
    };
    let leaves = shape.leaves();
    let strides: Vec<i64> = if compact {
        let mut order: Vec<usize> = (0..leaves.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, r.below(i as u64 + 1) as usize);
        }
        let mut d = vec![0; leaves.len()];
        let mut cur = 1;
        for &i in &order {
            d[i] = cur;
            cur *= leaves[i];
        }
        d
    } else {
        leaves.iter().map(|_| r.below(13)).collect()
    };
    let stride = shape
        .unflatten_like(&strides)
        .expect("as many strides as leaves");
    Layout::new(shape, stride).expect("a valid layout")
}

enum Case {
    Coalesce(Layout),
    Compose(Layout, Layout),
}

fn line(c: &Case) -> String {
    match c {
        Case::Coalesce(a) => format!("coalesce|{}|{}", py(a.shape()), py(a.stride())),
        Case::Compose(a, b) => format!(
            "compose|{}|{}|{}|{}",
            py(a.shape()),
            py(a.stride()),
            py(b.shape()),
            py(b.stride())
        ),
    }
}

/// Whether `r` is `A ∘ B` on B's domain, with A extended past its size as coalesced.
fn is_composition(a: &Layout, b: &Layout, r: &Layout) -> bool {
    let ca = coalesce(a);
    r.size() == b.size() && (0..b.size()).all(|i| r.call(i) == ca.call(b.call(i)))
}

#[test]
fn coalesce_and_composition_agree_with_pycute() {
    let Some(dir) = std::env::var_os("TILELANG_PYCUTE") else {
        assert!(
            std::env::var("TILELANG_REQUIRE_PYCUTE").as_deref() != Ok("1"),
            "TILELANG_REQUIRE_PYCUTE=1 but TILELANG_PYCUTE is not set"
        );
        eprintln!("SKIPPED: pycute not installed (scripts/install-pycute.sh sets TILELANG_PYCUTE)");
        return;
    };
    let l = |s: &str| parse_layout(s).expect("layout");
    let mut cases = vec![
        // Issue 17: B leaves A's domain through A's size-1 modes.
        Case::Compose(l("(1,3,1):(4,4,2)"), l("6:3")),
        Case::Compose(l("(2,1):(2,1)"), l("8:2")),
        // The worked examples of the layout-algebra notes.
        Case::Compose(l("(6,2):(8,2)"), l("(4,3):(3,1)")),
        Case::Compose(l("20:2"), l("(5,4):(4,1)")),
        Case::Compose(l("(10,2):(16,4)"), l("(5,4):(1,5)")),
        Case::Coalesce(l("(2,(1,6)):(1,(6,2))")),
    ];
    let mut rng = Rng(0x7117_1a7e_5eed_0017);
    for i in 0..4000 {
        let a = random_layout(&mut rng, false);
        if i % 4 == 0 {
            cases.push(Case::Coalesce(a));
        } else {
            let b = random_layout(&mut rng, i % 2 == 0);
            cases.push(Case::Compose(a, b));
        }
    }
    let input: String = cases.iter().map(|c| line(c) + "\n").collect();
    let mut child = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg("-c")
        .arg(DRIVER)
        .env("PYTHONPATH", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("python3 finishes");
    writer.join().expect("writer").expect("written");
    assert!(
        out.status.success(),
        "pycute driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(answers.len(), cases.len(), "one answer per case");

    let (mut same, mut both_refuse, mut we_stricter, mut pycute_stricter) = (0, 0, 0, 0);
    let mut bad = vec![];
    for (c, theirs) in cases.iter().zip(&answers) {
        let (ours, what) = match c {
            Case::Coalesce(a) => (Ok(coalesce(a)), format!("coalesce {a}")),
            Case::Compose(a, b) => (composition(a, b), format!("{a} o {b}")),
        };
        match (&ours, theirs.strip_prefix("OK ")) {
            (Ok(r), Some(t)) if r.to_string() == t => same += 1,
            (Ok(r), Some(t)) => bad.push(format!("{what}: ours {r}, pycute {t}")),
            (Err(_), None) => both_refuse += 1,
            (Err(e), Some(t)) => match (c, parse_layout(t)) {
                (Case::Compose(a, b), Ok(tr)) if !is_composition(a, b, &tr) => we_stricter += 1,
                _ => bad.push(format!(
                    "{what}: we refuse ({e}) a right answer of pycute, {t}"
                )),
            },
            (Ok(r), None) => match c {
                Case::Compose(a, b) if is_composition(a, b, r) => pycute_stricter += 1,
                _ => bad.push(format!("{what}: ours {r} is wrong, pycute {theirs}")),
            },
        }
    }
    println!(
        "pycute: {} cases: {same} identical, {both_refuse} refused by both, {we_stricter} \
         refused by us where pycute's answer is wrong, {pycute_stricter} refused by pycute's \
         asserts where ours is right",
        cases.len()
    );
    assert!(
        bad.is_empty(),
        "{} disagreements:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // The issue's two cases are answered, identically.
    assert!(
        answers[0] == "OK 6:12" && answers[1] == "OK 8:4",
        "{answers:?}"
    );
    assert!(same > 2000, "too few cases both sides answer: {same}");
}
