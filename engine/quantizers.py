"""Measuring a quantizer this project did not write against a scaled format's definition:
``roundoff-coverage measure --scheme SCHEME TARGET`` (``measure_quantizer``).

The target takes one float32 (or float64) array and returns either a tuple ``(elements,
scales)`` -- ``(elements, scales, tensor_scale)`` for a two-level scheme such as NVFP4; a
list of 2 or 3 arrays reads alike -- or the dequantized values (any other result is read
as one array; ``returns`` says which when "auto" would guess wrong).  It is a Python callable, or ``module:function`` /
``path/file.py:function``, resolved as measure resolves its targets (engine/targets.py,
``importable``).  A named target runs in a worker process of its own, each call with a
deadline (``timeout``), so one that hangs or crashes ends the measurement with one line; a
callable given directly runs in this process.  It gets a copy of each input.

What it returns is read as: elements and scales as values (any float dtype, ml_dtypes
included), or as the formats' codes in unsigned integers (E8M0 code c is 2**(c - 127),
0xFF NaN); MXINT8 elements may be the signed integers k of the values k / 64; elements and
values of the input's shape or size (a C-order reshape), scales of the definition's shape
or size, or one per element (equal within each block); torch tensors on any device too.

The inputs (``CASES``, rebuilt by ``cases``): blocks along ``axis`` of a tensor of
``shape`` whose last block along each block axis is partial (default), random --
``normal`` (N(0, 1) * 2**s per block) and ``log-uniform`` magnitudes, ``samples`` tensors
each -- and one adversarial tensor of each kind: ``huge-value`` (one value 2**2 ..
2**(emax_elem - qmin + 8) times the rest per block), ``zero-blocks`` (+0 and -0 blocks),
``inf-nan``, ``element-max`` (values at +-element_max * 2**s and up to the top of its
binade: the floor rule's saturation), ``ties`` (exact midpoints of the element format times
the definition's scale of their block, which an anchor fixes, subnormal range included),
``element-subnormal`` (values landing in the element format's subnormal range),
``input-subnormal`` (subnormals of the input's dtype) and ``partial-block``.

Compared with ``formats.quantize`` (the exact definition), block by block:

- scales (and the tensor scale): equal as values, NaN equal to NaN;
- elements, in blocks whose defined scale is not NaN (an Inf/NaN block's elements are
  unspecified): equal as values, so -0 equals +0 (signs of zero are counted apart);
  ``elements_differ_same_scale`` counts those in blocks whose scales agree -- a wrong
  element rounding, not a consequence of a wrong scale;
- dequantized values, element * scale (* tensor scale), NaN equal to NaN.  A difference is
  measured in ulps of the element format at the block's scale, |got - want| / (ulp(e) * D)
  with e the defined element, D = scale (* tensor scale) and ulp(e) = 2**(max(floor(log2
  |e|), emin) - p + 1) on the element grid (2**-6 for MXINT8), and absolutely; a value that
  is not finite where the definition's is (or the reverse: a NaN flood) differs by inf.

A target that raises, returns something unreadable or of the wrong shape, hangs past its
deadline or kills its process is a MeasureError with one line naming the case; the
command line prints it and exits 2.  One that returns NaN everywhere is measured: every
value the definition has finite differs, by inf ulp (``nonfinite_differ``).  Stochastic
schemes are refused (no other quantizer draws the same bits).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.formats import IntElement, ScaledFormat

from . import executors, results
from .plan import Outcome
from .quantizer_inputs import CASES, DTYPES, RANDOM, Case, Layout, setup, cases
from .rows import empty as empty_row
from .targets import MeasureError, importable

__all__ = ["CASES", "RETURNS", "DTYPES", "TIMEOUT", "Case", "QuantizerMeasurement",
           "cases", "measure_quantizer", "MeasureError"]

RETURNS = ("auto", "pair", "dequantized")
TIMEOUT = 120.0                            # s per call of a named target
FIRST = 5                                  # differing blocks kept as reproducers
BLOCK_SHOWN = 128                          # a block's values are listed up to this size
REFERENCE_TEXT = ("formats.quantize: the scheme's exact definition (formats/scaled.py, "
                  "formats/quantizer.py)")


# ----- calling the target ---------------------------------------------------------------------

def _numpy(v):
    """``v`` as a numpy array: torch tensors from any device (float8 and bfloat16 widened
    to float32, exactly), CuPy arrays, anything np.asarray reads."""
    if hasattr(v, "detach") and hasattr(v, "cpu"):
        v = v.detach().cpu()
        try:
            return v.numpy()
        except (TypeError, RuntimeError):
            return v.float().numpy()
    if hasattr(v, "__cuda_array_interface__") and hasattr(v, "get"):
        v = v.get()
    return np.asarray(v)


def _plain(got):
    """A result as numpy data that can cross processes: a tuple of arrays (a tuple result,
    or a list of 2 or 3 items) or one array."""
    if isinstance(got, tuple) or (isinstance(got, list) and len(got) in (2, 3)):
        return tuple(_numpy(v) for v in got)
    return _numpy(got)


def _attempt(fn, x) -> tuple:
    """``fn(x)`` as ("ok", its result as ``_plain`` data), ("raised", message) or ("bad",
    message): wherever it runs, the target's failures become data."""
    try:
        got = fn(x)
    except Exception as exc:                                  # noqa: BLE001 (user code)
        return "raised", f"raised {executors.one_line(exc)}"
    try:
        return "ok", _plain(got)
    except Exception as exc:                                  # noqa: BLE001 (user data)
        return "bad", f"returned {type(got).__name__}, not arrays ({executors.one_line(exc)})"


