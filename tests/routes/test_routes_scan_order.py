"""Known answers and pinned conventions of the scan_order family (cumsum, cumprod, cummax,
cummin, sort, topk, argmax, argmin).  Expected values are written by hand from the stated
conventions (small arrays, exact dyadic values), never taken from the code."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.errors import RouteError
from conftest import BACKENDS, arr, f64, rule

NAN = math.nan
IEEE = ["reference", "bfloat16", "float64"]


# ----- cumsum, cumprod -------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_cumsum_known_answer(backend):
    r = rule("cumsum", backend, shape=(2, 3), axis=1)
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]])
    assert np.array_equal(f64(r.xp, r.forward([x])[0]), [[1, 3, 6], [-1, -0.5, 3.5]])
    g = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]])
    assert np.array_equal(f64(r.xp, r.backward([x], [g])[0]), [[3, 2, 1], [7, 6, 4]])
    assert np.array_equal(f64(r.xp, r.jvp([x], [g])[0]), [[1, 2, 3], [1, 3, 7]])


def test_cumsum_accumulates_in_the_accumulation_format():
    # In bfloat16 (8 significant bits) 1 + 2**-8 is a tie and rounds to 1; a binary32
    # running sum keeps it, so the third prefix 1 + 2**-7 survives the final rounding.
    x = arr(1.0, 2.0 ** -8, 2.0 ** -8)
    strict = routes.op("cumsum").rule(numerics.emulated("bfloat16"))
    wide = routes.op("cumsum").rule(numerics.emulated("bfloat16", policy="fp32_accumulate"))
    assert np.array_equal(f64(strict.xp, strict.forward([x])[0]), [1, 1, 1])
    assert np.array_equal(f64(wide.xp, wide.forward([x])[0]), [1, 1, 1 + 2.0 ** -7])


@pytest.mark.parametrize("backend", BACKENDS)
def test_cumprod_gradient_at_a_zero(backend):
    # y = (x0, x0 x1, x0 x1 x2) at x = (2, 0, 3): dy/dx0 . g = 1 + x1 + x1 x2 = 1,
    # dy/dx1 . g = x0 + x0 x2 = 8, dy/dx2 . g = x0 x1 = 0.
    r = rule("cumprod", backend)
    x = arr(2.0, 0.0, 3.0)
    assert np.array_equal(f64(r.xp, r.forward([x])[0]), [2, 0, 0])
    assert np.array_equal(f64(r.xp, r.backward([x], [arr(1, 1, 1)])[0]), [1, 8, 0])
    assert np.array_equal(f64(r.xp, r.jvp([x], [arr(0, 1, 0)])[0]), [0, 2, 6])


# ----- cummax, cummin ----------------------------------------------------------------------------
def _check_latest_tie(backend, name, x, values):
    """The running extremum of ``x`` (a tie at positions 1 and 2) moves to the latest index
    of a tie, which takes the gradient; the rule, for more checks."""
    r = rule(name, backend, shape=(4,))
    out, idx = r.forward([x])
    assert np.array_equal(f64(r.xp, out), values)
    assert idx.tolist() == [0, 1, 2, 2]
    grad = r.backward([x], [arr(1, 2, 4, 8), None])[0]
    assert np.array_equal(f64(r.xp, grad), [1, 2, 12, 0])
    return r


@pytest.mark.parametrize("backend", BACKENDS)
def test_cummax_ties_take_the_latest_index(backend):
    _check_latest_tie(backend, "cummax", arr(1.0, 3.0, 3.0, 2.0), [1, 3, 3, 3])


@pytest.mark.parametrize("backend", IEEE)
def test_cummax_nan_takes_over(backend):
    r = rule("cummax", backend, shape=(4,))
    values, idx = r.forward([arr(1.0, NAN, 2.0, NAN)])
    assert np.array_equal(f64(r.xp, values), [1, NAN, NAN, NAN], equal_nan=True)
    assert idx.tolist() == [0, 1, 1, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cummin_ties_take_the_latest_index(backend):
    x = arr(2.0, 1.0, 1.0, 3.0)
    r = _check_latest_tie(backend, "cummin", x, [2, 1, 1, 1])
    assert np.array_equal(f64(r.xp, r.jvp([x], [arr(1, 2, 4, 8)])[0]), [1, 2, 4, 4])


# ----- sort, topk ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_sort_is_stable_at_ties(backend):
    x = arr(2.0, 1.0, 2.0, 0.0, 1.0)
    up = rule("sort", backend, shape=(5,))
    values, idx = up.forward([x])
    assert np.array_equal(f64(up.xp, values), [0, 1, 1, 2, 2])
    assert idx.tolist() == [3, 1, 4, 0, 2]
    grad = up.backward([x], [arr(10, 20, 30, 40, 50), None])[0]
    assert np.array_equal(f64(up.xp, grad), [40, 20, 50, 10, 30])
    down = rule("sort", backend, shape=(5,), descending=True)
    values, idx = down.forward([x])
    assert np.array_equal(f64(down.xp, values), [2, 2, 1, 1, 0])
    assert idx.tolist() == [0, 2, 1, 4, 3]


@pytest.mark.parametrize("backend", IEEE)
def test_sort_puts_nan_largest_and_keeps_signed_zeros_in_order(backend):
    x = arr(NAN, 1.0, -0.0, 0.0)
    assert rule("sort", backend, shape=(4,)).forward([x])[1].tolist() == [2, 3, 1, 0]
    assert rule("sort", backend, shape=(4,), descending=True).forward([x])[1].tolist() == \
        [0, 1, 2, 3]


def test_sort_along_axis_1():
    r = rule("sort", "exact", shape=(2, 3), axis=1)
    values, idx = r.forward([np.array([[3.0, 1.0, 2.0], [0.0, 0.0, -1.0]])])
    assert np.array_equal(f64(r.xp, values), [[1, 2, 3], [-1, 0, 0]])
    assert idx.tolist() == [[1, 2, 0], [2, 0, 1]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_topk_refuses_a_tie_at_the_boundary(backend):
    x = arr(3.0, 1.0, 1.0, 0.0)
    with pytest.raises(RouteError, match="topk: x has entries tied at the selection boundary"):
        rule("topk", backend, shape=(4,), k=2).validate([x])
    with pytest.raises(RouteError, match="tied at the selection boundary"):
        routes.invoke(routes.op("topk", shape=(4,), k=2, largest=False), [x],
                      BACKENDS[backend]())
    # Ties inside the selection decide nothing: kept in input order.
    r = rule("topk", backend, shape=(4,), k=3)
    r.validate([x])
    values, idx = r.forward([x])
    assert np.array_equal(f64(r.xp, values), [3, 1, 1]) and idx.tolist() == [0, 1, 2]
    grad = r.backward([x], [arr(1, 2, 4), None])[0]
    assert np.array_equal(f64(r.xp, grad), [1, 2, 4, 0])
    small = rule("topk", backend, shape=(4,), k=1, largest=False)
    small.validate([x])
    assert small.forward([x])[1].tolist() == [3]


@pytest.mark.parametrize("backend", IEEE)
def test_topk_counts_nan_as_largest(backend):
    r = rule("topk", backend, shape=(3,), k=1)
    values, idx = r.forward([arr(1.0, NAN, 2.0)])
    assert np.isnan(f64(r.xp, values)).all() and idx.tolist() == [1]
    with pytest.raises(RouteError, match="tied at the selection boundary"):
        r.validate([arr(NAN, 1.0, NAN)])


# ----- argmax, argmin ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_argmax_takes_the_first_tie_and_nan(backend):
    assert rule("argmax", backend, shape=(4,)).forward([arr(1, 3, 3, 2)])[0].tolist() == 1
    r = rule("argmax", backend, shape=(2, 3), axis=1, keepdim=True)
    assert r.forward([np.array([[0.0, 5.0, 5.0], [7.0, 1.0, 7.0]])])[0].tolist() == [[1], [0]]
    if backend in IEEE:
        r = rule("argmax", backend, shape=(4,))
        assert r.forward([arr(1.0, NAN, 3.0, NAN)])[0].tolist() == 1
        assert r.forward([arr(-0.0, 0.0, -1.0, -2.0)])[0].tolist() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_argmin_takes_the_first_tie_and_nan(backend):
    assert rule("argmin", backend, shape=(4,)).forward([arr(2, 0, 0, 5)])[0].tolist() == 1
    if backend in IEEE:
        r = rule("argmin", backend, shape=(3,))
        assert r.forward([arr(0.0, NAN, -1.0)])[0].tolist() == 1
        assert r.forward([arr(0.0, -0.0, 1.0)])[0].tolist() == 0
