"""numerics.tensor_core against published GPU outputs (../shared/data/tensor-cores) and
against an exact-rational oracle written from the model's definition (Fractions: the
alignment exponent, the cut of every term, the exact sum, one rounding by
formats.round_exact)."""

from __future__ import annotations

import math
import pathlib
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics import tensor_cores as tc

DATA = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tensor-cores"
NAMES = {"fp16": "binary16", "bf16": "bfloat16", "tf32": "tf32", "E4M3": "float8_e4m3fn",
         "E5M2": "float8_e5m2"}
SETS = sorted(DATA.glob("*.npz"))


def _f32(z, key):
    return z[key].view(np.float32).astype(np.float64)


def _same_bits(x, y):
    return (x.view(np.int64) == y.view(np.int64)) | (np.isnan(x) & np.isnan(y))


@pytest.mark.skipif(not SETS, reason="../shared/data/tensor-cores is not beside the checkout")
@pytest.mark.parametrize("path", SETS, ids=lambda p: p.stem)
def test_published_outputs_bit_for_bit(path):
    gpu, fmt = path.stem.split("_")
    z = np.load(path)
    a, b, c = (_f32(z, k) for k in "abc")
    core = tc.tensor_core(gpu)
    fp8 = fmt in ("E4M3", "E5M2")
    if gpu == "H100" and fp8:
        # The published H100 FP8 binary32 outputs were taken with a zero accumulator: every
        # one of them is the products' sum alone (each differs from the file's c + sum by
        # about c), so they are replayed with c = 0.
        c = np.zeros_like(c)
    d = core.fma(a, b, c, NAMES[fmt], "binary32")
    assert _same_bits(d, _f32(z, "d_fp32")).all(), np.flatnonzero(~_same_bits(d, _f32(z, "d_fp32")))
    if "d_fp16" in z.files and not fp8:
        c16 = formats.round_to(_f32(z, "c"), "binary16")
        d16 = core.fma(a, b, c16, NAMES[fmt], "binary16")
        assert _same_bits(d16, _f32(z, "d_fp16")).all()


# ----- the exact-rational oracle -----------------------------------------------------------
def _exponent(x: Fraction, floor: int) -> int:
    """floor(log2 |x|), at least ``floor``."""
    n, d = abs(x.numerator), x.denominator
    e = n.bit_length() - d.bit_length()
    if Fraction(n, d) < Fraction(2) ** e:
        e -= 1
    return max(e, floor)


def _cut(x: Fraction, q: Fraction) -> Fraction:
    """x truncated toward zero to a multiple of q."""
    return Fraction(math.trunc(x / q)) * q


def oracle(path: tc.Datapath, a, b, c, fin, fout, flush_out=False, floor=None) -> float:
    """One output of the model, from its definition in exact rationals (``floor``: the
    unit's exponent floor, the least alignment exponent of a group with a nonzero term)."""
    fin, fout = formats.get(fin), formats.get(fout)
    nearest = path.rounding == "nearest_even" or fout.label == "binary16"
    out = fout if path.extra is None or path.extra >= 0 or fout.label != "binary32" else \
        formats.BinaryFormat(8, 23 + path.extra, 127)
    c = Fraction(float(c))
    for t0 in range(0, len(a), path.group):
        prods = [(Fraction(float(x)) * Fraction(float(y)), x, y)
                 for x, y in zip(a[t0:t0 + path.group], b[t0:t0 + path.group])]
        exps = [_exponent(Fraction(float(x)), fin.emin) + _exponent(Fraction(float(y)), fin.emin)
                for p, x, y in prods if p != 0]
        if c != 0:
            exps.append(_exponent(c, -126))
        if not exps:
            c = Fraction(0)
            continue
        terms = [p for p, _, _ in prods] + [c]
        if path.extra is None:
            s = sum(terms, Fraction(0))
        else:
            e = max(exps) if floor is None else max(max(exps), floor)
            q = Fraction(2) ** (e - 23 - path.extra)
            s = sum((_cut(t, q) for t in terms), Fraction(0))
        mode = "nearest_even" if nearest else "toward_zero"
        r = formats.round_exact(s, out, mode)
        v = r.to_fraction()
        if v is None:                                   # the model overflows to inf
            return math.copysign(math.inf, s)
        c = v
    return float(c)


