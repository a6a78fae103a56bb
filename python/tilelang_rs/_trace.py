"""The tracer: runs a ``@T.prim_func``'s body as tile IR.

TileLang parses a kernel's source and interprets it; so does this module. The function's AST
is walked statement by statement. Expressions are evaluated by Python itself (``eval`` of each
expression, compiled once) in a namespace of the function's globals, its closure and the
kernel's locals, where symbolic values are ``_native.Expr`` and buffers ``_native.Buffer``
objects whose operators build IR. Statements that mean something in a kernel — ``with
T.Kernel``, ``for ... in T.Parallel/T.Pipelined/T.serial/T.unroll/range``, ``if`` on a symbolic
condition, ``buf[i, j] = v`` — become calls of the native builder, which is the Rust DSL's
imperative form: every tile op gets the Rust checks and diagnostics. Python-level code (constants,
``if`` on a Python value, loops over Python lists, helper calls) simply runs at trace time.

Before each statement the builder is told the user's file, line and column, so diagnostics
point at the kernel's source; Python errors raised while tracing become ``TileLangError`` with
that location too.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from . import _native
from ._native import TileLangError

_state = threading.local()


def current() -> "Tracer":
    """The tracer of the kernel being traced on this thread."""
    t = getattr(_state, "tracer", None)
    if t is None:
        raise TileLangError(
            "error[invalid-argument]: T.* tile operations are only meaningful inside a "
            "@T.prim_func body being traced\n  help: call them in the body of a function "
            "decorated with @T.prim_func (or @T.macro called from one)"
        )
    return t


def tracing() -> bool:
    return getattr(_state, "tracer", None) is not None


# ----- loop and launch specifications made by T.* and consumed by the tracer -----


@dataclass
class LoopSpec:
    """What ``for x in T.Parallel(...)`` and the like iterate over."""

    kind: str  # parallel, pipelined, serial, unroll, grid
    extents: list = field(default_factory=list)
    start: Any = 0
    stop: Any = None
    step: Any = 1
    stages: int = 0
    order: Any = None
    stage: Any = None

    def __iter__(self):
        raise TileLangError(
            f"error[invalid-argument]: a T.{self.kind} loop runs only as a `for` statement "
            "directly in a @T.prim_func or @T.macro body\n  help: write `for i in T.Parallel(n):` "
            "in the kernel body, not in a helper function, comprehension or call"
        )


@dataclass
class KernelSpec:
    """What ``with T.Kernel(*grid, threads=...)`` opens."""

    grid: list
    threads: int

    def __enter__(self):
        raise TileLangError(
            "error[invalid-argument]: `with T.Kernel(...)` opens a launch only in a "
            "@T.prim_func body"
        )

    def __exit__(self, *a):
        return False


class _Flow(Exception):
    """break / continue / return out of trace-time Python loops."""

    def __init__(self, kind: str):
        self.kind = kind


# ----- expressions: and/or/not/if-else/chained comparisons on symbolic values -----


def _is_sym(x: Any) -> bool:
    return isinstance(x, _native.Expr)


def _tl_and(a, b_thunk):
    if not _is_sym(a):
        return b_thunk() if a else a
    b = b_thunk()
    if not _is_sym(b):
        return a if b else False
    return _native.binary("and", a, b)


def _tl_or(a, b_thunk):
    if not _is_sym(a):
        return a if a else b_thunk()
    b = b_thunk()
    if not _is_sym(b):
        return True if b else a
    return _native.binary("or", a, b)


def _tl_not(a):
    if _is_sym(a):
        return _native.unary("not", a)
    return not a


def _tl_ifexp(c, a_thunk, b_thunk):
    if _is_sym(c):
        return _native.if_then_else(c, a_thunk(), b_thunk())
    return a_thunk() if c else b_thunk()


class _Rewrite(ast.NodeTransformer):
    """Make ``and``/``or``/``not``/``x if c else y`` and chained comparisons work on symbolic
    values: each becomes a call of a helper that keeps Python's semantics on Python values
    (short-circuiting included) and builds IR on symbolic ones."""

    def _call(self, name, args, like):
        return ast.copy_location(
            ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[]), like
        )

    @staticmethod
    def _thunk(e):
        return ast.copy_location(
            ast.Lambda(
                args=ast.arguments(
                    posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]
                ),
                body=e,
            ),
            e,
        )

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        name = "__tl_and" if isinstance(node.op, ast.And) else "__tl_or"
        acc = node.values[0]
        for v in node.values[1:]:
            acc = self._call(name, [acc, self._thunk(v)], node)
        return acc

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return self._call("__tl_not", [node.operand], node)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return self._call(
            "__tl_ifexp", [node.test, self._thunk(node.body), self._thunk(node.orelse)], node
        )

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(
                ast.copy_location(ast.Compare(left=left, ops=[op], comparators=[right]), node)
            )
            left = right
        acc = parts[0]
        for p in parts[1:]:
            acc = self._call("__tl_and", [acc, self._thunk(p)], node)
        return acc

    # Lambdas and comprehensions keep Python's own semantics.
    def visit_Lambda(self, node):
        return node

    def visit_ListComp(self, node):
        return node

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp


# ----- the function's source -----


@dataclass
class Source:
    """A kernel function's AST, with locations in the user's file."""

    fn: Callable
    tree: ast.FunctionDef
    file: str
    col_shift: int
    codes: dict = field(default_factory=dict)

    def code(self, node: ast.expr):
        """The compiled code of an expression node (rewritten for symbolic values)."""
        c = self.codes.get(id(node))
        if c is None:
            if _needs_rewrite(node):
                e = _Rewrite().visit(ast.Expression(body=_clone(node)))
                ast.fix_missing_locations(e)
            else:  # compiled as written (compile does not change the tree)
                e = ast.Expression(body=node)
            c = compile(e, self.file, "eval")
            self.codes[id(node)] = c
        return c


def _needs_rewrite(node: ast.AST) -> bool:
    """Whether ``_Rewrite`` changes anything in ``node`` (most expressions it does not)."""
    for n in ast.walk(node):
        if isinstance(n, (ast.BoolOp, ast.IfExp)) or (
                isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)) or (
                isinstance(n, ast.Compare) and len(n.ops) > 1):
            return True
    return False


def _clone(node):
    """A copy of an AST (``_Rewrite`` edits the tree it visits); faster than deepcopy."""
    if isinstance(node, ast.AST):
        new = node.__class__()
        for f in node._fields:
            if hasattr(node, f):
                setattr(new, f, _clone(getattr(node, f)))
        for a in node._attributes:
            if hasattr(node, a):
                setattr(new, a, getattr(node, a))
        return new
    if isinstance(node, list):
        return [_clone(x) for x in node]
    return node


_sources: dict = {}


_files: dict = {}


def _index_defs(stmts: list, index: dict) -> None:
    """Every function definition among ``stmts`` and the statements nested in them (not
    expressions: a definition is a statement), by (first line, name)."""
    for n in stmts:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = n.decorator_list[0].lineno if n.decorator_list else n.lineno
            index[(first, n.name)] = n
        for f in ("body", "orelse", "finalbody", "handlers", "cases"):
            sub = getattr(n, f, None)
            if isinstance(sub, list):
                _index_defs(sub, index)


def _node_in_file(fn: Callable):
    """``fn``'s definition from its whole file, parsed once per file (the file's functions
    indexed by first line and name), or None where that fails (then ``inspect`` finds the
    source). Much cheaper than ``inspect.getsourcelines``, which tokenizes each time."""
    code = fn.__code__
    try:
        lines = linecache.getlines(code.co_filename, fn.__globals__)
        if not lines:
            return None
        entry = _files.get(code.co_filename)
        if entry is None or entry[0] is not lines:
            index: dict = {}
            _index_defs(ast.parse("".join(lines)).body, index)
            entry = (lines, index)
            _files[code.co_filename] = entry
        return entry[1].get((code.co_firstlineno, code.co_name))
    except (SyntaxError, ValueError, OSError):
        return None


def source_of(fn: Callable) -> Source:
    """Parse ``fn`` once per code object: a kernel factory's inner ``@T.prim_func`` is a new
    function at every call, but its AST and the compiled expressions are reused. (Code objects
    compare by content, not by file, hence the file in the key.)"""
    key = (fn.__code__.co_filename, fn.__code__)
    s = _sources.get(key)
    if s is not None:
        return s
    node = _node_in_file(fn)
    if node is not None:
        s = Source(fn=fn, tree=node, file=fn.__code__.co_filename, col_shift=0)
        _sources[key] = s
        return s
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError) as e:
        raise TileLangError(
            f"error[invalid-argument]: the source of `{fn.__qualname__}` is not available ({e})\n"
            "  help: define kernels in a .py file (the tracer reads the function's source)"
        ) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    shift = _indent(text) - _indent(dedented)
    tree = ast.parse(dedented)
    ast.increment_lineno(tree, first - 1)
    fdef = next(
        n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    )
    s = Source(fn=fn, tree=fdef, file=file, col_shift=shift)
    _sources[key] = s
    return s


def _indent(text: str) -> int:
    for line in text.splitlines():
        if line.strip():
            return len(line) - len(line.lstrip())
    return 0


def closure_vars(fn: Callable) -> dict:
    names = fn.__code__.co_freevars
    cells = fn.__closure__ or ()
    out = {}
    for n, c in zip(names, cells):
        try:
            out[n] = c.cell_contents
        except ValueError:  # an empty cell (a name assigned later)
            pass
    return out


# ----- the interpreter -----


class Tracer:
    def __init__(self, src: Source, ns: dict, builder: "_native.Builder"):
        self.src = src
        self.ns = ns
        self.b = builder
        self.pending_name: str | None = None
        self.in_launch = False
        self.line = src.tree.lineno
        self.col = 1
        ns["__tl_and"] = _tl_and
        ns["__tl_or"] = _tl_or
        ns["__tl_not"] = _tl_not
        ns["__tl_ifexp"] = _tl_ifexp

    # -- locations and errors --

    def at(self, node: ast.AST) -> None:
        self.line = getattr(node, "lineno", self.line)
        self.col = getattr(node, "col_offset", 0) + self.src.col_shift + 1
        self.b.set_span(self.src.file, self.line, self.col)

    def where(self) -> str:
        return f"{self.src.file}:{self.line}:{self.col}"

    def fail(self, kind: str, message: str, help: str | None = None) -> TileLangError:
        text = f"error[{kind}]: {message}\n  --> {self.where()}"
        if help:
            text += f"\n  help: {help}"
        return TileLangError(text)

    def take_name(self) -> str | None:
        n, self.pending_name = self.pending_name, None
        return n

    # -- evaluation --

    def eval(self, node: ast.expr) -> Any:
        return eval(self.src.code(node), self.ns)

    def run_body(self, stmts: list) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        self.at(s)
        try:
            self._stmt(s)
        except (TileLangError, _Flow):
            raise
        except Exception as e:  # a Python error in the user's code, at the user's line
            self.at(s)
            raise self.fail(
                "python", f"{type(e).__name__}: {e}"
            ) from e

    def _stmt(self, s: ast.stmt) -> None:
        m = getattr(self, "s_" + type(s).__name__, None)
        if m is None:
            raise self.fail(
                "unsupported",
                f"`{type(s).__name__}` statements are not supported in a kernel",
                "kernels take assignments, stores, `for` over T.* loops or Python iterables, "
                "`if`, `with T.Kernel`, and calls",
            )
        m(s)

    # -- statements --

    def s_Expr(self, s: ast.Expr) -> None:
        if isinstance(s.value, ast.Constant):  # a docstring or a bare constant
            return
        self.eval(s.value)

    def s_Pass(self, s) -> None:
        pass

    def s_Return(self, s: ast.Return) -> None:
        raise _Flow("return")

    def s_Break(self, s) -> None:
        raise _Flow("break")

    def s_Continue(self, s) -> None:
        raise _Flow("continue")

    def s_Assert(self, s: ast.Assert) -> None:
        v = self.eval(s.test)
        if _is_sym(v):
            raise self.fail(
                "unsupported",
                "`assert` on a symbolic value cannot be checked while tracing",
                "assert on Python values (sizes, configuration) only",
            )
        if not v:
            msg = self.eval(s.msg) if s.msg is not None else "assertion failed"
            raise self.fail("invalid-argument", str(msg))

    def s_Import(self, s) -> None:
        exec(compile(ast.Module(body=[s], type_ignores=[]), self.src.file, "exec"), self.ns)

    s_ImportFrom = s_Import

    def s_FunctionDef(self, s) -> None:
        # A helper defined in the kernel runs as Python when called (T.* calls in it work;
        # T.* loops need @T.macro).
        mod = ast.Module(body=[s], type_ignores=[])
        exec(compile(mod, self.src.file, "exec"), self.ns)

    def s_Global(self, s) -> None:
        raise self.fail("unsupported", "`global` is not supported in a kernel")

    s_Nonlocal = s_Global

    def s_Delete(self, s: ast.Delete) -> None:
        for t in s.targets:
            if isinstance(t, ast.Name):
                self.ns.pop(t.id, None)
            else:
                raise self.fail("unsupported", "only names can be deleted in a kernel")

    def s_Assign(self, s: ast.Assign) -> None:
        if len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            self.pending_name = s.targets[0].id
        try:
            value = self.eval(s.value)
        finally:
            self.pending_name = None
        for t in s.targets:
            self.assign(t, value)

    def s_AnnAssign(self, s: ast.AnnAssign) -> None:
        if s.value is None:
            return
        if isinstance(s.target, ast.Name):
            self.pending_name = s.target.id
        try:
            value = self.eval(s.value)
        finally:
            self.pending_name = None
        self.assign(s.target, value)

    def assign(self, t: ast.expr, value: Any) -> None:
        if isinstance(t, ast.Name):
            self.ns[t.id] = value
        elif isinstance(t, (ast.Tuple, ast.List)):
            items = list(value)
            if len(items) != len(t.elts):
                raise self.fail(
                    "invalid-argument",
                    f"cannot unpack {len(items)} values into {len(t.elts)} names",
                )
            for e, v in zip(t.elts, items):
                self.assign(e, v)
        elif isinstance(t, ast.Subscript):
            obj = self.eval(t.value)
            key = self.eval(t.slice)
            if isinstance(obj, _native.Buffer):
                self.b.store(obj, key, value)
            else:
                obj[key] = value
        elif isinstance(t, ast.Attribute):
            setattr(self.eval(t.value), t.attr, value)
        else:
            raise self.fail("unsupported", f"cannot assign to `{ast.unparse(t)}`")

    def s_AugAssign(self, s: ast.AugAssign) -> None:
        value = self.eval(s.value)
        op = _BINOPS[type(s.op)]
        t = s.target
        if isinstance(t, ast.Subscript):
            obj = self.eval(t.value)
            key = self.eval(t.slice)
            if isinstance(obj, _native.Buffer):
                self.b.store(obj, key, op(obj[key], value))
            else:
                obj[key] = op(obj[key], value)
        elif isinstance(t, ast.Name):
            if t.id not in self.ns:
                raise self.fail("undefined-variable", f"`{t.id}` is not defined")
            self.ns[t.id] = op(self.ns[t.id], value)
        elif isinstance(t, ast.Attribute):
            o = self.eval(t.value)
            setattr(o, t.attr, op(getattr(o, t.attr), value))
        else:
            raise self.fail("unsupported", f"cannot assign to `{ast.unparse(t)}`")

    def s_If(self, s: ast.If) -> None:
        cond = self.eval(s.test)
        if _is_sym(cond):
            c = cond.simplify()
            if not _is_sym(c):
                cond = c
        if not _is_sym(cond):
            # A Python (or constant) condition: one branch is traced, at trace time.
            self.run_body(s.body if cond else s.orelse)
            return
        self.b.begin_if(cond)
        try:
            self.symbolic_block(s.body, "an `if` on a symbolic condition")
            if s.orelse:
                self.b.begin_else()
                self.symbolic_block(s.orelse, "an `if` on a symbolic condition")
        finally:
            self.at(s)
        self.b.end_if()

    def symbolic_block(self, body: list, what: str) -> None:
        """A block the IR executes (not the tracer): Python control flow out of it is an
        error, since it would be decided once for every run."""
        try:
            self.run_body(body)
        except _Flow as f:
            raise self.fail(
                "unsupported",
                f"`{f.kind}` inside {what} cannot be traced",
                "the tracer runs the body once to build the kernel; use a T.* loop bound "
                "or a condition instead",
            ) from None

    def s_While(self, s: ast.While) -> None:
        while True:
            cond = self.eval(s.test)
            if _is_sym(cond):
                raise self.fail(
                    "unsupported",
                    "`while` on a symbolic condition is not supported",
                    "loop with `for k in T.serial(n)` and an `if` inside",
                )
            if not cond:
                break
            try:
                self.run_body(s.body)
            except _Flow as f:
                if f.kind == "break":
                    break
                if f.kind == "continue":
                    continue
                raise
            self.at(s)

    def s_With(self, s: ast.With) -> None:
        if len(s.items) != 1:
            raise self.fail("unsupported", "a kernel's `with` takes one T.Kernel(...)")
        item = s.items[0]
        spec = self.eval(item.context_expr)
        if not isinstance(spec, KernelSpec):
            raise self.fail(
                "unsupported",
                f"`with {ast.unparse(item.context_expr)}` is not supported in a kernel",
                "the one `with` of a kernel is `with T.Kernel(grid..., threads=n) as (bx, by):`",
            )
        v = item.optional_vars
        if v is None:
            names = ["bx", "by", "bz"][: max(1, len(spec.grid))]
        elif isinstance(v, ast.Name):
            names = [v.id]
        elif isinstance(v, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Name) for e in v.elts
        ):
            names = [e.id for e in v.elts]
        else:
            raise self.fail("unsupported", "name the block indices: `as bx` or `as (bx, by)`")
        idx = self.b.begin_launch(spec.grid, spec.threads, names)
        if idx is None:  # a second launch: diagnosed by the builder
            return
        if v is not None:
            if isinstance(v, ast.Name):
                self.ns[v.id] = idx[0] if idx else None
            else:
                for n, e in zip(names, idx):
                    self.ns[n] = e
        self.in_launch = True
        try:
            self.symbolic_block(s.body, "a kernel launch")
        finally:
            self.in_launch = False
            self.at(s)
        self.b.end_launch()

    def s_For(self, s: ast.For) -> None:
        it = self.loop_spec(s.iter)
        if it is None:
            # A Python iterable: the body is traced once per item (unrolled at trace time).
            for value in self.eval(s.iter):
                self.assign(s.target, value)
                try:
                    self.run_body(s.body)
                except _Flow as f:
                    if f.kind == "break":
                        break
                    if f.kind == "continue":
                        self.at(s)
                        continue
                    raise
                self.at(s)
            else:
                self.run_body(s.orelse)
            return
        if s.orelse:
            raise self.fail("unsupported", "`for ... else` over a T.* loop is not supported")
        names = self.target_names(s.target)
        if it.kind == "parallel":
            idx = self.b.begin_parallel(it.extents, names)
            if idx is None:  # names and extents disagree: diagnosed by the builder
                return
            for n, e in zip(names, idx):
                self.ns[n] = e
            self.loop_body(s, 1, it.kind)
            return
        if it.kind == "grid":
            if len(names) != len(it.extents):
                raise self.fail(
                    "invalid-argument",
                    f"T.grid over {len(it.extents)} extents, but the loop takes "
                    f"{len(names)} indices",
                )
            for n, e in zip(names, it.extents):
                self.ns[n] = self.b.begin_for("serial", n, 0, e)
            self.loop_body(s, len(names), it.kind)
            return
        if len(names) != 1:
            raise self.fail(
                "invalid-argument", f"a T.{it.kind} loop has one index, not {len(names)}"
            )
        start, stop, step = it.start, it.stop, it.step
        if _is_sym(step) or not isinstance(step, int) or step == 0:
            raise self.fail("invalid-argument", "a loop step must be a non-zero Python int")
        if step == 1:
            v = self.b.begin_for(it.kind, names[0], start, stop - start, it.stages, it.order, it.stage)
            self.ns[names[0]] = v
        else:
            n = _ceildiv(stop - start, step) if step > 0 else _ceildiv(start - stop, -step)
            v = self.b.begin_for(it.kind, names[0], 0, n, it.stages, it.order, it.stage)
            self.ns[names[0]] = start + v * step
        self.loop_body(s, 1, it.kind)

    def loop_body(self, s: ast.For, depth: int, kind: str) -> None:
        try:
            self.symbolic_block(s.body, f"a T.{kind} loop")
        finally:
            self.at(s)
        for _ in range(depth):
            self.b.end_for()

    def target_names(self, t: ast.expr) -> list:
        if isinstance(t, ast.Name):
            return [t.id]
        if isinstance(t, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in t.elts):
            return [e.id for e in t.elts]
        raise self.fail("unsupported", "loop indices must be names: `for i, j in T.Parallel(m, n)`")

    def loop_spec(self, node: ast.expr) -> LoopSpec | None:
        """The T.* loop a `for` iterates over; `range(...)` in a launch is a serial loop."""
        if (
            self.in_launch
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "range"
            and self.ns.get("range", range) is range
        ):
            args = [self.eval(a) for a in node.args]
            if node.keywords or not 1 <= len(args) <= 3:
                raise self.fail("invalid-argument", "range takes 1 to 3 positional arguments")
            return _serial_spec("serial", *args)
        v = self.eval(node)
        return v if isinstance(v, LoopSpec) else None


def _ceildiv(a, b):
    if _is_sym(a) or _is_sym(b):
        return _native.binary("ceildiv", a, b)
    return -(-a // b)


def _serial_spec(kind: str, start, stop=None, step=None) -> LoopSpec:
    if stop is None:
        start, stop = 0, start
    return LoopSpec(kind=kind, start=start, stop=stop, step=1 if step is None else step)


_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
    ast.BitAnd: lambda a, b: a & b,
    ast.BitOr: lambda a, b: a | b,
    ast.BitXor: lambda a, b: a ^ b,
}


# ----- entry points -----


@dataclass
class ParamSpec:
    name: str
    kind: str  # tensor or scalar
    shape: list
    dtype: str
    symmetric: bool = False  # a T.SymmTensor


def trace(fn: Callable, outer: dict | None = None) -> tuple["_native.Kernel", list]:
    """Trace a kernel function into a verified native Kernel and its parameter list.
    ``outer``: the locals of the scope that defined it (names used only in annotations are
    not in the function's closure)."""
    from .language import TensorSpec, DType

    if tracing():
        raise TileLangError(
            "error[invalid-argument]: a @T.prim_func is being defined while another kernel is "
            "traced\n  help: define kernels outside each other"
        )
    src = source_of(fn)
    ns = dict(fn.__globals__)
    ns.update(outer or {})
    ns.update(closure_vars(fn))
    b = _native.Builder(fn.__name__, src.file, src.tree.lineno)
    tracer = Tracer(src, ns, b)
    params = []
    args = src.tree.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        tracer.at(src.tree)
        raise tracer.fail(
            "unsupported",
            "a kernel takes plain positional parameters annotated with T.Tensor(shape, dtype) "
            "or a dtype",
        )
    _state.tracer = tracer
    try:
        for a in args.args:
            tracer.at(a)
            if a.annotation is None:
                raise tracer.fail(
                    "invalid-argument",
                    f"parameter `{a.arg}` has no annotation",
                    "annotate tensors `A: T.Tensor((M, K), \"float16\")` and scalars `n: T.int32`",
                )
            try:
                ann = fn.__annotations__.get(a.arg)
                if ann is None or isinstance(ann, str):
                    ann = tracer.eval(a.annotation)
            except TileLangError:
                raise
            except Exception as e:
                raise tracer.fail("python", f"{type(e).__name__}: {e}") from e
            if isinstance(ann, TensorSpec):
                if getattr(ann, "symmetric", False):
                    buf = b.symmetric_param(a.arg, list(ann.shape), str(ann.dtype))
                else:
                    buf = b.param(a.arg, list(ann.shape), str(ann.dtype))
                ns[a.arg] = buf
                params.append(ParamSpec(a.arg, "tensor", list(ann.shape),
                                        _native.canonical_dtype(str(ann.dtype)),
                                        bool(getattr(ann, "symmetric", False))))
            elif isinstance(ann, (DType, str)):
                ns[a.arg] = b.scalar(a.arg, str(ann))
                params.append(ParamSpec(a.arg, "scalar", [], _native.canonical_dtype(str(ann))))
            else:
                raise tracer.fail(
                    "invalid-argument",
                    f"parameter `{a.arg}` is annotated with `{ast.unparse(a.annotation)}`",
                    "annotate tensors `A: T.Tensor((M, K), \"float16\")` and scalars `n: T.int32`",
                )
        try:
            tracer.run_body(src.tree.body)
        except _Flow as f:
            if f.kind != "return":
                raise tracer.fail("invalid-argument", f"`{f.kind}` outside a loop") from None
        kernel = b.finish()
    finally:
        _state.tracer = None
    return kernel, params


def run_macro(fn: Callable, args: tuple, kwargs: dict, scope: dict | None = None) -> Any:
    """Trace a @T.macro's body inline, in the current kernel, with its arguments bound."""
    outer = current()
    src = source_of(fn)
    ns = dict(fn.__globals__)
    ns.update(scope or {})
    ns.update(closure_vars(fn))
    sig = inspect.signature(fn)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    ns.update(bound.arguments)
    t = Tracer(src, ns, outer.b)
    t.in_launch = outer.in_launch
    saved = (outer.line, outer.col)
    _state.tracer = t
    result = None
    try:
        try:
            t.run_body(src.tree.body)
        except _Flow as f:
            if f.kind != "return":
                raise t.fail("invalid-argument", f"`{f.kind}` outside a loop") from None
            ret = _return_value(src.tree, t)
            result = ret
    finally:
        _state.tracer = outer
        outer.line, outer.col = saved
        outer.b.set_span(outer.src.file, outer.line, outer.col)
    return result


def _return_value(tree, t: Tracer):
    # The value of the (last executed) `return expr` is not kept by _Flow; macros return
    # values by assigning to buffers, as in TileLang. Returning a value is supported only as
    # the last statement.
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Return) and last.value is not None:
        return t.eval(last.value)
    return None
