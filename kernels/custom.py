"""Custom-operation programs on the device (spec: custom-operations.txt, ``Program.run``).

``run(program, inputs, shape, device, fmt, mode)`` evaluates a routes.custom program (the
expression language Out, Nat, Idx, Read, Const, Cast, Apply) once per output entry:

- ``device="cpu"``: the CPU evaluator ``program.eval`` under ``numerics.emulated(fmt, mode)``
  (inputs read with the backend's ``asarray``: each value rounded once into the format);
- ``device="cuda"``: a numba CUDA kernel generated from the program's tree, one thread per
  output index, on the GPU or in numba's simulator (kernels.selection.device; neither is
  the one-line KernelError of ``kernels.device()``, an operational failure, not a fallback).
  A request outside the device implementation's limits (``outside``) runs the same CPU
  evaluator, in the same format and mode, and says why in ``Result.diagnostic``;
- any other device: a one-line KernelError naming the accepted devices.

The generated kernel agrees with the evaluator bit for bit, failures included:

- values: each ``Apply`` is one call of the flavour's device primitive (kernels.primitives:
  the evaluator's ``getattr(xp, name)``, correctly rounded into the format); the kernel
  source has no arithmetic operator at all (no FMA contraction, nothing computed in another
  precision), and numba compiles without fastmath (no flush to zero).  Only primitives whose
  device result is bit-identical to the emulated backend run on the device: the exact ones
  (negative, abs, maximum, minimum) and the correctly rounded + - * / sqrt square, in round
  to nearest even (kernels.contract: the transcendental ones are not correctly rounded on
  the device; other modes are not bitwise in the emulated flavour; fma has no device
  primitive whose double rounding is innocuous);
- ``Const``: the literal rounded once on the host by the emulated backend
  (``xp.constant(literal)``, what the evaluator computes), passed to the kernel as a value;
- index expressions: unsigned 64-bit words, arithmetic modulo 2**64, division and remainder
  by zero giving 0 (as the evaluator and Lean's UInt64), done by helper device functions on
  uint64 words only (numba would turn a mix of int64 and uint64 into float64: every word,
  literal and size is a uint64 and comparisons are between uint64s);
- ``Cast``: the evaluator rounds the word once into the format (``xp.constant(int)``).  A
  word of up to 53 bits converts exactly to binary64 and one primitive rounding into the
  format follows.  A longer word is first rounded to 53 bits in integer arithmetic: to
  nearest even in the binary64 flavour (that is the final result); to odd in the binary32
  and emulated flavours (keep the top 53 bits, OR the discarded ones into the last kept
  bit), after which rounding into a format of p <= 51 bits to nearest even is the correct
  rounding of the word (round to odd at p + 2 or more bits is innocuous: Boldo and
  Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding
  to odd", IEEE TC 2008).  That second rounding is the primitive multiply by 2**s (s the
  number of discarded bits): the exact binary64 product M 2**s rounded once into the format;
- reads: each thread evaluates its body in the tree's left-to-right order (the evaluator's:
  an Apply's arguments from left to right, a Read's address before the read) and stops at
  its first failed read, writing (kind, operand slot, address) into a uint64 failure array;
  operand missing is checked before the bounds, as the evaluator does.  The host takes the
  smallest failing output index and raises its failure through the evaluator's own checked
  ``program.read`` (the same exception class and message).  SizeError is raised before any
  launch (the evaluator's message); an empty output launches nothing and reads nothing.

Kernels are compiled once per process per (generated source, flavour, simulator or GPU):
the source depends only on the tree's structure, literals travel as arguments.
"""

from __future__ import annotations

import hashlib
import linecache
import warnings
from typing import NamedTuple

import numpy as np
# numba.cuda at module level: the simulator swaps a kernel's global `cuda` for its fake.
from numba import cuda

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage.routes import custom as C

from . import selection
from .base import Context
from .contract import flavour
from .errors import KernelError
from .primitives import build, rounding_params

DEVICES = ("cpu", "cuda")
# Primitives whose device result is bit-identical to numerics.emulated in nearest_even (the
# exact ones and the correctly rounded ones; kernels.primitives has no fma, and fma's binary64
# result rounded again into a narrow format is not a single rounding).
DEVICE_PRIMITIVES = frozenset({"negative", "abs", "add", "subtract", "multiply", "divide",
                               "sqrt", "maximum", "minimum", "square"})