def _values(rng, fmt, shape, subnormal_share=0.0):
    f = formats.get(fmt)
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 6, shape)
    if subnormal_share:
        tiny = rng.random(shape) < subnormal_share
        x = np.where(tiny, rng.standard_normal(shape) * f.min_normal / 2, x)
    return formats.round_to(x, f)


@pytest.mark.parametrize("gpu", list(tc.PRESETS))
def test_every_datapath_against_the_oracle(gpu):
    rng = np.random.default_rng(7)
    core = tc.tensor_core(gpu)
    for fin, path in core.paths.items():
        outs = ("binary32", "binary16") if path.binary16 else ("binary32",)
        for fout in outs:
            k = 2 * path.group + 3                       # chained groups, a short last one
            a, b = (_values(rng, fin, (12, k), 0.2) for _ in range(2))
            c = formats.round_to(rng.standard_normal(12) * 4, fout)
            c[0] = 0.0
            a[1] = 0.0                                    # an all-zero row of products
            got = core.fma(a, b, c, fin, fout)
            floor = core.alignment_floor(fin, fout)
            want = np.array([oracle(path, a[i], b[i], c[i], fin, fout, floor=floor)
                             for i in range(12)])
            assert _same_bits(got, want).all(), (fin, fout, got, want)


# ----- each parameter alone ----------------------------------------------------------------
def test_extra_alignment_bits_alone():
    # 1 - 1 + 2**-25 + 2**-26 in one bf16 group: E = 0, the quantum 2**(-23 - extra); the
    # final rounding is exact here, so only the cut decides.
    a = np.array([[1.0, 1.0, 2.0 ** -25, 2.0 ** -26]])
    b = np.array([[1.0, -1.0, 1.0, 1.0]])
    got = {x: tc.TensorCore("t", {"bfloat16": tc.Datapath(8, x)}).fma(a, b, [0.0], "bfloat16")
           for x in (1, 2, 3)}
    assert got == {1: 0.0, 2: 2.0 ** -25, 3: 3 * 2.0 ** -26}
    for x in (1, 2, 3):
        assert got[x] == oracle(tc.Datapath(8, x), a[0], b[0], 0.0, "bfloat16", "binary32")


def test_group_size_alone():
    # Eight products of 2**-26, then 1: in one group of 16 each tiny product falls below
    # the quantum 2**-25 of E = 0; in groups of 8 they first sum to 2**-23 (their own group,
    # exact), which survives the second group's cut.
    a = np.array([[2.0 ** -13] * 8 + [1.0] + [0.0] * 7])
    b = np.array([[2.0 ** -13] * 8 + [1.0] + [0.0] * 7])
    one = tc.TensorCore("t", {"bfloat16": tc.Datapath(16, 2)}).fma(a, b, [0.0], "bfloat16")
    two = tc.TensorCore("t", {"bfloat16": tc.Datapath(8, 2)}).fma(a, b, [0.0], "bfloat16")
    assert one[0] == 1.0 and two[0] == 1.0 + 2.0 ** -23


def test_final_rounding_alone():
    # 1 + 3 * 2**-25: kept whole by the cut (extra 2), then rounded: toward zero gives 1,
    # to nearest even 1 + 2**-23.
    a, b = np.array([[1.0, 1.5]]), np.array([[1.0, 2.0 ** -24]])
    rz = tc.TensorCore("t", {"bfloat16": tc.Datapath(16, 2)}).fma(a, b, [0.0], "bfloat16")
    rn = tc.TensorCore("t", {"bfloat16": tc.Datapath(16, 2, "nearest_even")}).fma(
        a, b, [0.0], "bfloat16")
    assert rz[0] == 1.0 and rn[0] == 1.0 + 2.0 ** -23


