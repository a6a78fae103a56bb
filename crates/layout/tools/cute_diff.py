#!/usr/bin/env python3
"""Differential test of tl_layout against C++ CuTe (host-compiled, static integers).

Random small layouts go through both implementations; every result tl_layout returns is
compared, as a string, with what CuTe prints (static `_N` markers removed). With --errors,
the cases where tl_layout returns an error are compiled with CuTe instead and CuTe's result
is checked against the operation's post-condition (to confirm the error is justified).

Needs (none of it is a project dependency):
  * the CUTLASS headers:   --cutlass DIR   (DIR/include/cute/layout.hpp)
  * libcu++ (CCCL):        --cccl DIR      (DIR/cuda/std/...; e.g. the nvidia-cuda-cccl-cu12 wheel)
  * CUDA runtime headers:  --cudart DIR    (DIR/vector_types.h; e.g. the nvidia-cuda-runtime-cu12 wheel)
  * the driver:            cargo build --release -p tilelang-layout --example layout_ops
                           --driver target/release/examples/layout_ops
  * g++ with C++17.
Two crt/ headers that only nvcc ships are stubbed in a temporary directory.

Example:
  python3 crates/layout/tools/cute_diff.py --seed 1 --n 25 --cutlass ~/cutlass \
      --cccl ~/cccl/include --cudart ~/cudart/include --driver target/release/examples/layout_ops
"""
import argparse
import ast
import os
import random
import re
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------- random layouts


def rshape(rng):
    if rng.random() < 0.25:
        return rng.randint(1, 8)
    modes = []
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.7:
            modes.append(rng.randint(1, 4))
        else:
            modes.append(tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 2))))
    return tuple(modes)


def leaves(t):
    return [t] if isinstance(t, int) else [x for c in t for x in leaves(c)]


def unflat(t, it):
    return next(it) if isinstance(t, int) else tuple(unflat(c, it) for c in t)


def fmt(t):
    return str(t) if isinstance(t, int) else "(" + ",".join(fmt(c) for c in t) + ")"


def rlayout(rng, kind):
    """kind: any (random strides), inj (nested strides with gaps), compact (a bijection)."""
    s = rshape(rng)
    ls = leaves(s)
    if kind == "any":
        d = [rng.choice([0, 1, 2, 3, 4, 6, 8, 12, 16]) for _ in ls]
    else:
        perm = list(range(len(ls)))
        rng.shuffle(perm)
        d, cur = [0] * len(ls), 1
        for i in perm:
            cur *= rng.randint(1, 3) if kind == "inj" else 1
            d[i] = cur
            cur *= ls[i]
    return fmt(s) + ":" + fmt(unflat(s, iter(d)))


def make_cases(rng, n):
    cases = []
    for _ in range(n):
        a = rlayout(rng, rng.choice(["any", "inj", "compact"]))
        b = rlayout(rng, rng.choice(["inj", "compact"]))
        c = rlayout(rng, "compact")
        m = str(rng.choice([8, 12, 16, 24, 32, 48, 64]))
        cases += [("coalesce", a), ("coalesce11", a), ("compose", a, b), ("compose", c, b),
                  ("compose", c, rlayout(rng, "any")), ("complement", b, m), ("complement", a, m),
                  ("rinv", a), ("linv", a), ("linv", b),
                  ("ldiv", c, b), ("zdiv", c, b), ("tdiv", c, b), ("fdiv", c, b),
                  ("lprod", b, c), ("zprod", b, c), ("bprod", b, c), ("rprod", b, c),
                  ("mcv", c, rlayout(rng, "compact")),
                  ("up", a, str(rng.choice([2, 4]))), ("up", c, str(rng.choice([2, 4]))),
                  ("down", c, str(rng.choice([2, 4]))),
                  ("t2s", rlayout(rng, "compact"), rng.choice(["(8,8)", "(16,4)", "(4,16)", "(8,8,2)"]))]
        sh = rshape(rng)
        if not isinstance(sh, int):
            order = list(range(len(sh)))
            rng.shuffle(order)
            cases.append(("ord", fmt(sh), fmt(tuple(order))))
        t1, t2 = rlayout(rng, "inj"), rlayout(rng, "compact")
        if "," in c and not c.startswith("(("):
            cases += [("compose", c, f"<{t1},{t2}>"), ("ldiv", c, f"<{t1}>"), ("zdiv", c, f"<{t1}>"),
                      ("lprod", c, f"<{t1}>"), ("zprod", c, f"<{t1},{t2}>"), ("fprod", c, f"<{t1}>"),
                      ("tprod", c, f"<{t1}>")]
    return cases