def _answer(label, status, payload, where):
    if status == "ok":
        return payload
    raise MeasureError(f"the target {label} {payload} ({where})")


class _InProcess:
    """A callable called in this process (on a copy: a target may write its input)."""

    def __init__(self, fn, label):
        self.fn, self.label = fn, label

    def __call__(self, x, where):
        return _answer(self.label, *_attempt(self.fn, x.copy()), where)

    def close(self):
        pass


def _serve(spec, conn):
    """The worker process of a named target: answer each input array with ``_attempt``'s
    pair until the pipe closes."""
    try:
        fn, problem = importable(spec), None
    except MeasureError as exc:                   # the parent imported it: rare
        fn, problem = None, f"in its worker process: {exc}"
    while True:
        try:
            x = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(("bad", problem) if fn is None else _attempt(fn, x))


class _Worker:
    """A named target in a worker process of its own (forkserver, as the executors' pools),
    each call with a deadline: one that hangs is killed, one that dies is named."""

    def __init__(self, spec, label, timeout):
        self.label, self.timeout = label, timeout
        ctx = executors.pool_context(preload=__name__)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(spec, child), daemon=True)
        self.proc.start()
        child.close()

    def __call__(self, x, where):
        try:
            self.conn.send(x)
            ready = self.conn.poll(self.timeout)
        except (OSError, EOFError):
            ready = True                          # the process is gone: recv says how
        if not ready:
            self.close()
            raise MeasureError(f"the target {self.label} did not return within "
                               f"{self.timeout:g} s ({where}): killed; give a longer "
                               f"--timeout if it is only slow")
        try:
            status, payload = self.conn.recv()
        except (EOFError, OSError):
            raise MeasureError(f"the target {self.label} {self._death()} ({where})") from None
        return _answer(self.label, status, payload, where)

    def _death(self) -> str:
        self.proc.join(5)
        code = self.proc.exitcode
        if code is not None and code < 0:
            import signal
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                pass
        return f"ended its process (exit status {code})"

    def close(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()


def _caller(target, timeout, isolate):
    """(label, caller) of a target: a callable, or a module:function / file.py:function
    spec (in a worker process unless ``isolate`` is False)."""
    if callable(target) and not isinstance(target, str):
        label = f"python:{getattr(target, '__name__', 'callable')}"
        return label, _InProcess(target, label)
    if not isinstance(target, str) or not target.strip() or "\0" in target:
        raise MeasureError("a quantizer target is module:function, file.py:function or a "
                           "Python callable")
    spec = target.strip()
    if ":" not in spec or importable(spec) is None:
        raise MeasureError(f"{spec}: a quantizer target is a Python function: give "
                           f"module:function or file.py:function")
    if isolate is False:
        return spec, _InProcess(importable(spec), spec)
    if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
            and 0 < timeout <= 86400):
        raise MeasureError(f"--timeout must be a number of seconds in (0, 86400] "
                           f"(got {timeout!r})")
    return spec, _Worker(spec, spec, float(timeout))


# ----- reading what the target returned -------------------------------------------------------