def test_exponent_floor_alone():
    # 2**-149 - 2**-159 from bfloat16 products, c = 0: without a floor E = -149 keeps both
    # terms whole and the sum, rounded toward zero into binary32 (subnormal quantum
    # 2**-149), is 0; with Hopper's floor E = -133 the quantum is 2**-158, the tiny term is
    # cut to 0 and the result is 2**-149.  Only the floor decides: same group, bits, rounding.
    a = np.array([[2.0 ** -75, 2.0 ** -80]])
    b = np.array([[2.0 ** -74, -(2.0 ** -79)]])
    path = tc.Datapath(16, 2)
    got = {f: tc.TensorCore("t", {"bfloat16": path}, floor=f).fma(a, b, [0.0], "bfloat16")[0]
           for f in (None, -133)}
    assert got == {None: 0.0, -133: 2.0 ** -149}
    for f in (None, -133):
        assert got[f] == oracle(path, a[0], b[0], 0.0, "bfloat16", "binary32", floor=f)
    # the presets: Hopper and Blackwell have it, Ampere has none; a nonzero c (e(c) >= -126)
    # or products above 2**-133 never meet it.
    assert tc.tensor_core("h100").fma(a, b, [0.0], "bfloat16")[0] == 2.0 ** -149
    assert tc.tensor_core("b200").fma(a, b, [0.0], "bfloat16")[0] == 2.0 ** -149
    assert tc.tensor_core("a100").fma(a, b, [0.0], "bfloat16")[0] == 0.0
    with pytest.raises(ValueError, match="exponent floor is an integer"):
        tc.TensorCore("t", {"bfloat16": path}, floor=-100)


def test_hopper_fp8_keeps_thirteen_fraction_bits():
    # 1 + 2**-12 + 2**-14 (E4M3 products): the cut at 2**(0 - 13) drops nothing, the output
    # keeps 13 fraction bits toward zero: 1 + 2**-12 + 2**-14 -> 1 + 2**-12 (13 bits: 2**-13
    # is the last one kept).
    a = np.array([[1.0, 2.0 ** -6, 2.0 ** -7]])
    b = np.array([[1.0, 2.0 ** -6, 2.0 ** -7]])
    got = tc.tensor_core("h100").fma(a, b, [0.0], "float8_e4m3fn")
    assert got[0] == 1.0 + 2.0 ** -12
    assert got[0] == oracle(tc.tensor_core("h100").paths["float8_e4m3fn"], a[0], b[0], 0.0,
                            "float8_e4m3fn", "binary32")


def test_blackwell_fp8_is_the_correctly_rounded_sum():
    rng = np.random.default_rng(3)
    a, b = (_values(rng, "float8_e5m2", (40, 64), 0.1) for _ in range(2))
    c = formats.round_to(rng.standard_normal(40) * 2.0 ** rng.integers(-30, 30, 40), "binary32")
    got = tc.tensor_core("b200").fma(a, b, c, "float8_e5m2")
    path = tc.tensor_core("b200").paths["float8_e5m2"]
    want = [oracle(path, a[i], b[i], c[i], "float8_e5m2", "binary32") for i in range(40)]
    assert _same_bits(got, np.array(want)).all()


def test_specials_and_overflow():
    core = tc.tensor_core("a100")
    inf = math.inf
    a = np.array([[inf, 1.0], [inf, 0.0], [inf, 1.0], [np.nan, 1.0], [65504.0, 65504.0]])
    b = np.array([[1.0, 1.0], [0.0, 1.0], [-1.0, 0.0], [1.0, 1.0], [65504.0, 65504.0]])
    c = np.array([0.0, 0.0, inf, 0.0, 0.0])
    got = core.fma(a, b, c, "binary16")
    assert got[0] == inf and np.isnan(got[1]) and np.isnan(got[2]) and np.isnan(got[3])
    assert got[4] == 2 * 65504.0 ** 2                  # finite: far inside binary32
    # binary16 outputs overflow to inf (round to nearest even).
    assert core.fma(a[4:], b[4:], [0.0], "binary16", "binary16")[0] == inf