DEVICE_MODE = "nearest_even"

# Failure kinds written by a thread (0: none).
OPERAND, BOUNDS = 1, 2


class Result(NamedTuple):
    values: np.ndarray           # float64 array of the requested shape
    device: str                  # "cpu", "cuda:<name>" or "simulator"
    diagnostic: str | None       # why a GPU request ran on the CPU evaluator, or None


def run(program, inputs, shape, device: str = "cpu", fmt="binary32",
        mode: str = "nearest_even", limit: int = C.WORD) -> Result:
    """``program`` over ``inputs`` (one array per operand) into an output of ``shape`` on
    ``device`` in ``fmt`` under ``mode`` (module docstring).  ``limit``: the unsigned
    addressing's output-size limit (2**64)."""
    if device not in DEVICES:
        raise KernelError(f"kernels: unknown device {device!r} for a custom program "
                          f"(accepted: {', '.join(DEVICES)})")
    if not isinstance(program, C.Program):
        raise KernelError(f"kernels: run takes a routes.custom.Program "
                          f"(got {type(program).__name__})")
    fmt = formats.get(fmt)
    formats.mode_code(mode)
    shape = tuple(int(s) for s in shape)
    xp = numerics.emulated(fmt, mode)
    xs = [xp.asarray(np.asarray(x)) for x in inputs]
    if device == "cpu":
        return Result(_evaluate(program, xp, xs, shape, limit), "cpu", None)
    dev = selection.device()                      # KernelError: neither GPU nor simulator
    why = outside(program, fmt, mode)
    if why is not None:
        diagnostic = (f"kernels: custom {program.name} ran on the CPU evaluator in "
                      f"{fmt.label} ({mode}): {why}")
        return Result(_evaluate(program, xp, xs, shape, limit), "cpu",
                      " ".join(diagnostic.split()))
    return Result(_launch(program, xp, xs, shape, limit, fmt, mode, dev), dev, None)


def outside(program, fmt, mode) -> str | None:
    """Why ``program`` in ``fmt`` under ``mode`` is outside the device implementation's
    limits (one line), or None when the generated kernel serves it."""
    try:
        flavour(fmt, mode)
    except KernelError as exc:
        return str(exc).removeprefix("kernels: ")
    if mode != DEVICE_MODE:
        return (f"the device primitives agree with the emulated backend bit for bit in "
                f"{DEVICE_MODE} only (got {mode})")
    extra = sorted(primitives(program.body) - DEVICE_PRIMITIVES)
    if extra:
        return (f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not bitwise on the "
                f"device (device primitives: {', '.join(sorted(DEVICE_PRIMITIVES))})")
    return None


def primitives(e) -> frozenset:
    """The primitive names the value expression ``e`` applies."""
    if isinstance(e, C.Apply):
        return frozenset({e.name}).union(*(primitives(a) for a in e.args))
    return frozenset()


# ----- the CPU evaluator -------------------------------------------------------------------------
def _evaluate(program, xp, xs, shape, limit):
    y = program.eval(xp, xs, shape, limit)
    return np.asarray(xp.to_float64(y), dtype=np.float64).reshape(shape)


# ----- the generated kernel ----------------------------------------------------------------------
class Plan(NamedTuple):
    source: str            # Python source of the kernel function ``custom_kernel``
    operands: tuple        # the operand numbers read, in slot order (kernel array x<slot>)
    nats: tuple            # the Nat words (mod 2**64), in the order the source reads them
    consts: tuple          # the Const literals, in the order the source reads them


def plan(program) -> Plan:
    """The generated kernel of ``program`` (module docstring): its source and literals."""
    return _Writer().write(program.body)


def source(program) -> str:
    return plan(program).source