# ---------------------------------------------------------------- C++ generation


def parse_tuple(s):
    s = s.replace(" ", "")

    def go(i):
        if s[i] == "(":
            i += 1
            v = []
            while True:
                x, i = go(i)
                v.append(x)
                if s[i] == ",":
                    i += 1
                    continue
                return tuple(v), i + 1
        j = i + (s[i] == "-")
        while j < len(s) and s[j].isdigit():
            j += 1
        return int(s[i:j]), j
    return go(0)[0]


def cpp_tuple(t, mk):
    if isinstance(t, int):
        return f"Int<{t}>{{}}"
    return f"{mk}(" + ",".join(cpp_tuple(c, mk) for c in t) + ")"


def cpp_layout(ls):
    sh, st = ls.split(":")
    return f"make_layout({cpp_tuple(parse_tuple(sh), 'make_shape')}, {cpp_tuple(parse_tuple(st), 'make_stride')})"


def cpp_tiler(ts):
    if not ts.startswith("<"):
        return cpp_layout(ts)
    parts, depth, cur = [], 0, ""
    for ch in ts[1:-1]:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch in "(<"
        depth -= ch in ")>"
        cur += ch
    parts.append(cur)
    return "make_tile(" + ",".join(cpp_layout(p) for p in parts) + ")"


def cpp_expr(c):
    op, a = c[0], c[1]
    sh = lambda s: cpp_tuple(parse_tuple(s), "make_shape")
    two = {"compose": "composition", "ldiv": "logical_divide", "zdiv": "zipped_divide",
           "tdiv": "tiled_divide", "fdiv": "flat_divide", "lprod": "logical_product",
           "zprod": "zipped_product", "tprod": "tiled_product", "fprod": "flat_product",
           "bprod": "blocked_product", "rprod": "raked_product", "mcv": "max_common_vector"}
    if op in two:
        return f"{two[op]}({cpp_layout(a)}, {cpp_tiler(c[2])})"
    return {
        "coalesce": lambda: f"coalesce({cpp_layout(a)})",
        "coalesce11": lambda: f"coalesce({cpp_layout(a)}, make_shape(_1{{}},_1{{}}))",
        "complement": lambda: f"complement({cpp_layout(a)}, Int<{c[2]}>{{}})",
        "rinv": lambda: f"right_inverse({cpp_layout(a)})",
        "linv": lambda: f"left_inverse({cpp_layout(a)})",
        "up": lambda: f"upcast<{c[2]}>({cpp_layout(a)})",
        "down": lambda: f"downcast<{c[2]}>({cpp_layout(a)})",
        "ord": lambda: f"make_ordered_layout({sh(a)}, {sh(c[2])})",
        "t2s": lambda: f"tile_to_shape({cpp_layout(a)}, {sh(c[2])})",
    }[op]()


STUBS = {
    "crt/host_defines.h": "#pragma once\n#define __host__\n#define __device__\n#define __global__\n"
    "#define __forceinline__ inline\n#define __align__(n) __attribute__((aligned(n)))\n"
    "#define __builtin_align__(a) __align__(a)\n#define __cudart_builtin__\n#define __device_builtin__\n"
    "#define __device_builtin_texture_type__\n#define __device_builtin_surface_type__\n#define CUDARTAPI\n"
    "#define __location__(a)\n#define __inline_hint__\n",
    "crt/host_config.h": "#pragma once\n",
}