# ----- the policy --------------------------------------------------------------------------
@pytest.mark.parametrize("fmt,gpu,m,n", [("bfloat16", "h100", 3, 4), ("binary16", "v100", 2, 37),
                                         ("float8_e4m3fn", "ada", 3, 4),
                                         ("float8_e5m2", "b200", 2, 19),
                                         ("float8_e4m3fn", "b200", 3, 20),
                                         ("binary32", "a100", 20, 3)])
def test_policy_matmul_against_the_oracle(fmt, gpu, m, n):
    # n = 37, 19: several blocks of the kernel's columns, a short last one; m = 20 > n = 3:
    # the kernel runs the transposed product.
    rng = np.random.default_rng(11)
    x, y = _values(rng, fmt, (m, 37)), _values(rng, fmt, (37, n))
    x[0, :5] = 0.0
    if gpu == "b200":          # terms spanning more binades than one binary64 sum holds
        top = float(formats.get(fmt).max_finite)
        x = formats.round_to(np.clip(x * 2.0 ** rng.integers(-12, 12, x.shape), -top, top),
                             fmt)
    got = numerics.emulated(fmt, "nearest_even", f"tc:{gpu}").matmul(x, y)
    core = tc.tensor_core(gpu)
    fin = tc.READS[formats.get(fmt).label]
    # binary32 operands are read as tf32: their low 13 fraction bits ignored (truncation).
    xr, yr = (formats.round_to(v, fin, "toward_zero") for v in (x, y))
    for i in range(m):
        for j in range(n):
            want = oracle(core.paths[fin], xr[i], yr[:, j], 0.0, fin, "binary32")
            want = formats.round_to(np.array([want]), fmt)    # stored in the run's format
            assert _same_bits(got[i, j:j + 1], want).all()


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown tensor core 'rtx1'.*choose from"):
        tc.tensor_core("rtx1")
    with pytest.raises(ValueError, match="takes binary16 inputs"):
        tc.tensor_core("v100").fma([[1.0]], [[1.0]], [0.0], "bfloat16")
    with pytest.raises(ValueError, match="binary32 outputs"):
        tc.tensor_core("h100").fma([[1.0]], [[1.0]], [0.0], "bfloat16", "binary16")
    with pytest.raises(ValueError, match="shape"):
        tc.tensor_core("h100").fma([[1.0, 2.0]], [[1.0]], [0.0], "bfloat16")
    with pytest.raises(ValueError, match="not bfloat16 values"):
        tc.tensor_core("h100").fma([[1.1]], [[1.0]], [0.0], "bfloat16")
    with pytest.raises(ValueError, match=r"takes .*binary32 \(as tf32\) operands \(got "
                                         r"float8_e4m3fnuz\)"):
        numerics.emulated("float8_e4m3fnuz", "nearest_even", "tc:h100").matmul(
            np.ones((2, 2)), np.ones((2, 2)))


@pytest.mark.parametrize("argv,says", [
    (["policies", "tc:rtx1"], "unknown tensor core 'rtx1'"),
    (["run", "--ops", "matmul", "--policies", "tc:rtx1"], "unknown tensor core 'rtx1'"),
    (["model", "x.py:f", "--policies", "tc:rtx1"], "unknown tensor core 'rtx1'"),
    (["bound", "--ops", "matmul", "--box=-1,1", "--policies", "tc:h100"],
     "no enclosure of a tensor core's block FMAs over a box")])