class _Writer:
    """Writes a body as straight-line statements in the evaluator's order: each index or
    value node one assignment to a fresh variable, each read preceded by its checks."""

    def __init__(self):
        self.lines, self.nats, self.consts, self.slots = [], [], [], {}
        self.count = 0

    def fresh(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, line):
        self.lines.append("    " + line)

    def index(self, e) -> str:
        if isinstance(e, C.Out):
            return "o"
        if isinstance(e, C.Nat):
            self.nats.append(e.value % C.WORD)
            name = self.fresh("w")
            self.emit(f"{name} = nats[{len(self.nats) - 1}]")
            return name
        a, b = self.index(e.a), self.index(e.b)
        name = self.fresh("w")
        self.emit(f"{name} = I_{e.op}({a}, {b})")
        return name

    def value(self, e) -> str:
        if isinstance(e, C.Read):
            return self.read(e)
        if isinstance(e, C.Cast):
            word = self.index(e.index)
            name = self.fresh("v")
            self.emit(f"{name} = W_number({word}, rp)")
            return name
        if isinstance(e, C.Const):
            self.consts.append(e.literal)
            name = self.fresh("v")
            self.emit(f"{name} = consts[{len(self.consts) - 1}]")
            return name
        args = [self.value(a) for a in e.args]
        name = self.fresh("v")
        self.emit(f"{name} = P_{e.name}({', '.join(args)}, rp)")
        return name

    def read(self, e) -> str:
        address = self.index(e.address)
        slot = self.slots.setdefault(e.operand, len(self.slots))
        for test, kind in ((f"missing[{slot}] != 0", OPERAND),
                           (f"{address} >= sizes[{slot}]", BOUNDS)):
            self.emit(f"if {test}:")
            self.emit(f"    fail[t, 0] = {kind}")
            self.emit(f"    fail[t, 1] = {slot}")
            self.emit(f"    fail[t, 2] = {address}")
            self.emit("    return")
        name = self.fresh("v")
        self.emit(f"{name} = x{slot}[{address}]")
        return name

    def write(self, body) -> Plan:
        result = self.value(body)
        arrays = "".join(f"x{s}, " for s in range(len(self.slots)))
        head = [f"def custom_kernel(out, fail, {arrays}missing, sizes, nats, consts, rp):",
                "    t = cuda.grid(1)",
                "    if t >= out.size:",
                "        return",
                "    o = np.uint64(t)"]
        text = "\n".join(head + self.lines + [f"    out[t] = {result}"]) + "\n"
        return Plan(text, tuple(self.slots), tuple(self.nats), tuple(self.consts))