@dataclass
class _Got:
    """A target's result in block-major form: ``kind`` "pair" (elements (nb, kb), scales
    (nb,), tensor_scale or None) or "dequantized" (values (nb, kb))."""

    kind: str
    elements: np.ndarray | None = None
    scales: np.ndarray | None = None
    tensor_scale: float | None = None
    values: np.ndarray | None = None


def _read(payload, x, layout: Layout, fmt: ScaledFormat, returns, label, where) -> _Got:
    """The target's result ``payload`` (``_plain``'s form) checked and laid out as blocks;
    MeasureError naming what is wrong."""
    def bad(text):
        return MeasureError(f"the target {label} {text} ({where})")

    items = payload if isinstance(payload, tuple) else None
    kind = returns if returns != "auto" else ("pair" if items is not None else "dequantized")
    if kind == "dequantized":
        if items is not None:
            raise bad(f"returned a tuple of {len(items)}, not the dequantized values (one "
                      f"array)")
        values = _shaped(_floats(payload, "values", None, bad), x.shape, "values", bad)
        return _Got("dequantized", values=layout.blocks(values))
    if items is None or len(items) not in (2, 3):
        what = "one array" if items is None else f"a tuple of {len(items)}"
        raise bad(f"returned {what}, not (elements, scales) or (elements, scales, "
                  f"tensor_scale)")
    if len(items) == 3 and fmt.tensor_scale is None:
        raise bad(f"returned a tensor scale, but {fmt.label} has none: return (elements, "
                  f"scales)")
    if len(items) == 2 and fmt.tensor_scale is not None:
        raise bad(f"returned no tensor scale, but {fmt.label} has one: return (elements, "
                  f"scales, tensor_scale) or the dequantized values")
    elements = _shaped(_floats(items[0], "elements", fmt.element, bad), x.shape, "elements",
                       bad)
    scale_codes = formats.E8M0 if fmt.is_e8m0 else fmt.scale
    scales = _scales(_floats(items[1], "scales", scale_codes, bad), layout, x, bad)
    t = None
    if len(items) == 3:
        tv = _floats(items[2], "tensor_scale", fmt.tensor_scale, bad).reshape(-1)
        if tv.size != 1:
            raise bad(f"returned a tensor scale of {tv.size} values, not one")
        t = float(tv[0])
    return _Got("pair", elements=layout.blocks(elements), scales=scales, tensor_scale=t)


def _floats(a, what, codes, bad) -> np.ndarray:
    """``a`` as float64 values: floats as they are (ml_dtypes' too); unsigned integers as
    codes of the format ``codes``; signed integers k as MXINT8's k * 2**-frac_bits."""
    a = np.asarray(a)
    k = a.dtype.kind
    try:
        if k == "u" and codes is not None:
            return _decode(a, codes, what, bad)
        if k == "i" and isinstance(codes, IntElement):
            return a.astype(np.float64) * 2.0 ** -codes.frac_bits
        if k in "fVO":
            return a.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise bad(f"returned {what} that are not numbers ({executors.one_line(exc)})") \
            from None
    raise bad(f"returned {what} of dtype {a.dtype}: give float values, or the format's codes "
              f"as unsigned integers")


def _decode(a, codes, what, bad) -> np.ndarray:
    bits = 8 if codes == formats.E8M0 else codes.bits
    c = a.astype(np.uint64)
    if c.size and int(c.max()) >> bits:
        raise bad(f"returned {what} codes of more than {bits} bits")
    if codes == formats.E8M0:
        return np.where(c == 0xFF, np.nan, np.ldexp(1.0, c.astype(np.int64) - 127))
    if isinstance(codes, IntElement):
        k = c.astype(np.int64)
        k = np.where(k >> (codes.bits - 1), k - (1 << codes.bits), k)
        return k * 2.0 ** -codes.frac_bits
    return np.asarray(formats.decode(c, codes), dtype=np.float64)


def _shaped(a, shape, what, bad) -> np.ndarray:
    if a.shape == tuple(shape):
        return a
    if a.size == math.prod(shape):
        return a.reshape(shape)
    raise bad(f"returned {what} of shape {a.shape} for an input of shape {tuple(shape)}")


