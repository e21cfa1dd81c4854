"""The random family: the generator against an independent Python-integer SplitMix64 and its
published test vector, the uniform construction, Box-Muller against mpmath on the same
uniforms, dropout's scaling and its dropped entries, the masks' tie and key conventions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.families import random as R
from conftest import CTX
MASK64 = (1 << 64) - 1


def splitmix64(seed):
    """Vigna's splitmix64.c as a stateful Python-integer generator (the oracle)."""
    state = seed
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        yield z ^ (z >> 31)


def first(seed, n):
    gen = splitmix64(seed)
    return [next(gen) for _ in range(n)]


def test_generator_words_match_splitmix64():
    # Published first outputs of splitmix64 seeded with 1234567 (the test vector used by
    # several ports of splitmix64.c).
    assert first(1234567, 3) == [6457827717110365317, 3203168211198807973,
                                 9817491932198370423]
    for key in (0, 1, 1234567, MASK64):
        assert [int(w) for w in R.words(key, np.arange(6))] == first(key, 6)
    # Counter i does not depend on the counters drawn before it.
    assert int(R.words(99, [5])[0]) == first(99, 6)[5]


def test_uniforms_are_the_top_53_bits_over_two_to_the_53():
    o = routes.op("randUniform", shape=(2, 3), key=2024)
    got = numerics.exact().asarray(o.rule(numerics.reference(256)).forward(())[0])
    want = [Fraction(w >> 11, 1 << 53) for w in first(2024, 6)]
    assert [Fraction(v) for v in got.reshape(-1)] == want
    assert all(0 <= v < 1 for v in want)


def test_same_key_same_draw_other_key_other_draw():
    xp = numerics.native("float64")
    a = routes.op("randUniform", shape=(8,), key=1).rule(xp).forward(())[0]
    b = routes.op("randUniform", shape=(8,), key=1).rule(xp).forward(())[0]
    c = routes.op("randUniform", shape=(8,), key=2).rule(xp).forward(())[0]
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def _box_muller(key, i, floor=0):
    w1, w2 = first(key, 2 * i + 2)[2 * i:]
    u1 = CTX.ldexp(max(w1 >> 11, floor), -53)
    u2 = CTX.ldexp(w2 >> 11, -53)
    return CTX.sqrt(-2 * CTX.log(u1)) * CTX.cos(2 * CTX.pi * u2)


def test_randn_is_box_muller_of_the_draws():
    o = routes.op("randn", shape=(4,), key=77)
    got = o.rule(numerics.reference(256)).forward(())[0]
    for i, g in enumerate(got):
        want = _box_muller(77, i, floor=1)
        assert abs(CTX.mpf(g) - want) <= CTX.ldexp(1, -240) * (1 + abs(want))


def test_randn_clamps_the_first_draw_away_from_zero(monkeypatch):
    real = R.uniform_ints

    def zero_first(key, counters):               # force k1 = 0 at element 0
        k = real(key, counters)
        return np.where(np.asarray(counters) == 0, np.uint64(0), k)
    monkeypatch.setattr(R, "uniform_ints", zero_first)
    z = routes.op("randn", shape=(2,), key=5).rule(numerics.reference(256)).forward(())[0]
    w2 = first(5, 2)[1]
    want = CTX.sqrt(2 * 53 * CTX.log(2)) * CTX.cos(2 * CTX.pi * CTX.ldexp(w2 >> 11, -53))
    assert abs(CTX.mpf(z[0]) - want) <= CTX.ldexp(1, -240) * abs(want)


def test_randn_float64_matches_numpy_box_muller():
    z = routes.op("randn", shape=(5,), key=3).rule(numerics.native("float64")).forward(())[0]
    for i, v in enumerate(z):
        w1, w2 = first(3, 2 * i + 2)[2 * i:]
        u1, u2 = max(w1 >> 11, 1) / 2.0 ** 53, (w2 >> 11) / 2.0 ** 53
        assert v == pytest.approx(math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2),
                                  rel=1e-15, abs=1e-15)