def _index_ops(dev, simulated):
    """Unsigned 64-bit word arithmetic modulo 2**64; division and remainder by zero give 0.
    The simulator computes on Python integers (numpy scalars would warn on the wrap)."""
    if simulated:
        def word(n):
            return np.uint64(n % C.WORD)

        def add(a, b):
            return word(int(a) + int(b))

        def sub(a, b):
            return word(int(a) - int(b))

        def mul(a, b):
            return word(int(a) * int(b))

        def div(a, b):
            return word(0 if int(b) == 0 else int(a) // int(b))

        def mod(a, b):
            return word(0 if int(b) == 0 else int(a) % int(b))
        return {"add": dev(add), "sub": dev(sub), "mul": dev(mul), "div": dev(div),
                "mod": dev(mod)}

    # numba: uint64 op uint64 is uint64 (wrapping); the literal zero is made a uint64 too.
    @dev
    def div(a, b):
        if b == np.uint64(0):
            return np.uint64(0)
        return a // b

    @dev
    def mod(a, b):
        if b == np.uint64(0):
            return np.uint64(0)
        return a % b
    return {"add": dev(lambda a, b: a + b), "sub": dev(lambda a, b: a - b),
            "mul": dev(lambda a, b: a * b), "div": div, "mod": mod}


def _word_number(dev, multiply, nearest: bool):
    """The device Cast: a uint64 word rounded once into the format (module docstring).  The
    word is cut to its top 53 bits M (rounded to nearest even when ``nearest``, the binary64
    flavour, else to odd), so w ~ M 2**s with M < 2**53 + 1 exactly a binary64 value; the
    result is the primitive multiply(M, 2**s): the exact product rounded into the format."""
    @dev
    def split(w):
        # s: the number of bits beyond the top 53 of w (0 for a word below 2**53).
        one, zero = np.uint64(1), np.uint64(0)
        s = zero
        top = w >> np.uint64(53)
        while top != zero:
            top = top >> one
            s = s + one
        return s

    if nearest:
        @dev
        def cut(w, s):
            one, zero = np.uint64(1), np.uint64(0)
            kept = w >> s
            if s != zero:
                rest = w & ((one << s) - one)
                half = one << (s - one)
                if rest > half or (rest == half and (kept & one) != zero):
                    kept = kept + one                 # at most 2**53: still exact
            return kept
    else:
        @dev
        def cut(w, s):
            one, zero = np.uint64(1), np.uint64(0)
            kept = w >> s
            if s != zero and (w & ((one << s) - one)) != zero:
                kept = kept | one                     # sticky bit: round to odd
            return kept

    @dev
    def number(w, rp):
        s = split(w)
        # Both conversions are exact (at most 2**53 and a power of two below 2**12).
        return multiply(np.float64(cut(w, s)), np.float64(np.uint64(1) << s), rp)
    return number


def _compile(p: Plan, P: dict, flav: str, simulated: bool):
    """The ``cuda.jit`` kernel of plan ``p`` for the primitive table ``P``."""
    dev = cuda.jit(device=True)
    names = {"cuda": cuda, "np": np,
             "W_number": _word_number(dev, P["multiply"], flav == "binary64")}
    names.update({f"P_{n}": P[n] for n in DEVICE_PRIMITIVES})
    names.update({f"I_{n}": f for n, f in _index_ops(dev, simulated).items()})
    # A named file in linecache: tracebacks and numba's diagnostics can show the source.
    filename = f"<kernels.custom {hashlib.sha1(p.source.encode()).hexdigest()[:12]}>"
    linecache.cache[filename] = (len(p.source), None, p.source.splitlines(True), filename)
    exec(compile(p.source, filename, "exec"), names)
    return cuda.jit(names["custom_kernel"])


def _size(shape) -> int:
    return int(np.prod(shape, dtype=object)) if len(shape) else 1


def _launch(program, xp, xs, shape, limit, fmt, mode, dev):
    size = _size(shape)
    if size > limit:                           # the evaluator's refusal, before any launch
        raise C.SizeError(f"custom {program.name}: output size {size} exceeds the unsigned "
                          f"addressing limit {limit}")
    if size == 0:
        return np.zeros(shape)
    flats = [np.ascontiguousarray(xp.to_float64(x), dtype=np.float64).reshape(-1)
             for x in xs]
    p = plan(program)
    sim = dev == selection.SIMULATOR
    flav = flavour(fmt, mode)
    P = build(flav, sim)
    ctx = Context(fmt, mode, flav, sim, P, rounding_params(fmt, mode))
    kernel = ctx.compile(("custom", p.source), lambda: _compile(p, P, flav, sim))
    present = [k < len(flats) for k in p.operands]
    # An absent or empty operand gets a one-element stand-in: its checks fail before a load.
    arrays = [flats[k] if ok and flats[k].size else np.zeros(1)
              for k, ok in zip(p.operands, present)]
    missing = np.array([0 if ok else 1 for ok in present] or [0], dtype=np.int64)
    sizes = np.array([flats[k].size if ok else 0 for k, ok in zip(p.operands, present)]
                     or [0], dtype=np.uint64)
    nats = np.array(p.nats or (0,), dtype=np.uint64)
    consts = np.array([xp.to_float64(xp.constant(c))[()] for c in p.consts] or [0.0],
                      dtype=np.float64)
    out = np.empty(size)
    fail = np.zeros((size, 3), dtype=np.uint64)
    with warnings.catch_warnings():
        # The simulator evaluates on numpy scalars: inf and NaN results warn there.
        warnings.simplefilter("ignore", RuntimeWarning)
        ctx.launch(kernel, size, out, fail, *arrays, missing, sizes, nats, consts, ctx.rp)
    failed = np.flatnonzero(fail[:, 0])
    if failed.size:
        _, slot, address = (int(v) for v in fail[failed[0]])
        program.read(flats, p.operands[slot], address)     # raises the evaluator's error
        raise KernelError(f"kernels: custom {program.name}: the device reported a failed "
                          f"read the evaluator accepts (operand {p.operands[slot]}, "
                          f"address {address})")
    return np.where(np.isnan(out), np.nan, out).reshape(shape)