def _scales(s, layout: Layout, x, bad) -> np.ndarray:
    """Scales as (nb,): of the definition's shape or size, or one per element."""
    gs = layout.grid_shape()
    if s.size == math.prod(gs):
        return layout.grid(s.reshape(gs))
    if s.size == x.size:
        b = layout.blocks(s.reshape(x.shape), fill=np.nan)
        # Slot 0 is a tile's corner: always inside the tensor.
        if not np.all(_same(b, b[:, :1]) | ~layout.valid):
            raise bad("returned one scale per element, unequal within a block")
        return b[:, 0]
    raise bad(f"returned scales of shape {s.shape}; the scheme has one per block, "
              f"{tuple(gs)}")


def _same(a, b):
    """Equal values, NaN equal to NaN (+0 equal to -0)."""
    return (a == b) | (np.isnan(a) & np.isnan(b))


# ----- comparing ------------------------------------------------------------------------------

def _ulp(e, grid) -> np.ndarray:
    """The quantum of the element grid at element values ``e``: 2**(max(floor(log2|e|),
    emin) - p + 1)."""
    exp = np.frexp(np.abs(e))[1] - 1                  # floor(log2|e|); 0 gives -1
    return np.ldexp(1.0, np.maximum(exp, grid.emin) - grid.precision + 1)


_COUNTS = ("tensors", "elements", "scales", "scales_differ", "elements_differ",
           "elements_differ_same_scale", "zero_signs_differ", "values_differ",
           "nonfinite_differ")


class _Tally:
    """Counts by case, the first differing blocks and the worst difference."""

    def __init__(self, fmt: ScaledFormat):
        self.fmt = fmt
        self.kind = None
        self.by_case = {}
        self.first = []
        self.worst, self.worst_ulp = None, 0.0
        self.tensor_scales_differ = 0

    def add(self, case: Case, layout: Layout, ref, got: _Got, where):
        if self.kind is not None and got.kind != self.kind:
            raise MeasureError(f"the target returned {self.kind} values for some inputs and "
                               f"{got.kind} ones for others ({where}): give --returns")
        self.kind = got.kind
        d = _Diff(self.fmt, layout, case, ref, got)
        c = self.by_case.setdefault(case.name, dict.fromkeys(_COUNTS, 0)
                                    | {"max_ulp": 0.0, "max_abs": 0.0})
        for k, v in d.counts().items():
            c[k] += v
        c["max_ulp"] = max(c["max_ulp"], d.max_ulp)
        c["max_abs"] = max(c["max_abs"], d.max_abs)
        self.tensor_scales_differ += d.tdiff
        for b in d.differing_blocks()[:FIRST - len(self.first)]:
            self.first.append(d.record(b, None))
        if d.max_ulp > self.worst_ulp:
            b, j = np.unravel_index(int(np.argmax(d.ulp)), d.ulp.shape)
            self.worst, self.worst_ulp = d.record(int(b), int(j)), d.max_ulp
            # The names measure's reproducers use, for the report's worst-case table.
            self.worst |= {"computed": self.worst["got"]["value"],
                           "exact": self.worst["want"]["value"]}

    def total(self, key):
        return sum(c[key] for c in self.by_case.values())


