"""Measuring functions this project did not write: ``roundoff-coverage measure TARGET``.

A target (engine/targets.py) is a numpy ufunc (``numpy.exp``), a C function in a shared
library (``libm:expf``, ``/path/libfoo.so:f``), an importable callable
(``package.module:function``, numba-compiled or plain Python), or a torch operator
(``torch.exp``) when torch is installed.  Its inputs are values of the format -- every bit
pattern with ``exhaustive`` (formats of at most 16 bits, unary or binary, and unary
binary32: 2**32 inputs), else ``samples`` random bit patterns (uniform over patterns: every
binade equally, NaN and infinities included) -- and its outputs are compared with the
correctly rounded exact value of the reference function.

The reference is tiered (numerics.screen): a compiled binary64 screen decides almost every
input; the inputs it cannot decide (within its margin of a rounding boundary, exact zeros
and infinities) and the candidates for the largest error are recomputed exactly
(numerics.resolve: mpmath with certified enclosures, precision doubled until settled).  So
the maximum error, its input and the count of results that are not correctly rounded are
exact; the histogram, the mean and the p99 (read off a histogram with steps of 1/1024 ulp
below 4 ulps) carry the screen's uncertainty, at most 2**(p-40) ulp per input.

The work is cut into chunks of CHUNK inputs, run in worker processes or on a Dask cluster
(engine/executors.py), checkpointed as they finish (``<out>.partial.jsonl``, resumable
across executors; engine/orchestrate.py, the orchestration ``run`` uses too) and merged as
they arrive into a Tally (engine/tally.py), whose result does not depend on the order, so
the results file is the same whatever ``jobs``, the executor or the finishing order, and
memory does not grow with the number of chunks.  A chunk that fails on the cluster (twice)
leaves the row with status ``error``, naming the chunk; a worker that dies ends the
measurement (executors.WorkerDied).  The row has the coverage run's schema (route
``forward``, port ``out``, implementation = the target) plus ``incorrectly_rounded``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import zlib
from dataclasses import dataclass

import numba
import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics import metrics, screen
from roundoff_coverage.numerics.metrics import clamp_exact

from . import budget, executors, orchestrate, results, rows
from .orchestrate import Checkpoint, Progress, checkpoint_path
from .plan import Outcome
from .rows import empty as empty_row
from .tally import Tally, compact
# The targets (engine/targets.py), under the names measure's callers know.
from .targets import ALIASES, MeasureError, Target, reference_name, target

__all__ = ["CHUNK", "EXHAUSTIVE_MAX", "WORST_CANDIDATES", "ALIASES", "MeasureError", "Target",
           "reference_name", "target", "Measurement", "inputs", "run_chunk",
           "settle", "measure", "row", "text"]

CHUNK = 1 << 22
EXHAUSTIVE_MAX = 1 << 32
WORST_CANDIDATES = 64                   # exact recomputations per chunk for the maximum


# ----- inputs ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measurement:
    """What a measure run covers (the results file's selection)."""

    target: str
    format: str
    reference: str
    arity: int
    samples: int | None = None            # None: exhaustive
    seed: int = 0
    reference_text: str = ("numerics.screen (binary64, rel. error <= 2**-40 for libm "
                           "functions) deciding each input, numerics.resolve (certified "
                           "mpmath) for the undecided ones and the largest errors")

    @property
    def exhaustive(self) -> bool:
        return self.samples is None

    @property
    def total(self) -> int:
        bits = formats.get(self.format).bits
        return (1 << (bits * self.arity)) if self.exhaustive else self.samples

    def chunks(self) -> int:
        return -(-self.total // CHUNK)

    def command(self) -> str:
        how = "--exhaustive" if self.exhaustive else f"--samples {self.samples}"
        return (f"roundoff-coverage measure {self.target} --format {self.format} "
                f"--reference {self.reference} {how} --seed {self.seed}")

    def describe(self) -> dict:
        return {"target": self.target, "formats": [self.format], "reference": self.reference,
                "samples": self.total, "exhaustive": self.exhaustive}

    def fingerprint(self) -> str:
        text = json.dumps([self.target, self.format, self.reference, self.arity, self.samples,
                           self.seed, CHUNK, results.SCHEMA])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def inputs(m: Measurement, j: int) -> list:
    """The float64 inputs of chunk ``j``: bit patterns lo..hi of the exhaustive enumeration
    (argument k's pattern is digit k, base 2**bits, of the index: the last argument varies
    fastest), or random patterns."""
    fmt = formats.get(m.format)
    lo, hi = j * CHUNK, min((j + 1) * CHUNK, m.total)
    out = [_buffer(f"x{k}", hi - lo) for k in range(m.arity)]
    if m.exhaustive:
        for k in range(m.arity):
            shift = fmt.bits * (m.arity - 1 - k)
            if fmt.bits == 32:
                _f32_enumerate(lo, shift, out[k])
            else:
                _gather_enumerate(_table(fmt), lo, shift, fmt.bits, out[k])
        return out
    rng = np.random.default_rng([m.seed, zlib.crc32(repr((m.target, m.format, j)).encode())])
    for k in range(m.arity):
        pats = rng.integers(0, 1 << fmt.bits, hi - lo, dtype=np.uint64)
        if fmt.bits == 32:
            _f32_decode(pats.astype(np.uint32).view(np.float32), out[k])
        elif fmt.bits <= 16:
            out[k][:] = _table(fmt)[pats.astype(np.int64)]
        elif fmt == formats.CATALOG["binary64"]:
            out[k][:] = pats.view(np.float64)
        else:
            out[k][:] = formats.decode(pats, fmt)
    return out


_TABLES = {}
_SCRATCH = {}             # arrays reused by every chunk of this process (see screen.screen)


def _buffer(name, n):
    if _SCRATCH.get(name, np.empty(0)).size < n:
        _SCRATCH[name] = np.empty(max(n, CHUNK))
    return _SCRATCH[name][:n]


def _table(fmt):
    """Every bit pattern of a format of at most 16 bits, decoded (NaN patterns as NaN)."""
    if fmt not in _TABLES:
        _TABLES[fmt] = formats.decode(np.arange(1 << fmt.bits, dtype=np.uint64), fmt)
    return _TABLES[fmt]


def _f32_enumerate(lo, shift, out):
    if shift:
        pats = (np.arange(lo, lo + out.size, dtype=np.uint64) >> np.uint64(shift)) \
            .astype(np.uint32)
    else:                                  # lo + 0, 1, 2...: a reused ramp, shifted in place
        if _SCRATCH.get("ramp", np.empty(0)).size < out.size:
            _SCRATCH["ramp"] = np.arange(max(out.size, CHUNK), dtype=np.uint32)
            _SCRATCH["pats"] = np.empty(max(out.size, CHUNK), dtype=np.uint32)
        pats = np.add(_SCRATCH["ramp"][:out.size], np.uint32(lo & 0xFFFFFFFF),
                      out=_SCRATCH["pats"][:out.size])
    _f32_decode(pats.view(np.float32), out)


@numba.njit(nogil=True)
def _f32_decode(f32, out):
    for i in range(out.size):
        out[i] = f32[i]


@numba.njit(nogil=True)
def _gather_enumerate(table, lo, shift, bits, out):
    mask = (1 << bits) - 1
    for i in range(out.size):
        out[i] = table[((lo + i) >> shift) & mask]


# ----- one chunk -------------------------------------------------------------------------------

def run_chunk(m: Measurement, t: Target, j: int) -> dict:
    """The JSON-ready summary of chunk ``j``: statistics, the exact worst case among the
    inputs resolved exactly, and the candidates for the largest error (``cands``: inputs,
    output and the upper bound of |error|) with ``lower``, the largest lower bound of an
    |error| in the chunk.  The maximum over all chunks is settled by ``settle``."""
    fmt = formats.get(m.format)
    xs = inputs(m, j)
    out = _outputs(t, xs, j)
    summ = {"n": int(out.size), "counts": [0] * len(metrics.CLASSES),
            "hist": [0] * len(metrics.HIST_EDGES), "fine": [0] * (screen.FINE_BINS + 1),
            "measured": 0, "nan": 0, "sum_abs": 0.0, "min": math.inf, "max": -math.inf,
            "max_rel": 0.0, "not_cr": 0, "lower": -math.inf, "cands": [], "dropped": None,
            "worst": None}
    if screen.screenable(fmt):
        s = screen.screen(screen.REFERENCES[t.reference], fmt, xs, out, WORST_CANDIDATES,
                          _SCRATCH)
        todo = np.flatnonzero(s.code == screen.RESOLVE)
        summ.update(counts=s.counts.tolist(), hist=s.hist.tolist(), fine=s.fine.tolist(),
                    measured=int(s.acc[0]), nan=int(s.acc[1]), sum_abs=float(s.acc[2]),
                    min=float(s.acc[3]), max=float(s.acc[4]), max_rel=float(s.acc[8]),
                    not_cr=int(s.acc[7]))
        _candidates(summ, xs, out, s)
    else:
        todo = np.arange(out.size)
    summ["resolved"] = int(todo.size)
    if todo.size:
        err = _exact(t.reference, fmt, xs, out, todo, summ)
        summ["worst"] = _worst(xs, out, todo, err, fmt, t.reference)
        if summ["worst"] is not None:
            summ["lower"] = max(summ["lower"], abs(summ["worst"]["ulp"]))
    return summ


def _outputs(t: Target, xs: list, j: int) -> np.ndarray:
    """The target's float64 outputs on chunk ``j``'s inputs ``xs``, one per input;
    MeasureError (one line, picklable: it crosses from a worker to the parent) when the
    target raises or returns something else."""
    try:
        got = t.call(xs)
    except MeasureError:
        raise
    except Exception as exc:                                  # noqa: BLE001 (user code)
        raise MeasureError(f"the target {t.spec} raised {executors.one_line(exc)} "
                           f"(on chunk {j})") from None
    try:
        out = np.asarray(got, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise MeasureError(f"the target {t.spec} returned {type(got).__name__}, not numbers "
                           f"({executors.one_line(exc)}; on chunk {j})") from None
    if out.size != xs[0].size:
        raise MeasureError(f"the target {t.spec} returned {out.size} values for "
                           f"{xs[0].size} inputs (on chunk {j}): it must work elementwise")
    return out


def _candidates(summ, xs, out, s):
    """Keep the screen's candidates for the largest error (numerics.screen._select)."""
    summ["lower"] = float(s.lower)
    summ["dropped"] = None if s.dropped == -math.inf else float(s.dropped)
    up = np.abs(s.err[s.cands]) + s.margin
    summ["cands"] = [[*(float(x[i]) for x in xs), float(out[i]), float(u)]
                     for i, u in zip(s.cands, up)]


def settle(m: Measurement, t: Target, tally: Tally):
    """(worst, exact): the reproducer of the largest |error| over all chunks, and whether
    that maximum is exact -- every candidate whose upper bound reaches the largest lower
    bound is recomputed exactly (it is not exact only when more than WORST_CANDIDATES such
    inputs were in one chunk, or more than tally.CANDIDATES_KEPT in all)."""
    fmt = formats.get(m.format)
    best = tally.worst
    cands = tally.candidates()
    if cands:
        arr = np.array(cands, dtype=np.float64)
        xs = [arr[:, k].copy() for k in range(m.arity)]
        out = arr[:, m.arity].copy()
        idx = np.arange(len(cands))
        w = _worst(xs, out, idx, _exact(t.reference, fmt, xs, out, idx, None), fmt,
                   t.reference)
        if w is not None and (best is None or abs(w["ulp"]) > abs(best["ulp"])):
            best = w
    return best, tally.exact


def _exact(name, fmt, xs, out, idx, summ):
    """Exact ulp errors of elements ``idx`` (numerics.resolve); with ``summ``, their
    statistics are added to it."""
    sub = [x[idx] for x in xs]
    res = numerics.resolve(lambda bk, *a: getattr(bk, name)(*a), sub, fmt,
                           start_prec=fmt.precision + 64)
    t = out[idx]
    # Exact values beyond 2**(emax+2) (exp(1e10) has an exponent no rational holds) or below
    # 2**(qmin-64) measure alike clamped (numerics.metrics.clamp_exact).
    meas = metrics.measure(t, clamp_exact(res.values, fmt), fmt)
    if summ is not None:
        err = meas.ulp
        for c in meas.codes:
            summ["counts"][int(c)] += 1
        ok = ~np.isnan(err)
        a = np.abs(err[ok])
        summ["measured"] += int(ok.sum())
        summ["nan"] += int((~ok).sum())
        summ["sum_abs"] += float(a.sum())
        if a.size:
            summ["min"] = min(summ["min"], float(err[ok].min()))
            summ["max"] = max(summ["max"], float(err[ok].max()))
        top = screen.FINE_BINS / screen.FINE_STEP
        for v in a:                  # v may be inf (an error beyond binary64): the top bins
            summ["hist"][_coarse(v)] += 1
            summ["fine"][int(v * screen.FINE_STEP) if v < top else screen.FINE_BINS] += 1
        rel = np.abs(meas.rel[~np.isnan(meas.rel) & np.isfinite(meas.rel)])
        if rel.size:
            summ["max_rel"] = max(summ["max_rel"], float(rel.max()))
        # Correctly rounded: the certified rounding of the exact value (zeros of both signs
        # are one value; NaN matches NaN).
        same = (t == res.rounded) | (np.isnan(t) & np.isnan(res.rounded))
        summ["not_cr"] += int((~same & res.resolved).sum())
    return meas.ulp


def _coarse(a: float) -> int:
    """The metrics.HIST_EDGES bin of |error| ``a`` >= 0 (inf: the last bin)."""
    if a < 2.0 ** -10:
        return 0
    if not a < metrics.HIST_EDGES[-1]:
        return len(metrics.HIST_EDGES) - 1      # frexp(inf) is (inf, 0): not its exponent
    return min(math.frexp(a)[1] + 10, len(metrics.HIST_EDGES) - 1)


def _worst(xs, out, idx, err, fmt, name):
    """The reproducer of the largest exact |error| among elements ``idx`` (None when none
    is measurable): input bit patterns and decimals, computed and exact values, error."""
    k = rows.worst_index(err)
    if k is None:
        return None
    i = int(idx[k])
    width = (fmt.bits + 3) // 4
    ins = [float(x[i]) for x in xs]
    bits = [f"0x{int(b):0{width}x}" for b in formats.encode(np.array(ins), fmt)]
    res = numerics.resolve(lambda bk, *v: getattr(bk, name)(*v), [np.array([v]) for v in ins],
                           fmt, start_prec=fmt.precision + 64)
    return {"inputs": {f"x{n}" if len(xs) > 1 else "x": b for n, b in enumerate(bits)},
            "decimal": [repr(v) for v in ins], "computed": repr(float(out[i])),
            "exact": rows.decimal_text(res.values.reshape(-1)[0]), "ulp": float(err[k])}


# ----- the run ---------------------------------------------------------------------------------


_TARGETS = {}                            # targets rebuilt in a worker process, by spec


def _work(m: Measurement, j: int) -> dict:
    """Chunk ``j`` in a worker process (local pool or Dask): the target is rebuilt from its
    spec once per process (a ctypes or numba target cannot travel between processes)."""
    key = (m.target, m.format, m.reference, m.arity)
    if key not in _TARGETS:
        _TARGETS[key] = target(*key)
    return run_chunk(m, _TARGETS[key], j)


def measure(spec, fmt, samples: int | None = 100_000, seed: int = 0, reference=None,
            arity=None, out=None, jobs: int | None = None, resume: bool = False,
            progress: bool = False, stream=None, executor: str = "local",
            scheduler: str | None = None) -> Outcome:
    """Measure ``spec`` (a target string or a callable) in ``fmt``: ``samples`` random
    inputs, or every input with samples=None.  With ``out``, the results file is written
    (and checkpointed as chunks finish); callables run in this process (jobs ignored; the
    dask executor refuses them), named targets in worker processes (even with one job: a
    target that crashes ends the measurement with a message, not this process).
    ``executor``: ``local`` or ``dask`` (the cluster at ``scheduler``, or a LocalCluster of
    ``jobs`` workers).  A chunk that fails on the cluster makes the row's status ``error``
    (see ``_failed``).  MeasureError for a request that cannot run, or cannot fit this
    machine's memory or disk (engine/budget.py), before any work."""
    python = callable(spec) and not isinstance(spec, str)
    m, t = _measurement(spec, fmt, samples, seed, reference, arity, executor)
    n = m.chunks()
    workers = 1 if python else (jobs or os.cpu_count() or 1)
    try:
        budget.check_measure(m.total, CHUNK, workers, out)
    except budget.BudgetError as exc:
        raise MeasureError(str(exc)) from None
    t0 = time.perf_counter()
    tally = Tally()
    done = set()
    ckpt = None
    if out is not None:
        for k, summ in orchestrate.resumed(out, m.fingerprint(), resume).items():
            j = int(k)
            if 0 <= j < n and j not in done:
                done.add(j)
                tally.add(j, summ)
        # A resumed checkpoint is appended to: its chunks are in the tally, not kept to be
        # written again.
        ckpt = Checkpoint(checkpoint_path(out), m, {}, append=bool(done))
    outcome = Outcome(total=n, resumed=len(done), out=str(out or ""))
    units = ((j, (m, j)) for j in range(n) if j not in done)
    orchestrate.orchestrate(
        _work, units, _executor(m, t, jobs, python, executor, scheduler), tally.add,
        checkpoint=ckpt, record=compact, outcome=outcome,
        bar=Progress(n, len(done), stream, quiet=not progress, work=n - len(done),
                     unit=f"chunks of {CHUNK} inputs"))
    outcome.wall = time.perf_counter() - t0
    if outcome.interrupted:
        return outcome
    outcome.rows = [_failed(m, t, tally) if tally.failed else row(m, t, tally)]
    if out is not None:
        orchestrate.finish(out, results.document(outcome.rows, m))
    return outcome


def _measurement(spec, fmt, samples, seed, reference, arity, executor) -> tuple:
    """(Measurement, Target) of a request; MeasureError for one that cannot run."""
    fmt_obj = formats.get(fmt)
    python = callable(spec) and not isinstance(spec, str)
    if python and executor == executors.DASK:
        raise MeasureError("a Python callable target runs in this process only: name it as "
                           "package.module:function to measure it on a Dask cluster")
    if samples is not None and (isinstance(samples, bool) or
                                not isinstance(samples, (int, np.integer))):
        raise MeasureError(f"--samples must be a whole number (got {samples!r})")
    if samples is not None and samples < 1:
        raise MeasureError(f"--samples must be >= 1 (got {samples})")
    t = target(spec, fmt_obj, reference, arity)
    label = fmt_obj.name if fmt_obj.name in formats.CATALOG else fmt_obj.spec
    m = Measurement(t.spec, label, t.reference, t.arity, samples, seed)
    if samples is None and m.total > EXHAUSTIVE_MAX:
        raise MeasureError(f"--exhaustive covers at most 2**32 inputs ({fmt_obj.label}, "
                           f"{t.arity} argument(s): 2**{fmt_obj.bits * t.arity}); use --samples")
    if not screen.screenable(fmt_obj) and m.total > 1 << 20:
        raise MeasureError(f"{fmt_obj.label} is measured exactly, input by input: at most "
                           f"2**20 samples")
    return m, t


def _executor(m, t, jobs, python, executor="local", scheduler=None):
    """The orchestrate.Executor of a measurement: a chunk that failed on the cluster yields
    ``{"error": message}`` (checkpointed like a summary).  Named targets run in worker
    processes even with one job (``isolate``); a Python callable in this process."""
    def name(j):
        return f"chunk {j} (inputs {j * CHUNK}..{min((j + 1) * CHUNK, m.total) - 1})"
    return orchestrate.Executor(executor, scheduler, jobs or os.cpu_count() or 1, name=name,
                                failed=lambda j, message: {"error": message}, serial=python,
                                inline=lambda m, j: run_chunk(m, t, j), preload=__name__,
                                isolate=True)


def _failed(m: Measurement, t: Target, tally: Tally) -> dict:
    """The row of a measurement with failed chunks: status ``error``, the reason naming the
    chunks, their input ranges and the first message; the statistics are those of the
    chunks that finished (``samples`` counts their inputs only), so a partial measurement
    is still readable but can never pass for a complete one."""
    failed = sorted(tally.failed)
    first = tally.failed[failed[0]]
    spans = ", ".join(f"{j} (inputs {j * CHUNK}..{min((j + 1) * CHUNK, m.total) - 1})"
                      for j in failed[:5]) + (", ..." if len(failed) > 5 else "")
    reason = f"{len(failed)} of {tally.chunks} chunks failed: {spans}; first error: {first}"
    out = row(m, t, tally)
    if not tally.measured and tally.n == 0:
        out["max_rel"] = None                      # nothing was measured
    out.update(status="error", reason=reason)
    return out


def row(m: Measurement, t: Target, tally: Tally) -> dict:
    """The results row of the merged chunk summaries."""
    worst, exact = settle(m, t, tally)
    max_ulp = abs(worst["ulp"]) if worst else None
    extremes = max(abs(tally.min), abs(tally.max)) if tally.measured else None
    lo, hi = _signed_extrema(tally, worst)
    return empty_row(
        op=m.target, instance="measure", attrs={"reference": m.reference}, route="forward",
        port="out", format=m.format, mode="nearest_even", policy="-",
        implementation=m.target, status="ok",
        reason=None if exact else f"more than {WORST_CANDIDATES} inputs of a chunk may hold "
        f"the largest error: the maximum is exact to 2**(p-40) ulp",
        exhaustive=m.exhaustive, samples=tally.n, max_ulp=max_ulp,
        p99_ulp=tally.p99(max_ulp if max_ulp is not None else extremes),
        mean_ulp=tally.mean,
        min_signed_ulp=lo, max_signed_ulp=hi,
        max_rel=tally.max_rel,
        exceptional={c: int(k) for c, k in zip(metrics.CLASSES, tally.counts)
                     if c != "ok" and k},
        unmeasured=tally.nan, histogram=tally.hist.tolist(), worst=worst,
        incorrectly_rounded=tally.not_cr, resolved_exactly=tally.resolved)


def _signed_extrema(tally: Tally, worst) -> tuple:
    """(min, max) signed error: the screen's extremes (within 2**(p-40) ulp), except that
    the one on the side of the largest |error| is that error, resolved exactly, and neither
    reaches past it (so |min|, |max| <= max_ulp, as in the coverage run's rows)."""
    if not tally.measured:
        return None, None
    lo, hi = tally.min, tally.max
    if worst is not None:
        top = abs(worst["ulp"])
        lo, hi = max(lo, -top), min(hi, top)
        if worst["ulp"] > 0:
            hi = worst["ulp"]
        elif worst["ulp"] < 0:
            lo = worst["ulp"]
    return min(lo, hi), max(lo, hi)


def rate(n: int, seconds: float) -> str:
    """``n`` inputs in ``seconds`` as a rate with an SI prefix (k, M, G inputs/s), 3
    significant digits; a scan too short to time says so."""
    if seconds <= 0 or n <= 0:
        return "rate not measured"
    r = n / seconds
    for scale, prefix in ((1e9, "G "), (1e6, "M "), (1e3, "k "), (1.0, "")):
        if r >= scale:
            return f"{r / scale:.3g} {prefix}inputs/s"
    return f"{r:.3g} inputs/s"


def text(o: Outcome) -> str:
    """The terminal summary of a measurement (its one row)."""
    r = o.row
    w = r["worst"]
    wall = f"{o.wall:.1f}" if o.wall >= 10 else f"{o.wall:.3g}"
    lines = [f"{r['op']} in {r['format']} against {r['attrs']['reference']} correctly rounded: "
             f"{r['samples']} inputs ({'all' if r['exhaustive'] else 'random'}), "
             f"{wall} s ({rate(r['samples'], o.wall)})"]
    if w is None:
        lines.append("no measurable error (every output NaN or exceptional)")
    else:
        args = ", ".join(f"{b} ({d})" for b, d in zip(w["inputs"].values(), w["decimal"]))
        lines.append(f"max error {r['max_ulp']:.6g} ulp at {args}: computed {w['computed']}, "
                     f"exact {w['exact']}")
    lines.append(f"not correctly rounded: {r['incorrectly_rounded']} of {r['samples']}"
                 + (f"; mean |error| {r['mean_ulp']:.4g} ulp, p99 {r['p99_ulp']:.4g} ulp"
                    if r["mean_ulp"] is not None else ""))
    if r["exceptional"]:
        lines.append("exceptional outcomes: " + ", ".join(f"{k} {v}" for k, v in
                                                          sorted(r["exceptional"].items())))
    if r["reason"]:
        lines.append(f"{'error' if r['status'] == 'error' else 'note'}: {r['reason']}")
    return "\n".join(lines)
