"""Masks and random draws (spec: "Masks and random draws, each draw under a key, with the mask
of dropout an input"): dropout, topKMask, bernoulliMask, randUniform, randn.

The generator is counter based and written here, so a draw depends on (key, counter) only:
the same on every machine, every backend and every numpy version (numpy's Generator is never
used by a rule).  Word ``counter`` under ``key`` is the (counter + 1)-th output of SplitMix64
seeded with ``key`` (Steele, Lea and Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014; the constants of Vigna's reference splitmix64.c):

    s = key + (counter + 1) * 0x9E3779B97F4A7C15                       (mod 2**64)
    s = (s ^ (s >> 30)) * 0xBF58476D1CE4E5B9;  s = (s ^ (s >> 27)) * 0x94D049BB133111EB
    word = s ^ (s >> 31)

computed in numpy uint64 arithmetic (wrap-around is the definition).  A uniform draw is the
top 53 bits of a word over 2**53: k / 2**53 in [0, 1), a dyadic that binary64 holds exactly;
the rule hands it to the backend with ``xp.asarray``, the one rounding (exact under reference
and exact, into the format under emulated and native).  Element i (row-major) of an output
reads counter i (randn: counters 2i and 2i + 1).  The key is an attribute (a natural below
2**64): an operator value names its draw, and two calls with one key draw the same words.
"""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from ..certs import convention, roundoff
from ..ports import frozen, value
from ..registry import Float64, define
from ..rules import shown, zero_tangents
from ..samples import into

RANDOM_TESTS = "tests/routes/test_routes_random.py"
GOLDEN = 0x9E3779B97F4A7C15            # 2**64 / golden ratio, odd: SplitMix64's increment
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB   # splitmix64.c's finalizer multipliers
KEY_LIMIT = (1 << 64) - 1


def _u64(v):
    """A one-dimensional uint64 array (array arithmetic wraps modulo 2**64 silently)."""
    return np.asarray(v).astype("uint64").reshape(-1)


def words(key: int, counters):
    """SplitMix64 words (uint64, one-dimensional) for ``counters`` (naturals) under ``key``.
    Integer data, not the model's numbers: wrap-around uint64 arithmetic is the definition."""
    c = _u64(counters)
    s = _u64(key) + (c + _u64(1)) * _u64(GOLDEN)
    s = (s ^ (s >> _u64(30))) * _u64(MIX1)
    s = (s ^ (s >> _u64(27))) * _u64(MIX2)
    return s ^ (s >> _u64(31))


def uniform_ints(key: int, counters):
    """The top 53 bits of each word: integers k in [0, 2**53), the uniform draw k / 2**53."""
    return words(key, counters) >> _u64(11)


def _dyadic(k):
    """k / 2**53 as float64, exact: k < 2**53 converts exactly and 2**-53 is a power of two.
    The backend's ``asarray`` then rounds it once."""
    return k.astype("float64") * 2.0 ** -53


def uniforms(key: int, counters):
    """The uniform draws k / 2**53 as exact float64 values."""
    return _dyadic(uniform_ints(key, counters))


def _size(shape) -> int:
    return np.empty(tuple(shape), dtype=bool).size


def _key_attr():
    return A.integer("key", 0, lo=0, hi=KEY_LIMIT, gen=(0, KEY_LIMIT),
                     doc="the key of the draw: a natural below 2**64")


# ----- oracle helpers: Python integers, written apart from the numpy words above ---------------
def _word_py(key, counter):
    mask = (1 << 64) - 1
    s = (key + (counter + 1) * GOLDEN) & mask
    s = ((s ^ (s >> 30)) * MIX1) & mask
    s = ((s ^ (s >> 27)) * MIX2) & mask
    return s ^ (s >> 31)


def _uniform_mp(ctx, key, counter, floor=0):
    return ctx.ldexp(ctx.mpf(max(_word_py(key, counter) >> 11, floor)), -53)


# ----- dropout ---------------------------------------------------------------------------------
def _keep(xp, a, mask, p, v):
    """v / (1 - p) where the mask keeps, +0 where it drops (a select, not a product)."""
    one = xp.ones_like(p)
    return xp.where(xp.equal(mask, xp.ones_like(mask)), xp.divide(v, xp.subtract(one, p)),
                    xp.zeros_like(v))


def _dropout_validate(xp, a, x, mask, p):
    bad = xp.isnan(p) | xp.less(p, xp.zeros_like(p)) | xp.greater_equal(p, xp.ones_like(p))
    if bad.any():
        return f"p must lie in [0, 1) (got {shown(xp, p)})"
    if not (xp.equal(mask, xp.zeros_like(mask)) | xp.equal(mask, xp.ones_like(mask))).all():
        return f"mask entries must be 0 or 1 (got {shown(xp, mask)})"
    return None