class _Diff:
    """One tensor's comparison, block-major (module doc)."""

    def __init__(self, fmt, layout: Layout, case: Case, ref, got: _Got):
        self.layout, self.case, self.got = layout, case, got
        valid = self.valid = layout.valid
        self.x = layout.blocks(case.x.astype(np.float64))
        deq = ref.dequantize()
        if deq.dtype == object:                   # products beyond binary64: rounded once
            deq = deq.astype(np.float64)
        self.re, self.rd = layout.blocks(ref.elements), layout.blocks(deq)
        self.rs = layout.grid(ref.scales)
        rt = 1.0 if ref.tensor_scale is None else ref.tensor_scale
        self.want_t = ref.tensor_scale
        nb = layout.nb
        with np.errstate(all="ignore"):
            if got.kind == "pair":
                gt = 1.0 if got.tensor_scale is None else got.tensor_scale
                self.gd = got.elements * got.scales[:, None] * gt
                self.sdiff = ~_same(got.scales, self.rs)
                self.tdiff = int(got.tensor_scale is not None
                                 and not bool(_same(np.float64(got.tensor_scale), rt)))
                live = valid & ~np.isnan(self.rs)[:, None]
                self.ediff = live & ~_same(got.elements, self.re)
                self.zsign = live & (got.elements == 0) & (self.re == 0) & \
                    (np.signbit(got.elements) != np.signbit(self.re))
            else:
                self.gd = got.values
                self.sdiff, self.tdiff = np.zeros(nb, dtype=bool), 0
                self.ediff = self.zsign = np.zeros_like(valid)
            self.vdiff = valid & ~_same(self.gd, self.rd)
            self.fin = np.isfinite(self.gd) & np.isfinite(self.rd)
            self.abs = np.where(self.vdiff, np.where(self.fin, np.abs(self.gd - self.rd),
                                                     np.inf), 0.0)
            d = (self.rs * rt)[:, None]
            self.ulp = np.where(self.vdiff, np.where(
                self.fin, self.abs / (_ulp(self.re, fmt.element_grid) * d), np.inf), 0.0)
        self.max_ulp = float(self.ulp.max()) if self.ulp.size else 0.0
        self.max_abs = float(self.abs.max()) if self.abs.size else 0.0

    def counts(self) -> dict:
        pair = self.got.kind == "pair"
        return {"tensors": 1, "elements": int(self.valid.sum()),
                "scales": self.layout.nb + (self.want_t is not None),
                "scales_differ": int(self.sdiff.sum()) + self.tdiff if pair else 0,
                "elements_differ": int(self.ediff.sum()),
                "elements_differ_same_scale": int((self.ediff & ~self.sdiff[:, None]).sum()),
                "zero_signs_differ": int(self.zsign.sum()),
                "values_differ": int(self.vdiff.sum()),
                "nonfinite_differ": int((self.vdiff & ~self.fin).sum())}

    def differing_blocks(self) -> list:
        return np.flatnonzero(self.sdiff | self.ediff.any(axis=1)
                              | self.vdiff.any(axis=1)).tolist()

    def record(self, b: int, j: int | None) -> dict:
        """The reproducer of block ``b``: its place, what differs, the first differing
        element (or element ``j``) with its input, wanted and got values, and the block's
        inputs and values when it has at most BLOCK_SHOWN elements."""
        v = self.valid[b]
        if j is None:                  # the first differing value, else element, else 0
            j = next((int(np.argmax(f)) for f in (self.vdiff[b], self.ediff[b]) if f.any()), 0)
        pair = self.got.kind == "pair"
        differs = [k for k, flag in (("scale", bool(self.sdiff[b])),
                                     ("elements", bool(self.ediff[b].any())),
                                     ("values", bool(self.vdiff[b].any()))) if flag]
        want = {"scale": self.rs[b], "element": self.re[b, j], "value": self.rd[b, j]}
        got = {"value": self.gd[b, j]}
        if pair:
            got |= {"scale": self.got.scales[b], "element": self.got.elements[b, j]}
        if self.want_t is not None:
            want["tensor_scale"] = self.want_t
            if pair:
                got["tensor_scale"] = self.got.tensor_scale
        rec = {"case": self.case.name, "tensor": self.case.index,
               "block": self.layout.block_index(b), "differs": differs,
               "index": self.layout.element_index(b, j), "x": self.x[b, j],
               "ulp": self.ulp[b, j], "abs": self.abs[b, j], "want": want, "got": got}
        if int(v.sum()) <= BLOCK_SHOWN:
            rec["block_x"] = self.x[b][v]
            want["elements"] = self.re[b][v]
            if pair:
                got["elements"] = self.got.elements[b][v]
            else:
                got["values"] = self.gd[b][v]
        else:
            with np.errstate(all="ignore"):
                rec["block_amax"] = float(np.max(np.abs(self.x[b][v])))
        return results.clean(rec)


# ----- the measurement ------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantizerMeasurement:
    """What a quantizer measurement covers (the results file's selection)."""

    target: str
    scheme: str
    dtype: str
    shape: tuple
    axis: object
    returns: str
    samples: int
    seed: int
    elements: int
    tensors: int
    reference_text: str = REFERENCE_TEXT

    def command(self) -> str:
        axis = ",".join(map(str, self.axis)) if isinstance(self.axis, tuple) else self.axis
        fmt = {"float32": "binary32", "float64": "binary64"}[self.dtype]
        return (f"roundoff-coverage measure {self.target} --scheme {self.scheme} --format "
                f"{fmt} --shape {','.join(map(str, self.shape))} --axis {axis} --returns "
                f"{self.returns} --samples {self.samples} --seed {self.seed}")

    def describe(self) -> dict:
        return {"target": self.target, "scheme": self.scheme, "formats": [self.scheme],
                "dtype": self.dtype, "shape": list(self.shape), "returns": self.returns,
                "cases": list(CASES), "tensors": self.tensors, "samples": self.elements,
                "exhaustive": False}