def run_cute(batch, flags, work):
    """Compile all cases in one program; drop cases CuTe rejects at compile time."""
    rejected = []
    for _ in range(50):
        lines = ["#include <cute/layout.hpp>", "#include <iostream>", "using namespace cute;", "int main() {"]
        where = {}
        for i, c in batch:
            where[len(lines) + 1] = i
            lines.append(f'  std::cout << "{i} " << {cpp_expr(c)} << std::endl;')
        lines += ["  return 0;", "}"]
        src, exe = os.path.join(work, "t.cpp"), os.path.join(work, "t")
        open(src, "w").write("\n".join(lines) + "\n")
        r = subprocess.run(["g++", "-std=c++17", "-w", *flags, src, "-o", exe], capture_output=True, text=True)
        if r.returncode == 0:
            out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
            got = {int(k): v.replace("_", "") for k, v in (l.split(" ", 1) for l in out.splitlines())}
            return got, rejected
        bad = {where[int(m)] for m in re.findall(r"t\.cpp:(\d+):", r.stderr) if int(m) in where}
        if not bad:
            sys.exit("C++ compile failed outside the test lines:\n" + r.stderr[:3000])
        rejected += [(i, c) for i, c in batch if i in bad]
        batch = [(i, c) for i, c in batch if i not in bad]
    sys.exit("too many rejected batches")

# ---------------------------------------------------------------- post-conditions (for --errors)


def as_layout(s):
    conv = lambda t: ast.literal_eval(t.replace(")", ",)")) if t.startswith("(") else int(t)
    sh, st = s.split(":")
    return leaves(conv(sh)), leaves(conv(st))


def call(L, i):
    acc = 0
    for k, (s, d) in enumerate(zip(*L)):
        if k == len(L[0]) - 1:
            c = i
        else:
            c = int(i % s) if i >= 0 else -((-i) % s)
            i = int(i / s)
        acc += c * d
    return acc


def size(L):
    p = 1
    for s in L[0]:
        p *= s
    return p


def cute_result_is_correct(c, r):
    R = as_layout(r)
    if c[0] == "compose" and not c[2].startswith("<"):
        A, B = as_layout(c[1]), as_layout(c[2])
        return all(call(R, i) == call(A, call(B, i)) for i in range(size(B)))
    if c[0] == "linv":
        A = as_layout(c[1])
        return all(call(R, call(A, i)) == i for i in range(size(A)))
    return None

# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=20, help="rounds of random layouts (~25 cases each)")
    ap.add_argument("--cutlass", required=True)
    ap.add_argument("--cccl", required=True)
    ap.add_argument("--cudart", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--errors", action="store_true", help="check CuTe where tl_layout errs")
    args = ap.parse_args()

    cases = make_cases(random.Random(args.seed), args.n)
    inp = "\n".join("|".join(c) for c in cases) + "\n"
    out = subprocess.run([args.driver], input=inp, capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(cases)
    want_ok = not args.errors
    batch = [(i, c) for i, c in enumerate(cases) if out[i].startswith("OK") == want_ok]
    ours = {i: out[i].split(" ", 1)[1] for i, _ in batch}

    with tempfile.TemporaryDirectory() as work:
        for path, text in STUBS.items():
            os.makedirs(os.path.join(work, "stub", os.path.dirname(path)), exist_ok=True)
            open(os.path.join(work, "stub", path), "w").write(text)
        flags = [f"-I{os.path.join(work, 'stub')}", f"-I{args.cccl}", f"-I{args.cudart}",
                 f"-I{os.path.join(args.cutlass, 'include')}"]
        got, rejected = run_cute(batch, flags, work)

    if not args.errors:
        mism = [(i, c) for i, c in batch if i in got and got[i] != ours[i]]
        for i, c in mism:
            print("MISMATCH", c, "tl_layout:", ours[i], "cute:", got[i])
        for i, c in rejected:
            print("CUTE-REJECTS", c, "tl_layout:", ours[i])
        print(f"{len(cases)} cases: compared {len(got)}, mismatches {len(mism)}, "
              f"CuTe does not compile {len(rejected)} that tl_layout accepts")
        sys.exit(1 if mism else 0)
    verdicts = {True: 0, False: 0, None: 0}
    for i, c in batch:
        if i in got:
            v = cute_result_is_correct(c, got[i])
            verdicts[v] += 1
            if v:
                print("CUTE-CORRECT-WHERE-WE-ERR", c, got[i], "|", ours[i])
    print(f"tl_layout errors: {len(batch)}; CuTe rejects {len(rejected)}; CuTe result wrong "
          f"{verdicts[False]}, right {verdicts[True]}, not checked {verdicts[None]}")
    sys.exit(1 if verdicts[True] else 0)


if __name__ == "__main__":
    main()
