"""Known answers and pinned conventions of the indexing family (gather, scatter, indices,
indexAt, slice, embedding).  Expected values are written by hand from the stated conventions
(small arrays, exact dyadic values), never taken from the code; the fold-order tests use
bfloat16 sums whose value depends on the order (1 + 2**-8 is a tie that rounds to 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from conftest import BACKENDS, arr, f64, rule

NAN = math.nan
U = 2.0 ** -8          # half an ulp of 1 in bfloat16


def ints(*values):
    return np.array(values, dtype=np.int64)


# ----- gather ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_known_answers(backend):
    r = rule("gather", backend)
    assert np.array_equal(f64(r.xp, r.forward([arr(10, 20, 30), ints(2, 0, 2, 2)])[0]),
                          [30, 10, 30, 30])
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    batch = rule("gather", backend, shape=(2, 3), axes=(1,), batch=1, index_shape=(2,))
    assert np.array_equal(f64(r.xp, batch.forward([x, np.array([[2, 0], [1, 1]])])[0]),
                          [[3, 1], [5, 5]])
    pairs = rule("gather", backend, shape=(2, 3), axes=(0, 1), index_shape=(2,))
    assert np.array_equal(f64(r.xp, pairs.forward([x, np.array([[1, 2], [0, 0]])])[0]), [6, 1])
    rows = rule("gather", backend, shape=(2, 3), axes=(0,), index_shape=(1,))
    assert np.array_equal(f64(r.xp, rows.forward([x, ints(1)])[0]), [[4, 5, 6]])
    swapped = rule("gather", backend, shape=(2, 3), axes=(1, 0), index_shape=(1,))
    assert np.array_equal(f64(r.xp, swapped.forward([x, np.array([[2, 1]])])[0]), [6])


def test_gather_gradient_sums_repeated_indices_in_order():
    index = ints(2, 0, 2, 2)
    g = arr(1.0, 5.0, U, U)                      # target 2 receives 1, then U, then U
    exact = rule("gather", "exact")
    assert np.array_equal(f64(exact.xp, exact.backward([arr(0, 0, 0), index], [g])[0]),
                          [5, 0, 1 + 2 * U])
    bf = rule("gather", "bfloat16")
    assert np.array_equal(f64(bf.xp, bf.backward([arr(0, 0, 0), index], [g])[0]), [5, 0, 1])
    g = arr(U, 5.0, U, 1.0)                      # U + U first: 2**-7 survives
    assert np.array_equal(f64(bf.xp, bf.backward([arr(0, 0, 0), index], [g])[0]),
                          [5, 0, 1 + 2 * U])


def test_gather_moves_words():
    r = rule("gather", "float64", element="int8")
    y = r.forward([np.array([-128, 7, 127], dtype=np.int8), ints(2, 0, 2, 1)])[0]
    assert y.dtype == np.int8 and y.tolist() == [127, -128, 127, 7]


# ----- scatter -------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["bfloat16", "exact"])
def test_scatter_folds_repeated_targets_in_row_major_order(backend):
    r = rule("scatter", backend, shape=(1,), index_shape=(3,), mode="sum")
    index = ints(0, 0, 0)
    first = f64(r.xp, r.forward([arr(0.0), index, arr(1.0, U, U)])[0])
    last = f64(r.xp, r.forward([arr(0.0), index, arr(U, U, 1.0)])[0])
    assert np.array_equal(last, [1 + 2 * U])
    assert np.array_equal(first, [1.0] if backend == "bfloat16" else [1 + 2 * U])
    # x's own entry is folded first (include_self): 1 + U + U is 1 in bfloat16.
    own = f64(r.xp, rule("scatter", backend, shape=(1,), index_shape=(2,), mode="sum")
              .forward([arr(1.0), ints(0, 0), arr(U, U)])[0])
    assert np.array_equal(own, [1.0] if backend == "bfloat16" else [1 + 2 * U])


def test_scatter_folds_rows_of_a_two_dimensional_index_in_row_major_order():
    r = rule("scatter", "bfloat16", shape=(1,), index_shape=(2, 2), mode="sum")
    y = r.forward([arr(0.0), np.zeros((2, 2), np.int64), np.array([[U, U], [1.0, U]])])[0]
    # Row-major: ((U + U) + 1) + U; 1 + 2**-7 + 2**-8 is a tie between 1 + 2**-7 (odd) and
    # 1 + 2**-6 (even).  Column-major, ((U + 1) + U) + U, would give 1.
    assert np.array_equal(f64(r.xp, y), [1 + 2.0 ** -6])


def _check_scatter(r, xs, g, y, gx, gu):
    """The scatter rule ``r`` at inputs ``xs`` (x, index, updates): its value ``y`` and the
    gradients ``gx``, ``gu`` of x and the updates along the cotangent ``g``."""
    assert np.array_equal(f64(r.xp, r.forward(xs)[0]), y)
    got_x, _, got_u = r.backward(xs, [g])
    assert np.array_equal(f64(r.xp, got_x), gx)
    assert np.array_equal(f64(r.xp, got_u), gu)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_replace_last_update_wins(backend):
    r = rule("scatter", backend, index_shape=(3,))
    xs = [arr(9, 9, 9), ints(1, 1, 0), arr(5, 6, 7)]
    _check_scatter(r, xs, arr(1, 2, 3), y=[7, 6, 9], gx=[0, 0, 3], gu=[0, 2, 1])
    ty = r.jvp(xs, [arr(1, 2, 3), None, arr(10, 20, 30)])[0]
    assert np.array_equal(f64(r.xp, ty), [30, 20, 3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_prod_gradient_without_division(backend):
    r = rule("scatter", backend, shape=(2,), index_shape=(3,), mode="prod")
    _check_scatter(r, [arr(2, 3), ints(0, 0, 1), arr(0, 5, 4)], arr(1, 1),
                   y=[0, 12], gx=[0, 4], gu=[10, 0, 3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_max_shares_the_gradient_among_ties(backend):
    r = rule("scatter", backend, shape=(2,), index_shape=(3,), mode="max")
    _check_scatter(r, [arr(1, 0), ints(0, 0, 1), arr(1, 0.5, 0)], arr(2, 4),
                   y=[1, 0], gx=[1, 2], gu=[1, 0, 2])
    m = rule("scatter", backend, shape=(2,), index_shape=(3,), mode="min")
    _check_scatter(m, [arr(1, 0), ints(0, 0, 1), arr(-1, 0.5, 3)], arr(2, 4),
                   y=[-1, 0], gx=[0, 4], gu=[2, 0, 0])


def test_scatter_max_propagates_nan():
    r = rule("scatter", "float64", shape=(2,), index_shape=(2,), mode="max")
    y = r.forward([arr(1, 0), ints(0, 0), arr(NAN, 2)])[0]
    assert np.isnan(y[0]) and y[1] == 0


def test_scatter_words_wrap_and_booleans_replace():
    r = rule("scatter", "float64", shape=(2,), index_shape=(2,), mode="sum", element="int8")
    y = r.forward([np.array([100, 0], np.int8), ints(0, 0), np.array([100, 100], np.int8)])[0]
    assert y.dtype == np.int8 and y.tolist() == [44, 0]              # 300 mod 256
    b = rule("scatter", "float64", shape=(2,), index_shape=(2,), element="bool")
    y = b.forward([np.array([True, True]), ints(1, 1), np.array([True, False])])[0]
    assert y.tolist() == [True, False]


# ----- indices, indexAt, slice, embedding ----------------------------------------------------
def test_indices_enumerates_positions():
    xp = numerics.native("float64")
    assert routes.op("indices", shape=(3,)).rule(xp).forward([])[0].tolist() == [0, 1, 2]
    got = routes.op("indices", shape=(2, 3)).rule(xp).forward([])[0].tolist()
    assert got == [[[0, 0], [0, 1], [0, 2]], [[1, 0], [1, 1], [1, 2]]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_at_known_answer(backend):
    r = rule("indexAt", backend, shape=(2, 3), axis=1)
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert np.array_equal(f64(r.xp, r.forward([x, np.int64(2)])[0]), [3, 6])
    assert np.array_equal(f64(r.xp, r.backward([x, np.int64(2)], [arr(10, 20)])[0]),
                          [[0, 0, 10], [0, 0, 20]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_known_answer(backend):
    r = rule("slice", backend)                   # x[1:4:2] of a length-4 vector
    x = arr(1, 2, 3, 4)
    assert np.array_equal(f64(r.xp, r.forward([x])[0]), [2, 4])
    assert np.array_equal(f64(r.xp, r.backward([x], [arr(5, 7)])[0]), [0, 5, 0, 7])
    w = rule("slice", backend, shape=(2, 3), axis=1, start=0, stop=3, step=2, element="uint8")
    y = w.forward([np.array([[1, 2, 3], [250, 251, 255]], np.uint8)])[0]
    assert y.dtype == np.uint8 and y.tolist() == [[1, 3], [250, 255]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_known_answer(backend):
    r = rule("embedding", backend, shape=(4,))
    w = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    ids = ints(2, 0, 2, 1)
    assert np.array_equal(f64(r.xp, r.forward([w, ids])[0]), [[5, 6], [1, 2], [5, 6], [3, 4]])
    g = np.array([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0], [8.0, 8.0]])
    assert np.array_equal(f64(r.xp, r.backward([w, ids], [g])[0]), [[2, 2], [8, 8], [5, 5]])


def test_embedding_sums_repeated_ids_in_order():
    bf = rule("embedding", "bfloat16", num=2, dim=1, shape=(3,))
    w = np.zeros((2, 1))
    got = bf.backward([w, ints(1, 1, 1)], [np.array([[1.0], [U], [U]])])[0]
    assert np.array_equal(f64(bf.xp, got), [[0], [1]])
    got = bf.backward([w, ints(1, 1, 1)], [np.array([[U], [U], [1.0]])])[0]
    assert np.array_equal(f64(bf.xp, got), [[0], [1 + 2 * U]])


def test_scatter_replace_selects_so_an_infinite_cotangent_gives_zero():
    r = rule("scatter", "float64", index_shape=(2,))
    gx, _, gu = r.backward([arr(0, 0, 0), ints(1, 1), arr(5, 6)], [arr(1, math.inf, 2)])
    assert gx.tolist() == [1, 0, 2] and gu.tolist() == [0, math.inf]
