"""Scaled formats (formats/scaled.py, formats/quantizer.py): MX, NVFP4, FP8 scaling.

The oracle is written here from the definitions (the OCP MX v1.0 conversion, NVIDIA's
NVFP4, FP8 per-tensor and blockwise scaling, each scale rule) with exact rationals and a
round-to-nearest-even onto a (precision, least exponent) grid of its own: it never calls
formats' rounding or ``formats.quantize``.  Every scheme at every scale rule, on random and
adversarial tensors, must agree with it bit for bit on both paths (fast and exact).
"""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest

from roundoff_coverage import formats
from conftest import load_error, run_cli as run

# ----- the oracle ---------------------------------------------------------------------------

# Element formats, from their definitions: significand bits p, least quantum 2**qmin, largest
# value, and the layout (exponent bits, mantissa bits, bias) of the code.
ELEMENTS = {
    "e4m3": dict(p=4, qmin=-9, top=F(448), e=4, m=3, bias=7, emax=8),      # 1.75 * 2**8
    "e5m2": dict(p=3, qmin=-16, top=F(57344), e=5, m=2, bias=15, emax=15),  # 1.75 * 2**15
    "e3m2": dict(p=3, qmin=-4, top=F(28), e=3, m=2, bias=3, emax=4),        # 1.75 * 2**4
    "e2m3": dict(p=4, qmin=-3, top=F(15, 2), e=2, m=3, bias=1, emax=2),     # 1.875 * 2**2
    "e2m1": dict(p=2, qmin=-1, top=F(6), e=2, m=1, bias=1, emax=2),         # 1.5 * 2**2
    "int8": dict(emax=0, top=F(127, 64)),                                   # k/64, k in [-128, 127]
}
# Scale formats: E8M0 = 2**-127..2**127; E4M3 (positive); binary32.
SCALES = {
    "e8m0": dict(p=1, qmin=-127, top=F(2) ** 127),
    "e4m3": dict(p=4, qmin=-9, top=F(448), e=4, m=3, bias=7, nan=0x7F),
    "b32": dict(p=24, qmin=-149, top=F(2**24 - 1) * F(2) ** 104, e=8, m=23, bias=127,
                nan=0x7FC00000),
}
SCHEMES = {
    "mxfp8_e4m3": dict(elem="e4m3", block=(32,), scale="e8m0", rule="floor"),
    "mxfp8_e5m2": dict(elem="e5m2", block=(32,), scale="e8m0", rule="floor"),
    "mxfp6_e3m2": dict(elem="e3m2", block=(32,), scale="e8m0", rule="floor"),
    "mxfp6_e2m3": dict(elem="e2m3", block=(32,), scale="e8m0", rule="floor"),
    "mxfp4_e2m1": dict(elem="e2m1", block=(32,), scale="e8m0", rule="floor"),
    "mxint8": dict(elem="int8", block=(32,), scale="e8m0", rule="floor"),
    "nvfp4": dict(elem="e2m1", block=(16,), scale="e4m3", rule="even", tensor=True,
                  scale_sat=True),
    "fp8_e4m3_tensor": dict(elem="e4m3", block=None, scale="b32", rule="even"),
    "fp8_e5m2_tensor": dict(elem="e5m2", block=None, scale="b32", rule="even"),
    "fp8_e4m3_block128": dict(elem="e4m3", block=(128,), scale="b32", rule="even"),
    "fp8_e4m3_block128x128": dict(elem="e4m3", block=(128, 128), scale="b32", rule="even"),
}
RULES = ("floor", "ceil", "rceil", "even")


def log2_floor(v: F) -> int:
    e = v.numerator.bit_length() - v.denominator.bit_length()
    return e if F(2) ** e <= v else e - 1


def to_grid(v: F, p: int, qmin: int, up: bool = False) -> F:
    """v >= 0 rounded onto {n * 2**q : q >= qmin, n < 2**p at its binade}, exponent
    unbounded above: to nearest, ties to the even n (or upward)."""
    if v == 0:
        return F(0)
    q = max(log2_floor(v) - p + 1, qmin)
    t = v / F(2) ** q
    n = t.numerator // t.denominator
    rem = t - n
    if up:
        n += rem > 0
    else:
        n += rem > F(1, 2) or (rem == F(1, 2) and n % 2 == 1)
    return n * F(2) ** q


def encode(v: F, sign: int, f: dict) -> int:
    """The code of |v| = v on the grid of f, sign bit ``sign``."""
    if v == 0:
        field, frac = 0, 0
    elif v >= F(2) ** (1 - f["bias"]):
        ex = log2_floor(v)
        field, frac = ex + f["bias"], int(v / F(2) ** ex * 2 ** f["m"]) - 2 ** f["m"]
    else:
        field, frac = 0, int(v / F(2) ** (1 - f["bias"] - f["m"]))
    return (sign << (f["e"] + f["m"])) | (field << f["m"]) | frac


