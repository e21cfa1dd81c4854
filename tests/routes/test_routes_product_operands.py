"""The product operands a declaration names (``products=``, read as Op.product_operands)
and their contraction axes, checked against what the operator computes, not against a
table: two operands that multiply each other give the same binary64 outputs when one is
scaled by powers of two along its contraction axis and the other by the reciprocals (each
product x_k y_k is unchanged exactly); an operand whose partner is formed inside the
operator (attention's v, multiplied by the softmax probabilities) reaches every output
from each slice along its contraction axis, as a summed axis does and a free axis does not."""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import numerics
from conftest import INSTANCES

PRODUCTS = [(tid, o) for tid, o in INSTANCES if o.product_operands]
# Which operands multiply each other (the spec's definitions: x @ y, x weight^T, the
# convolutions' x * weight, q k^T); every other operand is multiplied by a factor the
# operator forms itself.
PARTNERS = {"matmul": ("x", "y"), "scaledMatmul": ("x", "y"), "contract": ("x", "y"),
            "linear": ("x", "weight"), "conv": ("x", "weight"),
            "convTranspose": ("x", "weight"), "attention": ("q", "k"),
            "multiheadAttention": ("q", "k")}
# Examples whose product contracts no axis: there the declared axis is a convention.
NO_CONTRACTION = {"contract-outer": "no paired axes (an outer product): the last axis"}


def _forward(o, xs):
    return o.rule(numerics.native("float64")).forward(list(xs))


def _along(a, axis, s):
    """``a`` times ``s`` along ``axis`` (counted from the end)."""
    shape = [1] * a.ndim
    shape[axis] = len(s)
    return a * np.reshape(s, shape)


def test_every_product_is_tested():
    assert PRODUCTS
    assert {o.name for _, o in PRODUCTS} == set(PARTNERS) | {"attentionFromScores"}


@pytest.mark.parametrize("tid,o", PRODUCTS, ids=[t for t, _ in PRODUCTS])
def test_partners_scaled_reciprocally_along_their_axes_leave_the_product(tid, o):
    if o.name not in PARTNERS or tid in NO_CONTRACTION:
        pytest.skip(NO_CONTRACTION.get(tid, "no operand partner: see the reach test"))
    a, b = PARTNERS[o.name]
    axes = o.product_operands
    rng = np.random.default_rng(5)
    xs = list(o.samples(rng))
    ia, ib = o.input_names.index(a), o.input_names.index(b)
    na, nb = xs[ia].shape[axes[a]], xs[ib].shape[axes[b]]
    # conv with groups: x's C channels pair with weight's C/groups, channel c with c mod C/g.
    assert max(na, nb) % max(min(na, nb), 1) == 0, (a, na, b, nb)
    e = rng.integers(1, 4, min(na, nb)) * rng.choice((-1, 1), min(na, nb))
    sa, sb = np.tile(2.0 ** e, na // len(e)), np.tile(2.0 ** -e, nb // len(e))
    before = _forward(o, xs)
    xs[ia], xs[ib] = _along(xs[ia], axes[a], sa), _along(xs[ib], axes[b], sb)
    after = _forward(o, xs)
    for y0, y1 in zip(before, after):
        np.testing.assert_array_equal(y1, y0)


@pytest.mark.parametrize("tid,o", PRODUCTS, ids=[t for t, _ in PRODUCTS])
def test_an_unpartnered_operand_reaches_every_output_from_each_slice(tid, o):
    alone = [n for n in o.product_operands if n not in PARTNERS.get(o.name, ())]
    if not alone:
        pytest.skip("every operand has a partner: see the scaling test")
    xs = list(o.samples(np.random.default_rng(6)))
    before = _forward(o, xs)
    for name in alone:
        i, axis = o.input_names.index(name), o.product_operands[name]
        for j in range(xs[i].shape[axis]):
            moved = list(xs)
            moved[i] = np.copy(xs[i])
            np.moveaxis(moved[i], axis, 0)[j] += 1.0      # one slice along the axis
            after = _forward(o, moved)
            for y0, y1 in zip(before, after):
                assert np.all(y1 != y0), (name, axis, j)