def measure_quantizer(target, scheme, *, shape=None, samples: int = 4, seed: int = 0,
                      axis=-1, dtype: str = "float32", returns: str = "auto", history=None,
                      timeout: float = TIMEOUT, isolate: bool | None = None,
                      out=None) -> Outcome:
    """Measure the quantizer ``target`` (a callable, or a module:function / file.py:function
    spec) against ``scheme`` (a ScaledFormat or a name formats.get reads) on ``cases`` (the
    module doc): the results row (engine/rows.py) with the counts of scales, elements and
    dequantized values that differ, the worst difference in ulps of the element format at
    the block's scale (``max_ulp``) and in absolute terms, counts by case and the first
    differing blocks (``quantizer``), and the worst one (``worst``).  ``dtype``: the input
    arrays', float32 or float64; ``returns``: auto, pair or dequantized; ``history``: a
    delayed scheme's amax history; ``timeout``: seconds per call of a named target, which
    runs in a worker process unless ``isolate`` is False.  With ``out``, the results file is
    written.  MeasureError (one line) for a bad request or a bad target."""
    if returns not in RETURNS:
        raise MeasureError(f"--returns must be one of {', '.join(RETURNS)} (got {returns!r})")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise MeasureError(f"--seed must be a non-negative integer (got {seed!r})")
    fmt, shape, dt, layout = setup(scheme, shape, samples, axis, dtype, history)
    inputs = cases(fmt, shape=shape, samples=samples, seed=seed, axis=axis, dtype=dtype,
                   history=history)
    label, call = _caller(target, timeout, isolate)
    t0 = time.perf_counter()
    tally = _Tally(fmt)
    try:
        for case in inputs:
            where = f"case {case.name}" + (f", tensor {case.index}" if case.name in RANDOM
                                           else "")
            lay = layout if case.x.shape == shape else \
                Layout.of(case.x.shape, fmt, layout.axes)
            ref = formats.quantize(case.x, fmt, axis, history=history)
            got = _read(call(case.x, where), case.x, lay, fmt, returns, label, where)
            tally.add(case, lay, ref, got, where)
    finally:
        call.close()
    m = QuantizerMeasurement(label, fmt.label, dtype, shape,
                             axis if isinstance(axis, tuple) else int(axis), returns,
                             int(samples), int(seed), tally.total("elements"), len(inputs))
    outcome = Outcome(rows=[row(m, tally, layout)], total=1, ran=1,
                      wall=time.perf_counter() - t0, out=str(out or ""))
    if out is not None:
        results.write(out, results.document(outcome.rows, m))
    return outcome


def row(m: QuantizerMeasurement, tally: _Tally, layout: Layout) -> dict:
    """The results row of a measurement."""
    pair = tally.kind == "pair"
    cases_out = {name: dict(c) for name, c in tally.by_case.items()}
    max_ulp = max((c["max_ulp"] for c in cases_out.values()), default=0.0)
    detail = {
        "returns": tally.kind, "dtype": m.dtype, "shape": list(m.shape),
        "ulp": "ulp(e) * scale (* tensor scale): ulp(e) = 2**(max(floor(log2|e|), emin) - "
               "p + 1) of the element grid at the defined element e",
        "max_abs": max((c["max_abs"] for c in cases_out.values()), default=0.0),
        "elements_differ_same_scale": tally.total("elements_differ_same_scale") if pair
        else None,
        "zero_signs_differ": tally.total("zero_signs_differ") if pair else None,
        "tensor_scales_differ": tally.tensor_scales_differ if pair else None,
        "nonfinite_differ": tally.total("nonfinite_differ"),
        "cases": cases_out, "first": tally.first}
    return empty_row(
        op=m.target, instance="quantizer",
        attrs={"scheme": m.scheme, "dtype": m.dtype, "returns": tally.kind,
               "axis": None if layout.axes is None else list(layout.axes)},
        route="forward", port="out", format=m.scheme, mode="nearest_even", policy="-",
        implementation=m.target, status="ok", samples=m.elements, max_ulp=max_ulp,
        elements_differ=tally.total("elements_differ") if pair else None,
        scales_differ=tally.total("scales_differ") if pair else None,
        values_differ=tally.total("values_differ"), worst=tally.worst,
        quantizer=results.clean(detail))