def read(x) -> F | str:
    """An input element: a Fraction, or 'nan' / 'inf' / '-inf'; '-0' for negative zero."""
    if isinstance(x, F):
        return x
    if isinstance(x, str):
        return F(x)                                      # a decimal string, exactly
    x = float(x)                                         # floats; mpmath's 53-bit mpf exactly
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0 and math.copysign(1, x) < 0:
        return "-0"
    return F(x)


def oracle_scheme(name: str) -> dict:
    """The oracle's view of a scheme name with options."""
    base, *opts = name.split(":")
    s = dict(SCHEMES[base], pow2=False, stochastic=False, delayed=False, margin=0, sat=True)
    rule_given = False
    for o in opts:
        if o in RULES:
            s["rule"], rule_given = o, True
        elif o == "pow2":
            s["pow2"] = True
        elif o == "stochastic":
            s["stochastic"] = True
        elif o == "delayed":
            s["delayed"] = True
        elif o.startswith("margin="):
            s["margin"] = int(o[7:])
        elif o == "nosat":
            s["sat"] = False
    if s["pow2"] and not rule_given:
        s["rule"] = "rceil"
    return s


def oracle_scale(a, s: dict):
    """The scale from a = amax * 2**margin / tensor_scale (None: NaN): a Fraction or None."""
    if a is None:
        return None
    sf, el = SCALES[s["scale"]], ELEMENTS[s["elem"]]
    pow2 = s["scale"] == "e8m0" or s["pow2"] or s["rule"] in ("floor", "ceil")
    least = F(2) ** sf["qmin"]
    top = F(2) ** log2_floor(sf["top"]) if pow2 else sf["top"]
    if a == 0:
        return least
    if s["rule"] in ("floor", "ceil"):
        e = log2_floor(a)
        if s["rule"] == "ceil" and a != F(2) ** e:
            e += 1
        x = max(F(2) ** (e - el["emax"]), least)
    else:
        p = 1 if pow2 else sf["p"]
        x = to_grid(a / el["top"], p, sf["qmin"], up=s["rule"] == "rceil")
        x = x if x else least
    if x > top:
        return top if s.get("scale_sat") else None
    return x


def oracle_scale_code(x, s: dict) -> int:
    sf = SCALES[s["scale"]]
    if s["scale"] == "e8m0":
        return 0xFF if x is None else log2_floor(x) + 127
    return sf["nan"] if x is None else encode(x, 0, sf)


def oracle_element(v, d: F, s: dict):
    """(value, code) of the element v / d rounded to nearest even, saturating."""
    el = ELEMENTS[s["elem"]]
    if s["elem"] == "int8":
        if v in ("nan", "inf", "-inf"):
            raise AssertionError("specials never reach int8 elements under a finite scale")
        if v == "-0":
            return 0.0, 0
        k = to_grid(abs(v / d) * 64, 60, 0)          # an integer, ties to even
        k = -k if v < 0 else k
        k = int(min(max(k, F(-128)), F(127)))
        return k / 64, k & 0xFF
    bits = 1 + el["e"] + el["m"]
    if v == "nan":
        return math.nan, None                          # checked as NaN, any NaN code
    if v in ("inf", "-inf"):
        sign = int(v == "-inf")
        r = el["top"]
        if not s["sat"]:
            return (math.nan, None) if s["elem"] == "e4m3" else \
                (-math.inf if sign else math.inf, (sign << (bits - 1)) | (31 << 2))
        return float(-r if sign else r), encode(r, sign, el)
    if v == "-0":
        return -0.0, 1 << (bits - 1)
    q = v / d
    sign = int(q < 0)
    r = to_grid(abs(q), el["p"], el["qmin"])
    if r > el["top"]:
        if not s["sat"]:
            return (math.nan, None) if s["elem"] == "e4m3" else \
                (-math.inf if sign else math.inf, (sign << (bits - 1)) | (31 << 2))
        r = el["top"]
    return -float(r) if sign else float(r), encode(r, sign, el)