def _dropout_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        n = _size(shape)
        x = rng.uniform(-4, 4, n)
        if kind == "special":
            specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
            x = np.where(rng.random(n) < 0.5, specials[rng.integers(0, 5, n)], x)
        # 1 - p is exact for these p in every format (Sterbenz for p >= 1/2).
        p = (0.0, 0.5, 0.75, 0.875)[int(rng.integers(0, 4))]
        mask = rng.random(n) < 0.6
        return into(x, fmt).reshape(shape), mask.astype(np.float64).reshape(shape), \
            into(p, fmt)
    return sampler


def _dropout_oracle(ctx, a, x, mask, p):
    scale = 1 / (1 - p[()])
    out = [v * scale if m == 1 else ctx.mpf(0) for v, m in zip(x.reshape(-1), mask.reshape(-1))]
    return (np.array(out, dtype=object).reshape(np.shape(x)),)


define(
    "dropout", "random",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "mask": frozen(a.shape), "p": frozen()},
                     {"y": value(a.shape)}),
    forward=lambda xp, a, x, mask, p: _keep(xp, a, mask, p, x),
    backward=lambda xp, a, xs, ys, gs, needs: (_keep(xp, a, xs[1], xs[2], gs[0]), None, None),
    jvp=lambda xp, a, xs, ys, ts: _keep(xp, a, xs[1], xs[2], ts[0]),
    validate=_dropout_validate,
    samples={k: _dropout_sampler(k) for k in ("ordinary", "special")},
    oracle=_dropout_oracle,
    float64=Float64(lambda a, x, mask, p: np.where(mask == 1, x / (1.0 - p), 0.0),
                    lambda a, xs, gs: (np.where(xs[1] == 1, gs[0] / (1.0 - xs[2]), 0.0),
                                       None, None)),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    notes=("dropout(x, mask, p) = x / (1 - p) where mask is 1 and +0 where it is 0; the mask "
           "is a frozen input of 0s and 1s (draw it with bernoulliMask or topKMask), p a frozen "
           "scalar in [0, 1).",
           "A dropped entry is +0 even when x is NaN or infinite (a select; PyTorch's "
           "x * mask * scale gives NaN there).  1 - p and the quotient are two roundings.",
           "Gradient and tangent: the same map on the cotangent / tangent (linear in x)."),
    bad_inputs=(({}, ([1.0, 2.0, 3.0], [1.0, 0.0, 1.0], 1.0),
                 "dropout: p must lie in [0, 1) (got 1)"),
                ({}, ([1.0, 2.0, 3.0], [1.0, 0.5, 1.0], 0.5),
                 "dropout: mask entries must be 0 or 1 (got [1, 0.5, 1])")),
    certificates=("prepared",
                  convention(f"{RANDOM_TESTS}::test_dropout_drops_to_zero_even_at_nan",
                             "a dropped entry is +0 and receives no gradient, even at NaN or "
                             "infinite x; kept entries are scaled by 1/(1 - p)")),
)


# ----- topKMask --------------------------------------------------------------------------------
def _topk_check(a):
    if len(a.shape) == 0:
        return "shape must have rank >= 1 (got rank 0)"
    if a.axis >= len(a.shape):
        return f"axis must be < rank {len(a.shape)} (got {a.axis})"
    if a.k > a.shape[a.axis]:
        return f"k must be <= shape[axis] = {a.shape[a.axis]} (got {a.k})"
    return None


def _topk_forward(xp, a, x):
    xm = np.moveaxis(np.asarray(x), a.axis, -1)
    n = xm.shape[-1]
    xi, xj = np.broadcast_arrays(xm[..., :, None], xm[..., None, :])   # [..., i, j]
    ni, nj = xp.isnan(xi), xp.isnan(xj)
    before = np.arange(n)[None, :] < np.arange(n)[:, None]             # j < i
    # j beats i: a NaN beats a number, a greater number beats a smaller one, and among equal
    # values (or two NaNs) the lower index wins.
    beats = (nj & ~ni) | xp.greater(xj, xi) | (before & (xp.equal(xj, xi) | (nj & ni)))
    keep = np.moveaxis(beats.sum(axis=-1) < a.k, -1, a.axis)
    return xp.where(keep, xp.ones_like(x), xp.zeros_like(x))


def _topk_oracle(ctx, a, x):
    xm = np.moveaxis(x, a.axis, -1)
    out = np.full(xm.shape, ctx.mpf(0), dtype=object)
    for idx in np.ndindex(xm.shape[:-1]):
        row = list(xm[idx])
        # Sort key: NaN first, then descending value, then ascending index.
        order = sorted(range(len(row)), key=lambda i: (0 if ctx.isnan(row[i]) else 1,
                                                       0 if ctx.isnan(row[i]) else -row[i], i))
        for i in order[:a.k]:
            out[idx + (i,)] = ctx.mpf(1)
    return (np.moveaxis(out, -1, a.axis),)


