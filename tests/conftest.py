"""Helpers the test files share, defined once.  Import them by name (``from conftest import
BACKENDS, f64``): there is no tests/__init__.py, so pytest puts tests/ on sys.path, as it
does for kernel_harness.py and mpfr_oracle.py.  The one fixture, ``scratch``, pytest finds
by itself.

- the registry: ``EXAMPLES`` and ``INSTANCES`` (every operator at each example of its
  entry), built once;
- backends: ``BACKENDS`` (one of each kind) and ``rule``;
- values: ``arr``, ``f64``, ``f64s``, ``fr``, ``near``, ``wrap``, ``round_bits``;
- accumulation: ``fixed_point_dot``;
- mpmath: ``mp_context``, ``CTX`` (300 bits, local), ``mp``, ``to_mp``, ``pairing``,
  ``central_difference``; MPFR: ``mpfr_context``;
- the command line: ``ERROR``, ``run_cli``, ``one_error``, ``load_error``,
  ``wait_for_checkpoint``;
- a faulty backend: ``degrade_exp``;
- a temporary operator: ``SCRATCH``, ``scratch_operator`` and the ``scratch`` fixture.
"""

from __future__ import annotations

import contextlib
import math
import time
from fractions import Fraction

import gmpy2
import mpmath
import numpy as np
import pytest

from roundoff_coverage import formats, numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import attributes as A
from roundoff_coverage.routes import ports as P
from roundoff_coverage.routes.registry import declaration, define, withdraw

# ----- the registry -----------------------------------------------------------------------------
# (name, label, attrs): every registered operator at each example of its entry ('' labels the
# defaults); INSTANCES: (test id, op) for the same, the id '<name>-<label>' or '<name>'.
EXAMPLES = [(name, label, attrs) for name in routes.names()
            for label, attrs in declaration(name).examples.items()]
INSTANCES = [(f"{name}-{label}" if label else name, routes.op(name, **attrs))
             for name, label, attrs in EXAMPLES]

# ----- backends ---------------------------------------------------------------------------------
# One backend of each kind: exact rationals, the mpmath reference, an emulated format, numpy.
BACKENDS = {
    "exact": lambda: numerics.exact(),
    "reference": lambda: numerics.reference(64),
    "bfloat16": lambda: numerics.emulated("bfloat16"),
    "float64": lambda: numerics.native("float64"),
}


def rule(name, backend, **attrs):
    """The rule of ``routes.op(name, **attrs)`` under ``BACKENDS[backend]``."""
    return routes.op(name, **attrs).rule(BACKENDS[backend]())


# ----- values -----------------------------------------------------------------------------------
def arr(*values):
    """A float64 array of ``values``."""
    return np.array(values, dtype=np.float64)


def f64(xp, a):
    """``xp``'s numbers ``a`` as a float64 array (None stays None)."""
    return None if a is None else np.asarray(xp.to_float64(a), dtype=np.float64)


def f64s(xp, arrays):
    """``f64`` of each of ``arrays`` (a rule's outputs, tangents or gradients), as a list."""
    return [f64(xp, a) for a in arrays]


def fr(a):
    """A float64 array as an object array of the Fractions its elements are exactly."""
    return np.vectorize(Fraction, otypes=[object])(np.asarray(a, dtype=np.float64))