def oracle(x: np.ndarray, name: str, history=None):
    """(elements, element codes, scales, scale codes, tensor scale) of a 2-D x: 1-D blocks
    along the last axis, 2-D blocks over both, per-tensor over all."""
    s = oracle_scheme(name)
    rows, cols = x.shape
    vals = [[read(v) for v in row] for row in x.tolist()]
    margin = F(2) ** s["margin"]

    def amax(cells):
        top = F(0)
        for v in cells:
            if v in ("nan", "inf", "-inf"):
                return None
            if v != "-0":
                top = max(top, abs(v))
        return top

    sg = F(1)
    if s.get("tensor"):
        # NVFP4: amax / (448 * 6); under a power-of-two rule the largest block scale is
        # 256, so amax / (256 * 6).
        top = 256 if s["pow2"] or s["rule"] in ("floor", "ceil") else 448
        a = amax(v for row in vals for v in row)
        sg = None if a is None else to_grid(a / (top * 6), 24, -149)
        if sg is not None:
            sg = sg if sg else F(2) ** -149
            sg = None if sg > SCALES["b32"]["top"] else sg
    kr, kc = (rows, cols) if s["block"] is None else \
        (1, s["block"][0]) if len(s["block"]) == 1 else s["block"]
    kr, kc = max(kr, 1), max(kc, 1)
    ntr, ntc = -(-rows // kr), -(-cols // kc)
    out = np.zeros((rows, cols))
    codes = np.zeros((rows, cols), dtype=np.int64)
    nan_codes = np.zeros((rows, cols), dtype=bool)
    scales = np.zeros((ntr, ntc))
    scodes = np.zeros((ntr, ntc), dtype=np.int64)
    for tr in range(ntr):
        for tc in range(ntc):
            cells = [(r, c) for r in range(tr * kr, min(rows, tr * kr + kr))
                     for c in range(tc * kc, min(cols, tc * kc + kc))]
            if s["delayed"]:
                a = max(F(h) for h in history)
            else:
                a = amax(vals[r][c] for r, c in cells)
            a = None if a is None or sg is None else a * margin / sg
            x_scale = oracle_scale(a, s)
            scales[tr, tc] = math.nan if x_scale is None else float(x_scale)
            scodes[tr, tc] = oracle_scale_code(x_scale, s)
            for r, c in cells:
                if x_scale is None:
                    continue
                out[r, c], code = oracle_element(vals[r][c], x_scale * sg, s)
                nan_codes[r, c] = code is None
                codes[r, c] = 0 if code is None else code
    ts = None if not s.get("tensor") else (math.nan if sg is None else float(sg))
    return out, codes, nan_codes, scales, scodes, ts


# ----- tensors ------------------------------------------------------------------------------------

def shape_for(name):
    block = SCHEMES[name.split(":")[0]]["block"]
    return {None: (7, 45), (32,): (11, 70), (16,): (11, 37), (128,): (11, 300),
            (128, 128): (131, 133)}[block]


def adversarial(name: str, seed: int) -> np.ndarray:
    """One kind of trouble per row: random values over wide ranges (0), one huge value (1),
    zeros (2), Inf (3), NaN (4), the element max and rounding ties at a scale (5), float64
    (6) and binary32 (7) subnormals, values past E8M0's range (8), integers (9), powers of
    two (10: an amax on a binade's edge, where floor and ceil agree).  A
    per-tensor scheme gets the moderate kinds only (one Inf would make the whole tensor
    NaN); a 128 x 128 tile gets moderate rows, its neighbour tile huge values, and the
    last rows Inf and NaN."""
    rng = np.random.default_rng(seed)
    rows, cols = shape_for(name)
    scheme = SCHEMES[name.split(":")[0]]
    el = ELEMENTS[scheme["elem"]]
    x = rng.standard_normal((rows, cols)) * 10.0 ** rng.uniform(-3, 3, (rows, 1))
    if el.get("p"):
        grid = sorted({float(to_grid(F(m, 64) * F(2) ** k, el["p"], el["qmin"]))
                       for m in range(64, 128) for k in range(el["qmin"], el["emax"] + 1)})
        grid = [g for g in grid if g <= el["top"]]
    else:
        grid = [k / 64 for k in range(128)]
    ties = [(a + b) / 2 for a, b in zip(grid, grid[1:])]
    if scheme["block"] is None:
        kinds = [0, 2, 5, 6, 9, 5, 10]
    elif scheme["block"] == (128, 128):
        kinds = [[0, 5, 9, 2, 6, 7, 10, 0][(r // 16) % 8] for r in range(128)] + [3, 4, 0]
    else:
        kinds = [r % 11 for r in range(rows)]
    j_fixed = scheme["block"] is None or scheme["block"] == (128, 128)
    for r, kind in enumerate(kinds):
        j = 3 if j_fixed else int(rng.integers(-20, 20))
        if kind == 1:
            x[r, rng.integers(cols)] = 1e30 * rng.choice([-1, 1])
        elif kind == 2:
            x[r] = 0.0
            x[r, ::3] = -0.0
        elif kind == 3:
            x[r, rng.integers(cols)] = rng.choice([np.inf, -np.inf])
        elif kind == 4:
            x[r, rng.integers(cols)] = np.nan
        elif kind == 5:
            x[r] = rng.choice(ties + grid, cols) * rng.choice([-1, 1], cols) * 2.0 ** j
            x[r, ::16] = float(el["top"]) * 2.0 ** j
        elif kind == 6:
            x[r] = rng.integers(-2**20, 2**20, cols) * 2.0**-1074
        elif kind == 7:
            x[r] = rng.integers(-2**23, 2**23, cols) * 2.0**-149
        elif kind == 8:
            x[r] = rng.standard_normal(cols) * 2.0 ** rng.integers(120, 140)
        elif kind == 9:
            x[r] = rng.integers(-1000, 1000, cols)
        elif kind == 10:
            x[r] = rng.choice([-1, 1], cols) * 2.0 ** rng.integers(j - 6, j + 1, cols)
    if scheme["block"] == (128, 128):
        x[:128, 128:] = rng.standard_normal((128, cols - 128)) * 2.0**130
        x[5, 130] = 1e30
    return x


def assert_same(got, want, name):
    elements, codes, nan_codes, scales, scodes, ts = want
    assert np.array_equal(got.scales, scales, equal_nan=True), name
    assert np.array_equal(got.scale_bits.astype(np.int64), scodes), name
    assert np.array_equal(got.elements, elements, equal_nan=True), name
    assert np.array_equal(np.signbit(got.elements), np.signbit(elements)), name
    assert np.array_equal(np.where(nan_codes, 0, got.element_bits.astype(np.int64)), codes), name
    if ts is None:
        assert got.tensor_scale is None
    else:
        assert got.tensor_scale == ts or (math.isnan(ts) and math.isnan(got.tensor_scale))


def same_result(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True) and
               getattr(a, k).dtype == getattr(b, k).dtype
               for k in ("elements", "element_bits", "scales", "scale_bits")) \
        and np.array_equal(np.signbit(a.elements), np.signbit(b.elements)) \
        and (a.tensor_scale == b.tensor_scale or (a.tensor_scale != a.tensor_scale and
                                                  b.tensor_scale != b.tensor_scale)) \
        and a.tensor_scale_bits == b.tensor_scale_bits and a.axis == b.axis


CASES = [f"{base}:{rule}" for base in SCHEMES for rule in RULES]


@pytest.mark.parametrize("name", CASES, ids=[c.replace(":", "-") for c in CASES])
def test_every_scheme_and_rule_matches_the_oracle_on_both_paths(name):
    x = adversarial(name, seed=len(name))
    fast = formats.quantize(x, name, path="fast")
    exact = formats.quantize(x, name, path="exact")
    assert same_result(fast, exact)
    assert_same(fast, oracle(x, name), name)
    # binary32 input, random values (a smaller tensor for 128 x 128 tiles).
    shape = (129, 20) if SCHEMES[name.split(":")[0]]["block"] == (128, 128) else \
        shape_for(name)
    y = (np.random.default_rng(3).standard_normal(shape) *
         10.0 ** np.random.default_rng(4).uniform(-30, 30, (shape[0], 1))).astype(np.float32)
    fast = formats.quantize(y, name)
    assert same_result(fast, formats.quantize(y, name, path="exact"))
    assert_same(fast, oracle(y.astype(np.float64), name), name)


OPTION_CASES = ["fp8_e4m3_tensor:pow2", "fp8_e4m3_block128:pow2", "fp8_e5m2_tensor:margin=2",
                "fp8_e4m3_block128x128:even:pow2", "mxfp8_e5m2:nosat", "mxfp8_e4m3:nosat",
                "fp8_e4m3_tensor:nosat", "nvfp4:margin=1"]


@pytest.mark.parametrize("name", OPTION_CASES, ids=[c.replace(":", "-") for c in OPTION_CASES])
def test_options_match_the_oracle(name):
    x = adversarial(name, seed=11)
    fast = formats.quantize(x, name, path="fast")
    assert same_result(fast, formats.quantize(x, name, path="exact"))
    assert_same(fast, oracle(x, name), name)


@pytest.mark.parametrize("history", [[1.0, 300.0, 2.5], [0.0], [F(1, 3), "1e-3"]])
def test_delayed_scaling_uses_the_history_max(history):
    name = "fp8_e4m3_tensor:delayed:margin=1"
    x = adversarial(name, seed=5)
    x[3] = 0.0                                          # no Inf/NaN: they saturate or stay
    x[4] = np.linspace(-1000, 1000, x.shape[1])
    fast = formats.quantize(x, name, history=history)
    assert same_result(fast, formats.quantize(x, name, history=history, path="exact"))
    want = oracle(x, name, history=[F(read(h)) if not isinstance(h, str) else F(h)
                                    for h in history])
    assert_same(fast, want, name)
    with pytest.raises(ValueError, match="history"):
        formats.quantize(x, name)
    with pytest.raises(ValueError, match="delayed"):
        formats.quantize(x, "fp8_e4m3_tensor", history=[1.0])


# ----- conventions, each pinned -------------------------------------------------------------------

def test_mx_scale_is_nan_above_2_to_127_and_clamped_below():
    x = np.zeros((3, 32))
    x[0, 0] = 2.0**140                                  # shared_exp = 140 - 8 > 127: NaN
    x[1, :] = 2.0**-140                                 # shared_exp = -148 < -127: 2**-127
    x[2, 0] = 2.0**135                                  # 135 - 8 = 127: the largest scale
    q = formats.quantize(x, "mxfp8_e4m3")
    assert np.isnan(q.scales[0, 0]) and q.scale_bits[0, 0] == 0xFF
    assert q.scales[1, 0] == 2.0**-127 and q.scale_bits[1, 0] == 0
    assert q.scales[2, 0] == 2.0**127 and q.scale_bits[2, 0] == 254
    assert np.isnan(q.dequantize()[0]).all() and (q.element_bits[0] == 0).all()
    # 2**-140 / 2**-127 = 2**-13 is below e4m3's least subnormal 2**-9: zero.
    assert (q.elements[1] == 0).all()


def test_a_zero_block_gets_the_least_scale():
    q = formats.quantize(np.zeros((2, 40)), "mxfp4_e2m1")
    assert (q.scales == 2.0**-127).all() and (q.scale_bits == 0).all()
    n = formats.quantize(np.zeros(16), "nvfp4")
    assert n.tensor_scale == 2.0**-149 and n.scales[0] == 2.0**-9
    assert (n.dequantize() == 0).all()


def test_a_per_tensor_scale_past_binary32_or_from_inf_is_nan():
    x = np.ones((2, 3))
    x[0, 0] = 2.0**140                                   # d = 2**140 / 448 > binary32's max
    q = formats.quantize(x, "fp8_e4m3_tensor")
    assert np.isnan(q.scales).all() and q.scale_bits.reshape(-1)[0] == 0x7FC00000
    x[0, 0] = -np.inf
    assert np.isnan(formats.quantize(x, "fp8_e5m2_tensor").dequantize()).all()


def test_a_block_with_inf_or_nan_is_nan():
    x = np.ones((2, 32))
    x[0, 5], x[1, 7] = np.inf, np.nan
    q = formats.quantize(x, "mxfp8_e5m2")
    assert np.isnan(q.dequantize()).all() and (q.scale_bits == 0xFF).all()
    n = formats.quantize(np.r_[np.ones(31), np.inf], "nvfp4")
    assert math.isnan(n.tensor_scale) and np.isnan(n.dequantize()).all()


def test_even_rule_on_e8m0_breaks_ties_upward():
    # a / 448 = 1.5 * 2**-2 lies halfway between 2**-2 and 2**-1: the scale is 2**-1.
    x = np.zeros(32)
    x[0] = 1.5 * 2**-2 * 448
    assert formats.quantize(x, "mxfp8_e4m3:even").scales[0] == 0.5
    x[0] = np.nextafter(1.5 * 2**-2 * 448, 0)
    assert formats.quantize(x, "mxfp8_e4m3:even").scales[0] == 0.25


def test_floor_rule_saturates_the_block_max_and_rceil_does_not():
    x = np.zeros(32)
    x[0] = 500.0                                        # floor: X = 1, 500 clamps to 448
    assert formats.quantize(x, "mxfp8_e4m3").dequantize()[0] == 448.0
    assert formats.quantize(x, "mxfp8_e4m3:rceil").dequantize()[0] == 512.0   # X = 2
    assert formats.quantize(x, "mxfp8_e4m3:ceil").scales[0] == 2.0


def test_mxint8_is_twos_complement_down_to_minus_two():
    x = np.zeros(32)
    x[0], x[1], x[2], x[3] = -1.999, 1.999, 2.5 / 64, -2**-7   # amax in [1, 2): X = 1
    q = formats.quantize(x, "mxint8")
    assert q.scales[0] == 1.0
    assert list(q.elements[:4]) == [-2.0, 127 / 64, 2 / 64, 0.0]       # ties to even
    assert list(q.element_bits[:4]) == [0x80, 0x7F, 0x02, 0x00]


def test_nosat_overflow_follows_the_element_format():
    x = np.zeros(32)
    x[0], x[1] = 500.0, -500.0                           # floor: X = 1, beyond 448
    q = formats.quantize(x, "mxfp8_e4m3:nosat")
    assert np.isnan(q.elements[:2]).all() and q.element_bits[0] == 0x7F
    y = np.zeros(32)
    y[0] = 2.0**15 * 1.9                                 # e5m2: X = 1, rounds past 57344
    q = formats.quantize(y, "mxfp8_e5m2:nosat")
    assert q.elements[0] == np.inf and q.element_bits[0] == 0x7C
    assert formats.quantize(y, "mxfp8_e5m2").elements[0] == 57344.0


def test_subnormal_inputs_are_read_exactly_not_flushed():
    x = np.full(32, 2.0**-1074)
    x[0] = 2.0**-1070                                    # the MX scale clamps to 2**-127
    q = formats.quantize(x, "fp8_e4m3_tensor")           # binary32 scale: 2**-149 (least)
    assert q.scales.reshape(-1)[0] == 2.0**-149
    assert formats.quantize(x, "fp8_e4m3_tensor", path="exact").scales.reshape(-1)[0] == \
        2.0**-149
    y = np.full(16, 3 * 2.0**-149, dtype=np.float32)     # binary32 subnormals: NVFP4 keeps them
    n = formats.quantize(y, "nvfp4")
    assert (n.dequantize() != 0).all()


def test_a_partial_last_block_is_padded_with_zeros():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 50))
    padded = np.concatenate([x, np.zeros((3, 14))], axis=1)
    for name in ("mxfp6_e2m3", "nvfp4:rceil", "fp8_e4m3_block128"):
        a, b = formats.quantize(x, name), formats.quantize(padded, name)
        assert np.array_equal(a.elements, b.elements[:, :50])
        assert np.array_equal(a.scales, b.scales[:, :a.scales.shape[1]])
        assert a.scales.shape == (3, -(-50 // formats.get(name).block[0]))


def test_axis_picks_the_block_axis():
    x = np.random.default_rng(1).standard_normal((40, 6, 3))
    a = formats.quantize(x, "mxfp8_e4m3", axis=0)
    b = formats.quantize(np.moveaxis(x, 0, -1), "mxfp8_e4m3")
    assert a.axis == (0,) and a.scales.shape == (2, 6, 3)
    assert np.array_equal(a.elements, np.moveaxis(b.elements, -1, 0))
    assert np.array_equal(a.scales, np.moveaxis(b.scales, -1, 0))
    w = np.random.default_rng(2).standard_normal((5, 130, 129))
    c = formats.quantize(w, "fp8_e4m3_block128x128")
    assert c.axis == (1, 2) and c.scales.shape == (5, 2, 2)
    d = formats.quantize(np.swapaxes(w, 0, 1), "fp8_e4m3_block128x128", axis=(0, 2))
    assert np.array_equal(np.swapaxes(d.elements, 0, 1), c.elements)
    with pytest.raises(ValueError, match="axis"):
        formats.quantize(w, "mxfp8_e4m3", axis=3)


def test_exact_path_takes_any_real():
    import mpmath
    values = [F(1, 3), "0.7", mpmath.mpf(2) / 3, 5, F(-449, 1000)] + [0] * 27
    q = formats.quantize(values, "mxfp8_e4m3")
    want = oracle(np.array([values], dtype=object), "mxfp8_e4m3")
    assert q.scales[0] == want[3][0, 0]
    assert np.array_equal(q.elements, want[0][0])
    assert list(q.element_bits) == list(want[1][0])


def test_dequantize_is_the_exact_product():
    x = np.random.default_rng(5).standard_normal((4, 64)) * 1e3
    for name in ("nvfp4", "mxint8", "fp8_e5m2_tensor"):
        q = formats.quantize(x, name)
        full = q.dequantize()
        t = F(1) if q.tensor_scale is None else F(q.tensor_scale)
        s = np.broadcast_to(q.scales, x.shape) if q.axis is None else \
            np.repeat(q.scales, formats.get(name).block[0], axis=1)[:, :64]
        for e, sc, v in zip(q.elements.reshape(-1), s.reshape(-1), full.reshape(-1)):
            assert F(v) == F(e) * F(sc) * t


def test_dequantize_beyond_binary64_gives_fractions(tmp_path):
    path = tmp_path / "wide.toml"
    path.write_text('[scaled.wide]\nelement = "e8m30"\nblock = 4\nscale = "binary32"\n'
                    'rule = "even"\n')
    fmt = formats.load_formats_file(path)["wide"]
    assert not fmt.products_fit_binary64                     # 31 + 24 significant bits
    q = formats.quantize(np.array([1e-30, 3.0, 1 / 3, 7.0]), fmt)
    d = q.dequantize()
    assert d.dtype == object and d[2] == F(q.elements[2]) * F(q.scales[0])


# ----- stochastic rounding ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mxfp8_e4m3:stochastic", "nvfp4:stochastic",
                                  "fp8_e4m3_block128:stochastic", "mxint8:stochastic"])
def test_stochastic_elements_are_a_neighbour_and_match_on_both_paths(name):
    x = adversarial(name.split(":")[0], seed=9)
    x[3:5] = 0.0                                          # no Inf/NaN rows here
    fast = formats.quantize(x, name, seed=123)
    assert same_result(fast, formats.quantize(x, name, seed=123, path="exact"))
    nearest = oracle(x, name.split(":")[0])
    assert np.array_equal(fast.scales, nearest[3], equal_nan=True)
    # Each element is the nearest value or its neighbour toward the exact quotient.
    s = oracle_scheme(name)
    kb = s["block"][0]
    scales = np.repeat(nearest[3], kb, axis=1)[:, :x.shape[1]]
    ts = 1.0 if nearest[5] is None else nearest[5]
    for v, e, sc in zip(x.reshape(-1), fast.elements.reshape(-1), scales.reshape(-1)):
        if math.isnan(sc) or v == 0:
            continue
        quotient = F(v) / (F(sc) * F(ts))
        el = ELEMENTS[s["elem"]]
        if s["elem"] == "int8":
            lo, hi = math.floor(quotient * 64) / 64, math.ceil(quotient * 64) / 64
            lo, hi = max(lo, -2.0), min(hi, 127 / 64)
        else:
            mag = abs(quotient)
            q = max(log2_floor(mag) - el["p"] + 1, el["qmin"])
            down = min(F(math.floor(mag / F(2) ** q)) * F(2) ** q, el["top"])
            up = min(down + F(2) ** q, el["top"])
            lo, hi = (float(-up), float(-down)) if quotient < 0 else (float(down), float(up))
        assert lo <= e <= hi, (v, e, lo, hi)
    assert not same_result(fast, formats.quantize(x, name, seed=124))


def test_stochastic_rounding_is_unbiased():
    # Blocks of 16 with amax 6 * 2**k (so s_block * s_global is not a power of two) and
    # 15 copies of a value between two e2m1 neighbours: the mean lands on the value.
    x = np.tile(np.r_[6.0, np.full(15, 2.3)], 2000) * 1.37
    q = formats.quantize(x, "nvfp4:stochastic", seed=7)
    d = q.dequantize().reshape(2000, 16)[:, 1:]
    assert abs(d.mean() / (2.3 * 1.37) - 1) < 5e-3
    assert len(set(d.reshape(-1).tolist())) == 2


# ----- names, get, the catalog --------------------------------------------------------------------

def test_get_returns_scaled_formats_and_keeps_element_formats():
    assert isinstance(formats.get("mxfp8_e4m3"), formats.ScaledFormat)
    assert formats.get("MXFP8_E4M3:RCEIL") == formats.get("mxfp8_e4m3:rceil")
    assert formats.get("mxfp8_e4m3:floor") == formats.get("mxfp8_e4m3")
    assert formats.get("mxfp8_e4m3:rceil").label == "mxfp8_e4m3:rceil"
    assert formats.get("fp8_e4m3_block128:pow2").rule == "rceil"
    assert formats.get("fp8_e4m3_tensor:delayed:margin=2").label == \
        "fp8_e4m3_tensor:delayed:margin=2"
    for name in formats.SCALED:
        fmt = formats.get(name)
        assert formats.get(fmt.label) == fmt and formats.get(fmt) is fmt
    assert formats.get("float8_e4m3fn") is formats.CATALOG["float8_e4m3fn"]
    assert isinstance(formats.get("e4m3fn"), formats.BinaryFormat)
    assert isinstance(formats.get("exp_bits=5,man_bits=2,encoding=fnuz"), formats.BinaryFormat)


@pytest.mark.parametrize("spec,fragment", [
    ("mxfp8_e4m3:bogus", "unknown option 'bogus'"),
    ("mxfp4_e2m1:nosat", "always saturates"),
    ("mxfp8_e4m3:pow2", "powers of two already"),
    ("mxfp8_e4m3:delayed", "per-tensor"),
    ("fp8_e4m3_tensor:margin=x", "margin must be an integer"),
    ("mxfp8_e4m4", "close: mxfp8_e4m3"),
])
def test_bad_scaled_names_are_one_line_errors(spec, fragment):
    with pytest.raises(formats.FormatError) as info:
        formats.get(spec)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_element_format_code_refuses_a_scaled_format_clearly():
    fmt = formats.get("nvfp4")
    with pytest.raises(formats.FormatError, match="not yet supported.*formats.quantize"):
        formats.round_to(np.ones(3), fmt)
    with pytest.raises(formats.FormatError, match="scaled format"):
        _ = fmt.precision
    assert not hasattr(fmt, "spec") and hasattr(fmt, "label")
    with pytest.raises(ValueError, match="element format"):
        formats.quantize(np.ones(3), "bfloat16")


def test_user_scaled_formats_from_the_toml_file(tmp_path):
    path = tmp_path / "formats.toml"
    path.write_text(
        '[formats.e3m3]\nexp_bits = 3\nman_bits = 3\nencoding = "finite"\n'
        '[scaled.mx_e3m3]\nelement = "e3m3"\nblock = 8\nscale = "e8m0"\nrule = "rceil"\n'
        '[scaled.nv_up]\nbase = "nvfp4"\nrule = "rceil"\n')
    known = formats.load_formats_file(path)
    mine = formats.get("mx_e3m3", known=known)
    assert isinstance(mine, formats.ScaledFormat) and mine.block == (8,)
    assert formats.get("mx_e3m3:even", known=known).rule == "even"
    assert formats.get("nv_up", known=known) == formats.get("nvfp4:rceil")
    x = np.random.default_rng(0).standard_normal((3, 20))
    q = formats.quantize(x, mine)
    assert same_result(q, formats.quantize(x, mine, path="exact"))
    # e3m3 finite: bias 3, max 1.875 * 2**4 = 30: rceil gives 2**ceil(log2(amax / 30)).
    a = F(float(np.max(np.abs(x[0, :8])))) / 30
    k = log2_floor(a) + (a != F(2) ** log2_floor(a))
    assert q.scales[0, 0] == F(2) ** k


@pytest.mark.parametrize("text,fragment", [
    ('[scaled.x]\nelement = "e4m3fn"\n', "missing block, scale"),
    ('[scaled.x]\nelement = "e4m3fn"\nblock = 0\nscale = "e8m0"\n', "block must be"),
    ('[scaled.x]\nbase = "nope"\n', "base must name"),
    ('[scaled.x]\nbase = "nvfp4"\nfoo = 1\n', "unknown key 'foo'"),
    ('[scaled.nvfp4]\nbase = "nvfp4"\n', "already a format name"),
    ('[scaled.x]\nbase = "nvfp4"\nrule = "up"\n', "rule must be one of"),
])
def test_bad_scaled_tables_are_one_line_errors(tmp_path, text, fragment):
    assert fragment in load_error(formats.load_formats_file, tmp_path / "f.toml", text,
                                  formats.FormatError)


# ----- the command line ---------------------------------------------------------------------------

def test_cli_formats_explains_a_scaled_format(capsys):
    status, out, err = run(capsys, "formats", "mxfp8_e4m3:rceil")
    assert status == 0 and err == ""
    assert out.startswith("mxfp8_e4m3:rceil:")
    for fragment in ("float8_e4m3fn", "element_max", "448", "32", "E8M0", "rceil",
                     "scale_min", "2**-127", "scale_max", "2**127", "OCP Microscaling"):
        assert fragment in out, fragment
    status, out, _ = run(capsys, "formats", "nvfp4")
    assert status == 0 and "binary32" in out and "16" in out and "NVFP4" in out


def test_cli_formats_lists_scaled_formats(capsys):
    status, out, _ = run(capsys, "formats")
    assert status == 0
    for name in formats.SCALED:
        assert name in out


def test_cli_formats_user_scaled_format(capsys, tmp_path):
    path = tmp_path / "f.toml"
    path.write_text('[scaled.mine]\nbase = "mxfp4_e2m1"\nrule = "even"\n')
    status, out, _ = run(capsys, "formats", "mine", "--formats-file", str(path))
    assert status == 0 and "user" in out and "even" in out
    status, out, _ = run(capsys, "formats", "--formats-file", str(path))
    assert status == 0 and "mine" in out


@pytest.mark.parametrize("argv,fragment", [
    (["formats", "mxfp8_e4m3:nope"], "unknown option 'nope'"),
    # run takes scaled formats now (tests/engine/test_run_scaled.py); a bad option is still refused.
    (["run", "--ops", "exp", "--formats", "mxfp8_e4m3:bogus", "--samples", "1", "--quiet"],
     "unknown option 'bogus'"),
])
def test_cli_scaled_format_errors_are_one_line(capsys, argv, fragment, tmp_path,
                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, *argv)
    assert status == 2 and len(err.splitlines()) == 1 and fragment in err, err


# ----- gfloat (graphcore-research/gfloat), an independent MX implementation --------------------

GFLOAT_MX = {"mxfp8_e4m3": "format_info_mxfp8_e4m3", "mxfp8_e5m2": "format_info_mxfp8_e5m2",
             "mxfp6_e3m2": "format_info_mxfp6_e3m2", "mxfp6_e2m3": "format_info_mxfp6_e2m3",
             "mxfp4_e2m1": "format_info_mxfp4_e2m1", "mxint8": "format_info_mxint8"}


def gfloat_mx(x: np.ndarray, name: str) -> np.ndarray:
    gfloat = pytest.importorskip("gfloat", reason="gfloat is not installed (pip install gfloat)")
    import gfloat.formats
    fi = getattr(gfloat.formats, GFLOAT_MX[name])
    return np.concatenate([gfloat.quantize_block(fi, x[i:i + 32], gfloat.compute_scale_amax)
                           for i in range(0, x.size, 32)])


@pytest.mark.parametrize("name", list(GFLOAT_MX))
def test_mx_matches_gfloat_on_random_tensors(name):
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(32 * 40) * np.repeat(10.0 ** rng.uniform(-30, 30, 40), 32)
    x[:32] = 0.0                                          # an all-zero block: 2**-127 in both
    x[40:60] = 2.0**-1074 * rng.integers(1, 100, 20)      # subnormal inputs
    ours = formats.quantize(x, name).dequantize()
    assert np.array_equal(ours, gfloat_mx(x, name))


def test_gfloat_differences_are_pinned():
    # gfloat clamps the scale to 2**127 and saturates where we (with the MX reference
    # implementation) return a NaN scale: a block holding an Inf, and a block whose
    # shared_exp passes 127.
    x = np.r_[np.inf, np.ones(31), 1e300, np.ones(31)]
    theirs = gfloat_mx(x, "mxfp8_e4m3")
    ours = formats.quantize(x, "mxfp8_e4m3").dequantize()
    assert theirs[0] == 448 * 2.0**127 and theirs[32] == 448 * 2.0**127
    assert np.isnan(ours).all()
    # A NaN in the block: NaN in both.
    y = np.r_[np.nan, np.ones(31)]
    assert np.isnan(gfloat_mx(y, "mxfp8_e4m3")).all()
    assert np.isnan(formats.quantize(y, "mxfp8_e4m3").dequantize()).all()