def _topk_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        n = _size(shape)
        x = rng.uniform(-4, 4, n)
        if kind == "edges":                        # ties and signed zeros
            x = np.array([0.0, -0.0, 1.0, -1.0])[rng.integers(0, 4, n)]
        if kind == "special":
            specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
            x = np.where(rng.random(n) < 0.5, specials[rng.integers(0, 5, n)], x)
        return (into(x, fmt).reshape(shape),)
    return sampler


define(
    "topKMask", "random",
    attributes=(A.shape(default=(4,)), A.nat("axis", 0, doc="the axis the top k are taken along"),
                A.nat("k", 2, doc="how many entries of each slice the mask keeps")),
    ports=lambda a: ({"x": frozen(a.shape)}, {"mask": value(a.shape)}),
    forward=_topk_forward,
    jvp=zero_tangents,
    check=_topk_check,
    samples={k: _topk_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_topk_oracle,
    float64=None,
    examples={"": {}, "2x3-axis1": {"shape": (2, 3), "axis": 1, "k": 1},
              "2x3-axis0": {"shape": (2, 3), "axis": 0, "k": 2}},
    notes=("topKMask(x) is 1 at the k largest entries of each slice along axis (the "
           "positions torch.topk(x, k, dim=axis) returns), 0 elsewhere; x is frozen.",
           "Order: NaN above every number (as torch.topk), then descending value; ties (equal "
           "values, -0 == +0, two NaNs) go to the lower index, so exactly k are kept.",
           "No value input: no gradient; the tangent map is zero."),
    bad_attributes=(({"shape": ()}, "topKMask: shape must have rank >= 1 (got rank 0)"),
                    ({"axis": 1}, "topKMask: axis must be < rank 1 (got 1)"),
                    ({"k": 5}, "topKMask: k must be <= shape[axis] = 4 (got 5)")),
    certificates=(convention(f"{RANDOM_TESTS}::test_topk_mask_breaks_ties_by_lower_index",
                             "ties go to the lower index, NaN ranks above every number"),),
)


# ----- bernoulliMask ---------------------------------------------------------------------------
def _bernoulli_forward(xp, a, p):
    u = xp.asarray(uniforms(a.key, np.arange(_size(a.shape))).reshape(a.shape))
    return xp.where(xp.less(u, p), xp.ones_like(p), xp.zeros_like(p))


def _bernoulli_validate(xp, a, p):
    bad = xp.isnan(p) | xp.less(p, xp.zeros_like(p)) | xp.greater(p, xp.ones_like(p))
    if bad.any():
        return f"p must lie in [0, 1] (got {shown(xp, p)})"
    return None


def _bernoulli_sampler(kind):
    def sampler(rng, fmt, op):
        n = _size(op.attrs.shape)
        p = rng.uniform(0, 1, n)
        if kind == "edges":
            p = np.array([0.0, 1.0, 0.5])[rng.integers(0, 3, n)]
        return (into(p, fmt).reshape(op.attrs.shape),)
    return sampler


define(
    "bernoulliMask", "random",
    attributes=(A.shape(), _key_attr()),
    ports=lambda a: ({"p": frozen(a.shape)}, {"mask": value(a.shape)}),
    forward=_bernoulli_forward,
    jvp=zero_tangents,
    validate=_bernoulli_validate,
    samples={k: _bernoulli_sampler(k) for k in ("ordinary", "edges")},
    oracle=lambda ctx, a, p: (np.array(
        [ctx.mpf(1) if _uniform_mp(ctx, a.key, i) < q else ctx.mpf(0)
         for i, q in enumerate(p.reshape(-1))], dtype=object).reshape(p.shape),),
    examples={"": {}, "2x3-key7": {"shape": (2, 3), "key": 7},
              "key-max": {"key": KEY_LIMIT}},
    notes=("bernoulliMask(p) is 1 where u < p and 0 elsewhere, u the uniform draw of counter "
           "i (row-major) under key (module docstring): P(1) = p; p = 0 gives 0, p = 1 gives 1.",
           "Masks are the model's scalars 0 and 1 (so they multiply and feed dropout).",
           "u is rounded once into the backend's numbers before the comparison (exact under "
           "reference and binary64).  No value input: no gradient, zero tangent."),
    bad_inputs=(({}, ([0.5, 1.5, 0.25],), "bernoulliMask: p must lie in [0, 1] (got [0.5, 1.5"),),
    certificates=(convention(f"{RANDOM_TESTS}::test_bernoulli_mask_compares_the_uniform_draws",
                             "true exactly where the key's uniform draw is below p"),),
)


# ----- randUniform -----------------------------------------------------------------------------
def _no_inputs(rng, fmt, op):
    return ()


define(
    "randUniform", "random",
    attributes=(A.shape(), _key_attr()),
    ports=lambda a: ({}, {"y": value(a.shape)}),
    forward=lambda xp, a: xp.asarray(uniforms(a.key, np.arange(_size(a.shape)))
                                     .reshape(a.shape)),
    jvp=zero_tangents,
    samples={"ordinary": _no_inputs},
    oracle=lambda ctx, a: (np.array([_uniform_mp(ctx, a.key, i) for i in range(_size(a.shape))],
                                    dtype=object).reshape(a.shape),),
    float64=Float64(lambda a: np.array([(_word_py(a.key, i) >> 11) / 2.0 ** 53
                                        for i in range(_size(a.shape))]).reshape(a.shape)),
    examples={"": {}, "2x3-key42": {"shape": (2, 3), "key": 42}},
    notes=("randUniform: entry i (row-major) is k / 2**53, k the top 53 bits of SplitMix64 "
           "word i under key: uniform on the dyadics of [0, 1), rounded once into the "
           "backend's numbers (so a narrow format may round it up to 1).",
           "No input: the tangent is zero and there is no pullback."),
    certificates=(convention(f"{RANDOM_TESTS}::test_generator_words_match_splitmix64",
                             "the draws are SplitMix64's words under the key, top 53 bits"),
                  roundoff(0.5, statement="the uniform dyadic rounded once into the format")),
)


# ----- randn -----------------------------------------------------------------------------------
TWO_PI = "6.28318530717958647692528676655900576839433879875021164194988918461563281257241799726"


def _randn_forward(xp, a):
    n = _size(a.shape)
    k1 = uniform_ints(a.key, 2 * np.arange(n))
    u1 = xp.asarray(_dyadic(k1 + (k1 == 0)))          # clamp k1 = 0 to 1: u1 >= 2**-53
    u2 = xp.asarray(uniforms(a.key, 2 * np.arange(n) + 1))
    radius = xp.sqrt(xp.multiply(xp.full_like(u1, -2), xp.log(u1)))
    z = xp.multiply(radius, xp.cos(xp.multiply(xp.full_like(u2, TWO_PI), u2)))
    return np.reshape(z, a.shape)


def _randn_oracle(ctx, a):
    out = []
    for i in range(_size(a.shape)):
        u1, u2 = _uniform_mp(ctx, a.key, 2 * i, floor=1), _uniform_mp(ctx, a.key, 2 * i + 1)
        out.append(ctx.sqrt(-2 * ctx.log(u1)) * ctx.cos(2 * ctx.pi * u2))
    return (np.array(out, dtype=object).reshape(a.shape),)


def _randn_f64(a):
    n = _size(a.shape)
    k1 = np.array([max(_word_py(a.key, 2 * i) >> 11, 1) for i in range(n)], dtype=np.float64)
    k2 = np.array([_word_py(a.key, 2 * i + 1) >> 11 for i in range(n)], dtype=np.float64)
    z = np.sqrt(-2.0 * np.log(k1 / 2.0 ** 53)) * np.cos(2 * np.pi * (k2 / 2.0 ** 53))
    return z.reshape(a.shape)


define(
    "randn", "random",
    attributes=(A.shape(), _key_attr()),
    ports=lambda a: ({}, {"y": value(a.shape)}),
    forward=_randn_forward,
    jvp=zero_tangents,
    samples={"ordinary": _no_inputs},
    oracle=_randn_oracle,
    float64=Float64(_randn_f64),
    examples={"": {}, "2x3-key3": {"shape": (2, 3), "key": 3}},
    notes=("randn: Box-Muller, z = sqrt(-2 log u1) cos(2 pi u2) with u1, u2 the uniform draws "
           "of counters 2i and 2i + 1 under key; u1 is clamped away from zero (k1 >= 1, so "
           "u1 >= 2**-53) before it is rounded once into the backend's numbers.",
           "In a format whose least positive value exceeds 2**-53 (float8, binary16) a tiny "
           "u1 rounds to 0 and the entry is infinite or NaN: the format's limit, not a "
           "convention.  2 pi is a decimal literal rounded once.",
           "No input: the tangent is zero and there is no pullback."),
    certificates=(convention(f"{RANDOM_TESTS}::test_randn_is_box_muller_of_the_draws",
                             "Box-Muller of two uniform draws, the first clamped to "
                             ">= 2**-53"),),
)