def test_cli_refuses_in_one_line(argv, says, tmp_path):
    p = subprocess.run([sys.executable, "-m", "roundoff_coverage", *argv], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and says in p.stderr


def test_coverage_run_under_a_tensor_core(tmp_path):
    out = tmp_path / "tc.json"
    p = subprocess.run([sys.executable, "-m", "roundoff_coverage", "run", "--ops", "matmul",
                        "--formats", "bfloat16", "--policies", "tc:h100,tc:v100", "--routes",
                        "forward", "--quiet", "--out", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    from roundoff_coverage import reports
    rows = reports.load(out)
    h100 = rows[rows.policy == "tc:h100"]
    v100 = rows[rows.policy == "tc:v100"]
    assert (h100.status == "ok").all() and len(h100) > 0
    assert (v100.status == "no_rule").all()
    assert v100.reason.str.contains("takes binary16 operands").all()


# ----- the a priori bound -------------------------------------------------------------------
def _exact_matmul(x, y):
    return np.array([[sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x[i], y[:, j])),
                          Fraction(0)) for j in range(y.shape[1])] for i in range(x.shape[0])])


@pytest.mark.parametrize("fmt,gpu,mode", [("bfloat16", "h100", "nearest_even"),
                                          ("binary16", "v100", "toward_zero"),
                                          ("float8_e4m3fn", "h100", "nearest_even"),
                                          ("float8_e5m2", "b200", "upward"),
                                          ("bfloat16", "a100", "downward")])
def test_apriori_bound_holds(fmt, gpu, mode):
    from roundoff_coverage import routes
    from roundoff_coverage.routes import apriori
    rng = np.random.default_rng(5)
    policy = numerics.preset(f"tc:{gpu}", fmt)
    o = routes.op("matmul", x_shape=(3, 70), y_shape=(70, 5))
    checked = 0
    for trial in range(4):
        # cancellation (signed terms), subnormal operands, magnitudes across the range
        x, y = _values(rng, fmt, (3, 70), 0.15), _values(rng, fmt, (70, 5), 0.15)
        if trial == 3:
            y[:, 0] = -y[:, 0]
            x[0, 35:] = -x[0, :35]
        b = apriori.bound(o, [x, y], fmt, mode, policy)
        got = numerics.emulated(fmt, mode, policy).matmul(x, y)
        exact = _exact_matmul(x, y)
        for g, e, bb in zip(got.ravel(), exact.ravel(), b.ravel()):
            if np.isfinite(g) and np.isfinite(bb):
                assert abs(Fraction(float(g)) - e) <= Fraction(float(bb)), (g, float(e), bb)
                checked += 1
    assert checked >= 15         # E4M3 results past 448 are NaN (fn): beyond the model


def _nearly_cancelling(fmt):
    """x (4, 32), y (32, 4): the second half of each row of x is the first half's next value,
    negated, against the same y: products that nearly cancel."""
    rng = np.random.default_rng(9)
    half = formats.round_to(1 + rng.random((4, 16)), fmt)
    x = np.concatenate([half, -formats.next_up(half, fmt)], axis=1)
    return x, np.tile(formats.round_to(1 + rng.random((16, 4)), fmt), (2, 1))


def test_fewer_alignment_bits_violate_the_bound():
    # A unit that keeps 14 bits fewer than binary32 where H100's bf16 path keeps 2 more: on
    # products that nearly cancel (the second half of each row is the first half's next
    # bfloat16 value, negated), its cut exceeds the bound stated for tc:h100.
    from roundoff_coverage import routes
    from roundoff_coverage.routes import apriori
    fmt = "bfloat16"
    x, y = _nearly_cancelling(fmt)
    b = apriori.bound(routes.op("matmul", x_shape=(4, 32), y_shape=(32, 4)), [x, y], fmt,
                      "nearest_even", numerics.preset("tc:h100", fmt))
    weak = tc.TensorCore("weak", {"bfloat16": tc.Datapath(16, -14)})
    got = formats.round_to(weak.matmul(x[None], y.T[None], "bfloat16")[0], fmt)
    exact = _exact_matmul(x, y)
    over = [abs(Fraction(float(g)) - e) > Fraction(float(bb))
            for g, e, bb in zip(got.ravel(), exact.ravel(), b.ravel())]
    assert any(over)
    # and H100's own path stays within it
    good = numerics.emulated(fmt, "nearest_even", "tc:h100").matmul(x, y)
    assert all(abs(Fraction(float(g)) - e) <= Fraction(float(bb))
               for g, e, bb in zip(good.ravel(), exact.ravel(), b.ravel()))