def near(got, want, ulps=1):
    """Every element of ``got`` within ``ulps`` binary64 spacings of ``want``'s."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return bool(np.all(np.abs(got - want) <= ulps * np.spacing(np.abs(want))))


def wrap(v, signed, w):
    """An unbounded integer as a w-bit word: v mod 2**w, read as two's complement when
    ``signed``."""
    v %= 1 << w
    return v - (1 << w) if signed and v >= 1 << (w - 1) else v


# ----- mpmath and MPFR --------------------------------------------------------------------------
def round_bits(q, p: int) -> Fraction:
    """q rounded to nearest even at ``p`` significant bits, in exact rationals (normal range:
    no exponent limits), independent of formats."""
    q = Fraction(q)
    if q == 0:
        return q
    e = math.floor(math.log2(abs(q)))
    while Fraction(2) ** e > abs(q):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(q):
        e += 1
    unit = Fraction(2) ** (e - p + 1)
    m = q / unit
    n = math.floor(m)
    rest = m - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2):
        n += 1
    return n * unit


# ----- accumulation ----------------------------------------------------------------------------
def fixed_point_dot(x, y, bits, block, acc="binary32", mode="nearest_even") -> Fraction | None:
    """The fixed_point policy's dot product written out in rationals: blocks of ``block``
    exact products with the running sum, aligned to the largest exponent among them (a
    quantum no finer than binary64's 2**-1074), truncated toward zero to ``bits`` fraction
    bits below it, summed exactly and rounded into ``acc`` (Fasi, Higham, Mikaitis, Pranesh
    2021); None once a running sum overflows ``acc``."""
    prods = [Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, y)]
    s = Fraction(0)
    for i in range(0, len(prods), block):
        terms = [s] + prods[i:i + block]
        top = max(abs(t) for t in terms)
        if top == 0:
            continue
        e = top.numerator.bit_length() - top.denominator.bit_length()
        e -= Fraction(2) ** e > top                                  # floor(log2(top))
        q = Fraction(2) ** max(e - bits, -1074)
        s = formats.round_exact(sum((abs(t) // q) * q * (1 if t >= 0 else -1) for t in terms),
                                acc, mode).to_fraction()
        if s is None:
            return None
    return s


def mp_context(prec: int) -> mpmath.MPContext:
    """A local mpmath context at ``prec`` bits (never the global mpmath.mp)."""
    ctx = mpmath.MPContext()
    ctx.prec = prec
    return ctx


CTX = mp_context(300)


def mp(v):
    """An mpf of CTX holding ``v`` exactly (floats, ints, any context's mpf, dyadic Fractions;
    a non-dyadic Fraction is rounded once to 300 bits)."""
    if hasattr(v, "_mpf_"):
        return CTX.make_mpf(v._mpf_)
    if hasattr(v, "numerator") and not isinstance(v, (float, np.floating)):
        # int(): mpmath 1.3 (the version torch's sympy pins) takes no numpy integers.
        return CTX.mpf(int(v.numerator)) / int(v.denominator)
    return CTX.mpf(float(v))


def to_mp(x) -> np.ndarray:
    """An object array of the exact mpf values of a float64 array (NaN and inf kept)."""
    with np.errstate(all="ignore"):
        return np.asarray(np.frompyfunc(mp, 1, 1)(np.asarray(x, dtype=np.float64)), dtype=object)


def pairing(us, vs):
    """(sum of u * v, sum of |u * v|) over ports and elements, in CTX: exact for the binary64
    and 256-bit values here (ports where either side is None are skipped)."""
    total, scale = CTX.mpf(0), CTX.mpf(0)
    for u, v in zip(us, vs):
        if u is None or v is None:
            continue
        for a, b in zip(np.ravel(u), np.ravel(v)):
            term = mp(a) * mp(b)
            total, scale = total + term, scale + abs(term)
    return total, scale


def central_difference(rule, xp, inputs, tangents, h=2.0 ** -64):
    """(F(x + h t) - F(x - h t)) / 2h of the rule's forward map, per output as a flat list of
    CTX mpf, at the backend's precision (inputs whose tangent is None stay put).  At 256 bits
    the truncation error h**2 |F'''| / 6 and the rounding 2**-256 / h are both below 2**-120."""
    def moved(s):
        return [x if t is None else xp.add(xp.asarray(x), xp.multiply(xp.constant(s * h),
                                                                       xp.asarray(t)))
                for x, t in zip(inputs, tangents)]
    plus, minus = rule.forward(moved(1)), rule.forward(moved(-1))
    return [[(mp(a) - mp(b)) / (2 * CTX.mpf(h)) for a, b in zip(np.ravel(p), np.ravel(m))]
            for p, m in zip(plus, minus)]


def mpfr_context(fmt):
    """An MPFR context emulating ``fmt`` under round-to-nearest: precision p, exponents of
    the normal range, subnormals (IEEE-style; MPFR's exponent is one above IEEE's)."""
    return gmpy2.context(precision=fmt.precision, emin=fmt.qmin + 1, emax=fmt.emax + 1,
                         subnormalize=True, round=gmpy2.RoundToNearest)


# ----- a bfloat16 graph with exact oracles (model runs, the implementations seam) ----------------
def chain_graph(n=6):
    """y = (x * a + b) * c, elementwise, as three nodes (mul, add, scale)."""
    g = routes.Graph(x=P.value((n,)), a=P.value((n,)), b=P.value((n,)), c=P.value((n,)))
    h = g.apply(routes.op("mul", shape=(n,)), g.input("x"), g.input("a"), name="mul")
    h = g.apply(routes.op("add", shape=(n,)), h, g.input("b"), name="add")
    g.output(g.apply(routes.op("mul", shape=(n,)), h, g.input("c"), name="scale"))
    return g


def softmax_shift_graph(n=8):
    """sum(softmax(x + b)) over rows of n: its gradient in b is exactly 0 (softmax ignores
    a shift of a row), so the reference leaves only a cancellation residue there."""
    g = routes.Graph(x=P.value((2, n)), b=P.value((2, n)))
    h = g.apply(routes.op("add", shape=(2, n)), g.input("x"), g.input("b"), name="shift")
    p = g.apply(routes.op("softmax", shape=(2, n), axis=1), h, name="softmax")
    g.output(g.apply(routes.op("reduce", shape=(2, n), axes=(0, 1)), p, name="total"))
    g.example_inputs = [np.random.default_rng(2).standard_normal((2, n)),
                        np.full((2, n), 0.25)]
    return g


def round_bf16(q: Fraction) -> Fraction:
    """q rounded to nearest even into bfloat16 (formats.round_exact), as a Fraction."""
    return Fraction(formats.round_exact(q, formats.get("bfloat16"), "nearest_even").to_float())


def bf16_ulps(computed: Fraction, exact: Fraction) -> float:
    """|computed - exact| in ulps of bfloat16 at the exact value (normal range)."""
    e = abs(exact).numerator.bit_length() - abs(exact).denominator.bit_length()
    if Fraction(2) ** e > abs(exact):
        e -= 1
    return float(abs(computed - exact) / Fraction(2) ** (e - 7))


# ----- the command line -------------------------------------------------------------------------
ERROR = "roundoff-coverage: error: "


def run_cli(capsys, *argv):
    """(exit status, stdout, stderr) of the command line ``argv`` (each argument str()'d),
    run in-process through reports.cli.main."""
    from roundoff_coverage.reports.cli import main
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def one_error(err: str, *words) -> str:
    """The only line of the standard error text ``err``, which must be an error line holding
    each of ``words``."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR), err
    for w in words:
        assert w in lines[0], err
    return lines[0]


def load_error(load, path, text, error) -> str:
    """The message of the ``error`` that ``load(path)`` raises once ``path`` holds ``text``;
    it must be one line."""
    path.write_text(text)
    with pytest.raises(error) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def wait_for_checkpoint(proc, ckpt, seconds, poll):
    """Wait (at most ``seconds``, looking every ``poll``) until the running command ``proc``
    has written a task into its checkpoint file ``ckpt``; it must still be running then."""
    deadline = time.monotonic() + seconds
    seen = False
    while time.monotonic() < deadline and proc.poll() is None:
        if ckpt.exists() and ckpt.read_bytes().count(b'"task"') >= 1:
            seen = True
            break
        time.sleep(poll)
    assert proc.poll() is None, proc.stderr.read()
    assert seen, f"no task in {ckpt} after {seconds} s"


# ----- a faulty backend -------------------------------------------------------------------------
def degrade_exp(monkeypatch):
    """Make every numerics.emulated backend round exp to BinaryFormat(8, 4), three bits fewer
    than bfloat16 has, for one test: exp's 0.5-ulp certificate is then violated on some inputs."""
    coarse = formats.BinaryFormat(8, 4)
    original = numerics.emulated

    def degraded(fmt, mode="nearest_even", policy=None, seed=0):
        be = original(fmt, mode, policy, seed)
        exp = be.exp
        be.exp = lambda x: be.asarray(formats.round_to(exp(x), coarse))
        return be
    monkeypatch.setattr(numerics, "emulated", degraded)


# ----- a temporary operator ---------------------------------------------------------------------
SCRATCH = "scratchSoftmax"


def _scratch_check(a):
    if a.axis >= len(a.shape):
        return f"axis must be < rank {len(a.shape)} (got {a.axis})"
    return None


@contextlib.contextmanager
def scratch_operator():
    """A temporary operator: y = x (identity) with attributes shape, axis, mode; input i is an
    index port below the extent of ``axis``; mode 'erf' needs the Erf capability."""
    define(SCRATCH, "softmax_attention",
           attributes=(A.shape(default=(2, 3)), A.nat("axis", 1),
                       A.choice("mode", ("plain", "erf"))),
           ports=lambda a: ({"x": P.value(a.shape),
                             "i": P.index((a.shape[a.axis],), a.shape[:1])},
                            {"y": P.value(a.shape)}),
           forward=lambda xp, a, x, i: xp.negative(xp.negative(x)),
           backward=lambda xp, a, xs, ys, gs, needs: (gs[0], None),
           jvp=lambda xp, a, xs, ys, ts: ts[0],
           check=_scratch_check,
           needs=lambda a: "Erf" if a.mode == "erf" else None,
           notes=("scratch",))
    try:
        yield
    finally:
        withdraw(SCRATCH)


@pytest.fixture
def scratch():
    """The temporary operator SCRATCH, declared for one test."""
    with scratch_operator():
        yield


@pytest.fixture(scope="session")
def simulated(tmp_path_factory):
    """(every case the kernel table declares, {case id: result}): one run of numba's CUDA
    simulator for the whole session, whichever kernel test asks first
    (tests/kernel_harness.py)."""
    from kernel_harness import table_cases, table_results
    return table_cases(), table_results(tmp_path_factory)
