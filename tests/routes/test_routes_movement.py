"""Known answers and pinned conventions of the movement family (reshape, permute, broadcast,
flip, pad, cat).  Expected values are written by hand (small arrays), never taken from the
code; every operator is checked on values, its pullback, and on words or Booleans."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import BACKENDS, arr, f64, rule

U = 2.0 ** -8
X23 = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_known_answer(backend):
    r = rule("reshape", backend)                          # (2, 3) -> (3, 2)
    assert np.array_equal(f64(r.xp, r.forward([X23])[0]), [[1, 2], [3, 4], [5, 6]])
    g = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert np.array_equal(f64(r.xp, r.backward([X23], [g])[0]), X23)
    w = rule("reshape", backend, element="bool")
    y = w.forward([np.array([[True, False, False], [False, False, True]])])[0]
    assert y.tolist() == [[True, False], [False, False], [False, True]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_permute_known_answer(backend):
    r = rule("permute", backend)                          # perm [1, 0]: the transpose
    assert np.array_equal(f64(r.xp, r.forward([X23])[0]), [[1, 4], [2, 5], [3, 6]])
    g = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert np.array_equal(f64(r.xp, r.backward([X23], [g])[0]), [[1, 3, 5], [2, 4, 6]])
    r3 = rule("permute", backend, shape=(2, 3, 2), perm=(2, 0, 1))
    x = np.arange(12.0).reshape(2, 3, 2)                  # x[i, j, k] = 6 i + 2 j + k
    y = f64(r3.xp, r3.forward([x])[0])
    assert y.shape == (2, 2, 3) and y[1, 0, 2] == 5.0     # y[k, i, j] = x[i, j, k]: x[0,2,1]
    assert np.array_equal(f64(r3.xp, r3.backward([x], [y])[0]), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_gradient_sums_the_copies(backend):
    r = rule("broadcast", backend)                        # (1, 3) -> (2, 3)
    x = np.array([[1.0, 2.0, 3.0]])
    assert np.array_equal(f64(r.xp, r.forward([x])[0]), [[1, 2, 3], [1, 2, 3]])
    assert np.array_equal(f64(r.xp, r.backward([x], [X23])[0]), [[5, 7, 9]])
    lead = rule("broadcast", backend, shape=(2,), to=(3, 2))
    g = np.array([[1.0, 2.0], [U, 4.0], [U, 8.0]])
    want = [1.0 if backend == "bfloat16" else 1 + 2 * U, 14.0]   # (1 + U) + U: a tie to 1
    assert np.array_equal(f64(lead.xp, lead.backward([arr(1, 2)], [g])[0]), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_flip_known_answer(backend):
    r = rule("flip", backend)
    assert np.array_equal(f64(r.xp, r.forward([arr(1, 2, 3)])[0]), [3, 2, 1])
    assert np.array_equal(f64(r.xp, r.backward([arr(1, 2, 3)], [arr(4, 5, 6)])[0]), [6, 5, 4])
    r2 = rule("flip", backend, shape=(2, 3), axes=(1,))
    assert np.array_equal(f64(r2.xp, r2.forward([X23])[0]), [[3, 2, 1], [6, 5, 4]])
    w = rule("flip", backend, element="uint64")
    y = w.forward([np.array([0, 2 ** 64 - 1, 7], np.uint64)])[0]
    assert y.dtype == np.uint64 and y.tolist() == [7, 2 ** 64 - 1, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_known_answer(backend):
    r = rule("pad", backend)                              # one zero before, two after
    x = arr(1, -2, 3)
    y = f64(r.xp, r.forward([x])[0])
    assert np.array_equal(y, [0, 1, -2, 3, 0, 0]) and not np.signbit(y[[0, 4, 5]]).any()
    assert np.array_equal(f64(r.xp, r.backward([x], [arr(1, 2, 3, 4, 5, 6)])[0]), [2, 3, 4])
    r2 = rule("pad", backend, shape=(2, 3), before=(0, 1), after=(1, 0))
    assert np.array_equal(f64(r2.xp, r2.forward([X23])[0]),
                          [[0, 1, 2, 3], [0, 4, 5, 6], [0, 0, 0, 0]])
    b = rule("pad", backend, element="bool")
    assert b.forward([np.array([True, True, True])])[0].tolist() == \
        [False, True, True, True, False, False]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_known_answer(backend):
    r = rule("cat", backend)                              # sizes (1, 2) along axis 0
    xs = [arr(1), arr(2, 3)]
    assert np.array_equal(f64(r.xp, r.forward(xs)[0]), [1, 2, 3])
    g0, g1 = r.backward(xs, [arr(4, 5, 6)])
    assert np.array_equal(f64(r.xp, g0), [4]) and np.array_equal(f64(r.xp, g1), [5, 6])
    r2 = rule("cat", backend, shape=(2, 3), axis=1, sizes=(1, 0, 2))
    xs = [np.array([[1.0], [2.0]]), np.zeros((2, 0)), np.array([[3.0, 4.0], [5.0, 6.0]])]
    assert np.array_equal(f64(r2.xp, r2.forward(xs)[0]), [[1, 3, 4], [2, 5, 6]])
    w = rule("cat", backend, element="int8")
    y = w.forward([np.array([-1], np.int8), np.array([127, -128], np.int8)])[0]
    assert y.dtype == np.int8 and y.tolist() == [-1, 127, -128]