# ----- the per-sample enclosure (numerics.bounding) ------------------------------------------
@pytest.mark.parametrize("fmt,gpu", [("bfloat16", "h100"), ("binary16", "v100"),
                                     ("float8_e4m3fn", "h100"), ("float8_e5m2", "b200"),
                                     ("binary32", "a100"), ("bfloat16", "ada")])
def test_enclosure_holds_the_unit_and_the_exact_product(fmt, gpu):
    rng = np.random.default_rng(2)
    f = formats.get(fmt)
    for trial in range(4):
        x, y = _values(rng, fmt, (4, 50)), _values(rng, fmt, (50, 3))
        if trial == 1:                                  # subnormal operands
            x[:, :5] = formats.round_to(x[:, :5] * f.min_normal, fmt)
        if trial == 2:                                  # cancellation
            x[0, 25:] = -x[0, :25]
        got = numerics.emulated(fmt, "nearest_even", f"tc:{gpu}").matmul(x, y)
        bk = numerics.bounding(fmt, "nearest_even", f"tc:{gpu}")
        clo, chi, elo, ehi = bk.split(bk.matmul(bk.asarray(x), bk.asarray(y)))
        known = ~np.isnan(clo)
        assert known.sum() >= 6
        assert ((clo <= got) & (got <= chi))[known].all()
        exact = _exact_matmul(x, y)
        assert all(Fraction(float(lo)) <= e <= Fraction(float(hi))
                   for lo, hi, e, k in zip(elo.ravel(), ehi.ravel(), exact.ravel(),
                                           known.ravel()) if k)


def test_blackwell_binary16_outputs_have_their_own_floor():
    # 2**-25 + 2**-42 from fp16 products into a binary16 output (c = 0): the exact sum lies
    # just above half of binary16's least subnormal 2**-24, so to nearest it is 2**-24
    # (Hopper: E = -25, the quantum 2**-50 keeps both).  Blackwell aligns binary16 outputs
    # at no less than 2**-15: the quantum 2**-40 cuts 2**-42 away, the sum is the tie
    # 2**-25, and to nearest even it is 0.
    a = np.array([[2.0 ** -12, 2.0 ** -21]])
    b = np.array([[2.0 ** -13, 2.0 ** -21]])
    got = {g: tc.tensor_core(g).fma(a, b, [0.0], "binary16", "binary16")[0]
           for g in ("h100", "b200")}
    assert got == {"h100": 2.0 ** -24, "b200": 0.0}
    for g in ("h100", "b200"):
        core = tc.tensor_core(g)
        assert got[g] == oracle(core.paths["binary16"], a[0], b[0], 0.0, "binary16",
                                "binary16", floor=core.alignment_floor("binary16", "binary16"))
    # binary32 outputs keep the unit's floor
    assert tc.tensor_core("b200").alignment_floor("binary16") == -133
    with pytest.raises(ValueError, match="floor16"):
        tc.Datapath(16, 2, floor16=-15)                 # no binary16 outputs


def test_the_enclosure_follows_the_exponent_floor():
    # test_exponent_floor_alone's products as a binary32 matmul (the tf32 path; binary32
    # stores the subnormal result): point inputs give the unit's own value, 2**-149 under
    # Hopper's floor and 0 under Ampere's none.
    x = np.array([[2.0 ** -75, 2.0 ** -80]])
    y = np.array([[2.0 ** -74], [-(2.0 ** -79)]])
    for gpu, want in (("h100", 2.0 ** -149), ("a100", 0.0)):
        got = numerics.emulated("binary32", "nearest_even", f"tc:{gpu}").matmul(x, y)
        bk = numerics.bounding("binary32", "nearest_even", f"tc:{gpu}")
        clo, chi, _, _ = bk.split(bk.matmul(bk.asarray(x), bk.asarray(y)))
        assert got[0, 0] == clo[0, 0] == chi[0, 0] == want, (gpu, got, clo, chi)