def test_dropout_scales_kept_entries_by_one_over_one_minus_p():
    xp = numerics.exact()
    rule = routes.op("dropout", shape=(3,)).rule(xp)
    x, mask, p = [3.0, -1.0, 2.0], [1.0, 0.0, 1.0], 0.25
    (y,) = rule.forward((x, mask, p))
    assert list(y) == [Fraction(4), Fraction(0), Fraction(8, 3)]
    (g, gm, gp) = rule.backward((x, mask, p), ([3.0, 3.0, 1.5],))
    assert list(g) == [Fraction(4), Fraction(0), Fraction(2)] and gm is None and gp is None
    (t,) = rule.jvp((x, mask, p), ([0.75, 1.0, 0.0], None, None))
    assert list(t) == [Fraction(1), Fraction(0), Fraction(0)]


@pytest.mark.parametrize("backend", ["reference", "float64", "bfloat16"])
def test_dropout_drops_to_zero_even_at_nan(backend):
    xp = {"reference": lambda: numerics.reference(64),
          "float64": lambda: numerics.native("float64"),
          "bfloat16": lambda: numerics.emulated("bfloat16")}[backend]()
    rule = routes.op("dropout", shape=(4,)).rule(xp)
    xs = ([math.nan, math.inf, 1.0, math.nan], [0.0, 0.0, 1.0, 1.0], 0.5)
    y = xp.to_float64(rule.forward(xs)[0])
    assert y[:3].tolist() == [0.0, 0.0, 2.0] and math.isnan(y[3])
    assert not np.signbit(y[:2]).any()
    g = xp.to_float64(rule.backward(xs, ([1.0, 1.0, 1.0, 1.0],))[0])
    assert g.tolist() == [0.0, 0.0, 2.0, 2.0]


@pytest.mark.parametrize("x,k,want", [
    ([1.0, 3.0, 3.0, 2.0], 2, [0, 1, 1, 0]),
    ([2.0, 2.0, 2.0, 1.0], 2, [1, 1, 0, 0]),            # a tie: the lower indices win
    ([1.0, math.nan, 5.0, 0.0], 2, [0, 1, 1, 0]),        # NaN ranks above every number
    ([math.nan, 1.0, math.nan, 0.0], 1, [1, 0, 0, 0]),   # two NaNs: the lower index
    ([-0.0, 0.0, -1.0, -2.0], 1, [1, 0, 0, 0]),          # -0 == +0: a tie
    ([1.0, 2.0, 3.0, 4.0], 0, [0, 0, 0, 0]),
])
def test_topk_mask_breaks_ties_by_lower_index(x, k, want):
    for xp in (numerics.reference(64), numerics.native("float64")):
        (m,) = routes.op("topKMask", shape=(4,), k=k).rule(xp).forward((x,))
        assert xp.to_float64(m).tolist() == want


def test_topk_mask_along_an_axis():
    x = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    (m,) = routes.op("topKMask", shape=(2, 3), axis=0, k=1).rule(
        numerics.native("float64")).forward((x,))
    assert m.tolist() == [[0, 1, 0], [1, 0, 1]]


def test_bernoulli_mask_compares_the_uniform_draws():
    p = np.array([0.1, 0.5, 0.9, 0.3, 0.7, 0.5])
    o = routes.op("bernoulliMask", shape=(6,), key=11)
    (m,) = o.rule(numerics.reference(128)).forward((p,))
    want = [1.0 if Fraction(w >> 11, 1 << 53) < Fraction(q) else 0.0
            for w, q in zip(first(11, 6), p.tolist())]
    assert numerics.reference(128).to_float64(m).tolist() == want
    xp = numerics.native("float64")
    assert xp.to_float64(o.rule(xp).forward((np.zeros(6),))[0]).tolist() == [0.0] * 6
    assert xp.to_float64(o.rule(xp).forward((np.ones(6),))[0]).tolist() == [1.0] * 6