def test_a_unit_that_cuts_more_falls_outside_the_enclosure():
    # Products that nearly cancel (as in the a priori test): point inputs give point
    # enclosures, the model's own value, which a unit keeping 14 bits fewer misses.
    fmt = "bfloat16"
    x, y = _nearly_cancelling(fmt)
    bk = numerics.bounding(fmt, "nearest_even", "tc:h100")
    clo, chi, _, _ = bk.split(bk.matmul(bk.asarray(x), bk.asarray(y)))
    weak = tc.TensorCore("weak", {"bfloat16": tc.Datapath(16, -14)})
    bad = formats.round_to(weak.matmul(x[None], y.T[None], fmt)[0], fmt)
    assert ((bad < clo) | (bad > chi)).any()


# ----- model runs -------------------------------------------------------------------------
def test_a_model_run_computes_its_products_as_the_gpu_does():
    # One matmul node under tc:a100 and tc:h100 in bfloat16, on products whose cut differs
    # (and so in the error): the propagated forward error is the
    # oracle's unit result, stored in bfloat16, against the exact product.
    from roundoff_coverage import routes
    from roundoff_coverage.engine import model as M
    from roundoff_coverage.routes.ports import value
    fmt = "bfloat16"
    rng = np.random.default_rng(4)
    # 1 - 1 leads each row: the alignment exponent 0 while the rest (products near 2**-20
    # with 16 significant bits) sums to about 2**-17, so each GPU's cut shows in bfloat16.
    x = formats.round_to((1 + rng.random((2, 16))) * 2.0 ** -10, fmt)
    w = formats.round_to((1 + rng.random((16, 3))) * 2.0 ** -10, fmt)
    x[:, :2], w[:2, :] = [1.0, -1.0], 1.0
    g = routes.Graph(x=value((2, 16)), w=value((16, 3)))
    g.output(g.apply(routes.op("matmul", x_shape=(2, 16), y_shape=(16, 3)), g.input("x"),
                     g.input("w"), name="mm"))
    exact = _exact_matmul(x, w)
    ulp = formats.ulp(np.array([float(e) for e in exact.ravel()]), fmt)
    wants = {}
    for gpu in ("a100", "h100"):
        rows, _, _ = M.measure(g, M.Config(fmt, "nearest_even", f"tc:{gpu}"), [[x, w]], 0,
                               ("forward",))
        path = tc.tensor_core(gpu).paths[fmt]
        unit = np.array([[oracle(path, x[i], w[:, j], 0.0, fmt, "binary32") for j in range(3)]
                         for i in range(2)])
        stored = formats.round_to(unit, fmt)
        wants[gpu] = max(float(abs(Fraction(float(s)) - e)) / u
                         for s, e, u in zip(stored.ravel(), exact.ravel(), ulp))
        row = next(r for r in rows if r["node"] == "mm" and r["route"] == "forward"
                   and r["attribution"] == "propagated")
        assert row["policy"] == f"tc:{gpu}"
        assert row["max_ulp"] == pytest.approx(wants[gpu], rel=1e-9)
    assert wants["a100"] != pytest.approx(wants["h100"], rel=1e-6)   # the data tells them apart


def test_blackwell_fp8_matmul_sums_exactly_across_63_binades():
    # 2**30 + 2**6 is a tie in binary32 (ulp 2**7 there); a product of 2**-32 (E5M2's least
    # subnormal squared) decides it: up with +2**-32, down to even with -2**-32.  The
    # kernel's fast sum cuts at 2**(E - 43), so this group takes its exact path.
    x = np.array([[2.0 ** 15, 2.0 ** 3, 2.0 ** -16], [2.0 ** 15, 2.0 ** 3, -(2.0 ** -16)]])
    y = np.array([[2.0 ** 15, 2.0 ** 3, 2.0 ** -16]])
    got = tc.tensor_core("b200").matmul(x[None], y[None], "float8_e5m2")[0, :, 0]
    assert list(got) == [2.0 ** 30 + 2.0 ** 7, 2.0 ** 30]
