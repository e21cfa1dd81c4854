"""conv, convTranspose, pool and smoothMaxPool: output extents against PyTorch's documented
formulas (written out here), known answers by the definition over Fractions, the adjoint
relation between conv and convTranspose (exact), the max-pool tie convention, the window
checks and smoothMaxPool's validate."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.errors import RouteError
from roundoff_coverage.routes.families import conv_pool
from conftest import fr, mp_context


def torch_pool_extent(n, k, s, p, d, ceil):
    """torch.nn.MaxPool1d's documented L_out = floor((L + 2p - d(k-1) - 1)/s + 1) (ceil in
    ceil_mode), and in ceil mode a window starting in the right padding is dropped
    (aten pooling_output_shape: if (out - 1) * s >= L + p then out - 1)."""
    num = n + 2 * p - d * (k - 1) - 1
    out = (math.ceil(num / s) if ceil else math.floor(num / s)) + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def test_pool_extents_follow_pytorchs_formula():
    seen = 0
    for n, k, s, p, d, ceil in itertools.product(range(1, 8), range(1, 4), range(1, 4),
                                                 range(0, 2), range(1, 3), (False, True)):
        o = routes.op("pool", shape=(1, n), kernel=(k,), stride=(s,), padding=(p,),
                      dilation=(d,), ceil_mode=ceil)
        if o.problem():
            continue
        seen += 1
        assert o.outputs[0].shape == (1, torch_pool_extent(n, k, s, p, d, ceil)), o
    assert seen > 300
    o = routes.op("pool", shape=(2, 5, 6), kernel=(2, 3), stride=(2, 2), padding=(1, 1),
                  dilation=(1, 1), ceil_mode=True)
    assert o.outputs[0].shape == (2, torch_pool_extent(5, 2, 2, 1, 1, True),
                                  torch_pool_extent(6, 3, 2, 1, 1, True)) == (2, 3, 4)


def test_conv_and_conv_transpose_extents_follow_pytorchs_formulas():
    for n, k, s, p, d in itertools.product(range(1, 6), range(1, 4), range(1, 3), range(0, 2),
                                           range(1, 3)):
        o = routes.op("conv", shape=(1, 1, n), out_channels=1, kernel=(k,), stride=(s,),
                      padding=(p,), dilation=(d,))
        if not o.problem():
            # Conv1d: L_out = floor((L + 2p - d(k-1) - 1)/s + 1)
            assert o.outputs[0].shape[-1] == (n + 2 * p - d * (k - 1) - 1) // s + 1
        for q in range(max(s, d)):
            t = routes.op("convTranspose", shape=(1, 1, n), out_channels=1, kernel=(k,),
                          stride=(s,), padding=(p,), dilation=(d,), output_padding=(q,))
            if not t.problem():
                # ConvTranspose1d: L_out = (L - 1)s - 2p + d(k-1) + output_padding + 1
                assert t.outputs[0].shape[-1] == (n - 1) * s - 2 * p + d * (k - 1) + q + 1


def conv_by_definition(x, w, b, stride, padding, dilation, groups):
    """Fraction cross-correlation over a 2-D spatial grid, by the formula."""
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.empty((n, co, oh, ow), dtype=object)
    for i, o, r, s in itertools.product(range(n), range(co), range(oh), range(ow)):
        total = Fraction(b[o])
        g = o // (co // groups)
        for j, u, v in itertools.product(range(cg), range(kh), range(kw)):
            y = r * stride[0] + u * dilation[0] - padding[0]
            z = s * stride[1] + v * dilation[1] - padding[1]
            if 0 <= y < h and 0 <= z < wd:
                total += Fraction(w[o, j, u, v]) * Fraction(x[i, g * cg + j, y, z])
        out[i, o, r, s] = total
    return out


@pytest.mark.parametrize("attrs", [
    dict(shape=(1, 2, 3, 4), out_channels=2, kernel=(2, 2), stride=(1, 2), padding=(1, 0),
         dilation=(1, 1), groups=1),
    dict(shape=(2, 2, 4, 3), out_channels=4, kernel=(2, 1), stride=(2, 1), padding=(0, 1),
         dilation=(2, 1), groups=2),
])
def test_conv_known_answer_by_definition(attrs):
    rng = np.random.default_rng(5)
    o = routes.op("conv", **attrs)
    x, w, b = (rng.integers(-6, 7, p.shape) / 4.0 for p in o.inputs)
    (y,) = o.rule(numerics.exact()).forward([x, w, b])
    want = conv_by_definition(x, w, b, attrs["stride"], attrs["padding"], attrs["dilation"],
                              attrs["groups"])
    assert y.shape == want.shape and (y == want).all()


@pytest.mark.parametrize("n,k,s,p,d,groups", [(5, 3, 2, 1, 1, 1), (4, 2, 1, 0, 2, 2),
                                              (6, 2, 3, 1, 2, 1)])
def test_conv_transpose_is_the_adjoint_of_conv(n, k, s, p, d, groups):
    """<conv(x, w), y> = <x, convTranspose(y, w)> exactly (zero biases), the output padding
    chosen so that convTranspose returns x's extent."""
    conv = routes.op("conv", shape=(1, 2, n), out_channels=2, kernel=(k,), stride=(s,),
                     padding=(p,), dilation=(d,), groups=groups)
    m = conv.outputs[0].shape[-1]
    q = n - ((m - 1) * s - 2 * p + d * (k - 1) + 1)
    tr = routes.op("convTranspose", shape=(1, 2, m), out_channels=2, kernel=(k,), stride=(s,),
                   padding=(p,), dilation=(d,), output_padding=(q,), groups=groups)
    tr.check()
    assert tr.outputs[0].shape == conv.inputs[0].shape
    rng = np.random.default_rng(n * 7 + k)
    x = rng.integers(-5, 6, (1, 2, n)) / 2.0
    w = rng.integers(-5, 6, conv.inputs[1].shape) / 4.0
    y = rng.integers(-5, 6, (1, 2, m)) / 2.0
    xp = numerics.exact()
    (cx,) = conv.rule(xp).forward([x, w, np.zeros(2)])
    (ty,) = tr.rule(xp).forward([y, w, np.zeros(2)])
    lhs = sum((cx * fr(y)).ravel().tolist(), Fraction(0))
    rhs = sum((fr(x) * ty).ravel().tolist(), Fraction(0))
    assert lhs == rhs


def test_conv_transpose_known_answer():
    # 1-D, stride 2, kernel 2: each input spreads x[i] * w over positions 2i, 2i + 1.
    o = routes.op("convTranspose", shape=(1, 1, 3), out_channels=1, kernel=(2,), stride=(2,))
    (y,) = o.rule(numerics.exact()).forward([np.array([[[1.0, 2.0, -1.0]]]),
                                             np.array([[[3.0, 0.5]]]), np.array([1.0])])
    assert y.tolist() == [[[4, Fraction(3, 2), 7, 2, -2, Fraction(1, 2)]]]
    o = o.replace(kernel=(3,), padding=(1,), output_padding=(1,))
    (y,) = o.rule(numerics.exact()).forward([np.array([[[1.0, 2.0, -1.0]]]),
                                             np.array([[[3.0, 0.5, 2.0]]]), np.array([0.0])])
    # Full: [3, 0.5, 2 + 6, 1, 4 - 3, -0.5, -2, 0]; padding 1 crops one at each end.
    assert y.tolist() == [[[Fraction(1, 2), 8, 1, 1, Fraction(-1, 2), -2]]]


def test_conv_accumulates_under_the_policy():
    o = routes.op("conv", shape=(1, 1, 4), out_channels=1, kernel=(4,))
    x = np.array([[[1.0, 2.0 ** -8, 2.0 ** -8, 2.0 ** -8]]])
    w, b = np.ones((1, 1, 4)), np.zeros(1)
    seq = o.rule(numerics.emulated("bfloat16")).forward([x, w, b])[0]
    pair = o.rule(numerics.emulated("bfloat16", policy="pairwise")).forward([x, w, b])[0]
    # Sequential: 1 + 2**-8 ties to 1 three times; pairwise: 1 + (2**-8 + 2**-8) = 1 + 2**-7.
    assert float(seq.ravel()[0]) == 1.0 and float(pair.ravel()[0]) == 1.0 + 2.0 ** -7


@pytest.mark.parametrize("stride, padding", [((1, 1), (1, 1)), ((2, 1), (1, 0)),
                                             ((2, 2), (0, 1))])
@pytest.mark.parametrize("chunk", [None, 7])
def test_conv_input_gradient_order_per_position(stride, padding, chunk, monkeypatch):
    # The input gradient's documented order, built here position by position: the products
    # over output channels, each channel's (window, offset) pairs in window order, then exact
    # zeros up to the largest count M; one policy dot product each (pairwise: the zeros'
    # places shape the tree).  Border positions, stride phases and the interior all appear;
    # ``chunk``: the matrix products cut into pieces of a few positions.
    if chunk:
        monkeypatch.setattr(conv_pool, "CHUNK", chunk)
    rng = np.random.default_rng(7)
    shape, k, co = (1, 2, 5, 6), (3, 2), 3
    o = routes.op("conv", shape=shape, out_channels=co, kernel=k, stride=stride,
                  padding=padding, dilation=(1, 1))
    assert o.problem() is None
    bk = numerics.emulated("bfloat16", policy="pairwise")
    x = bk.asarray(rng.standard_normal(shape))
    w = bk.asarray(rng.standard_normal((co, shape[1]) + k))
    y = o.rule(bk).forward([x, w, bk.asarray(np.zeros(co))])[0]
    gy = bk.asarray(rng.standard_normal(y.shape))
    gx = o.rule(bk).backward([x, w, bk.asarray(np.zeros(co))], [gy])[0]
    padded = tuple(n + 2 * p for n, p in zip(shape[2:], padding))
    pairs = {}
    for oi in itertools.product(*(range(n) for n in y.shape[2:])):       # window order
        for ki in itertools.product(*(range(n) for n in k)):
            q = tuple(a * s + b for a, s, b in zip(oi, stride, ki))
            pairs.setdefault(q, []).append((oi, ki))
    m = max(len(v) for v in pairs.values())
    for c in range(shape[1]):
        for q in itertools.product(*(range(n) for n in padded)):
            inner = tuple(a - p for a, p in zip(q, padding))
            if not all(0 <= a < n for a, n in zip(inner, shape[2:])):
                continue
            terms = []
            for j in range(co):
                got = pairs.get(q, [])
                terms += [(gy[(0, j) + oi], w[(j, c) + ki]) for oi, ki in got]
                terms += [(0.0, 0.0)] * (m - len(got))
            a, b = (bk.asarray(np.array(t)) for t in zip(*terms))
            want = bk.dot(a, b)
            assert float(gx[(0, c) + inner]) == float(want), (c, q)


# ----- pooling ----------------------------------------------------------------------------------
def test_average_pool_divisors_with_padding_and_ceil_mode():
    x = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    o = routes.op("pool", shape=(1, 6), mode="average", kernel=(3,), stride=(2,), padding=(1,),
                  ceil_mode=True)
    # Windows start at -1, 1, 3, 5 (ceil mode keeps the last: 5 < 6 + 1).  Padded input
    # [0, 1..6, 0]; counting padding the window clipped to [-1, 7): sizes 3, 3, 3, 2.
    (y,) = o.rule(numerics.exact()).forward([x])
    assert y.tolist() == [[Fraction(3, 3), Fraction(9, 3), Fraction(15, 3), Fraction(6, 2)]]
    (y,) = o.replace(count_include_pad=False).rule(numerics.exact()).forward([x])
    assert y.tolist() == [[Fraction(3, 2), Fraction(9, 3), Fraction(15, 3), Fraction(6, 1)]]
    # The gradient spreads g / divisor over each window's input entries.
    (g,) = o.rule(numerics.exact()).backward([x], [np.array([[3.0, 3.0, 3.0, 2.0]])])
    assert g.tolist() == [[1, 2, 1, 2, 1, 2]]


def test_max_pool_known_answer_with_dilation_and_padding():
    x = np.arange(16, dtype=np.float64).reshape(1, 4, 4) % 5
    o = routes.op("pool", shape=(1, 4, 4), kernel=(2, 2), stride=(1, 2), padding=(1, 0),
                  dilation=(2, 1))
    (y,) = o.rule(numerics.exact()).forward([x])
    want = np.empty(o.outputs[0].shape, dtype=object)
    for r, c in itertools.product(*map(range, want.shape[1:])):
        vals = [x[0, r + 2 * u - 1, 2 * c + v] for u in range(2) for v in range(2)
                if 0 <= r + 2 * u - 1 < 4]
        want[0, r, c] = max(vals)
    assert y.tolist() == want.tolist()


@pytest.mark.parametrize("backend", ["exact", "reference", "bfloat16", "float64"])
def test_max_pool_splits_ties_equally(backend):
    xp = {"exact": numerics.exact, "reference": lambda: numerics.reference(64),
          "bfloat16": lambda: numerics.emulated("bfloat16"),
          "float64": lambda: numerics.native("float64")}[backend]()
    o = routes.op("pool", shape=(1, 5), kernel=(3,), stride=(2,))
    rule = o.rule(xp)
    x = np.array([[4.0, 1.0, 4.0, 2.0, 4.0]])
    (y,) = rule.forward([x])
    # Windows [0, 3) and [2, 5): each maximum 4 attained twice; x[2] is in both windows.
    (g,) = rule.backward([x], [np.array([[2.0, 6.0]])])
    assert np.asarray(xp.to_float64(y), dtype=np.float64).tolist() == [[4, 4]]
    assert np.asarray(xp.to_float64(g), dtype=np.float64).tolist() == [[1, 0, 4, 0, 3]]
    (t,) = rule.jvp([x], [np.array([[1.0, 5.0, 3.0, 7.0, -1.0]])])
    assert np.asarray(xp.to_float64(t), dtype=np.float64).tolist() == [[2, 1]]
    if backend != "exact":
        xn = np.array([[np.nan, 1.0, np.nan, 2.0, 4.0]])
        (y,) = rule.forward([xn])
        (g,) = rule.backward([xn], [np.array([[2.0, 6.0]])])
        y, g = (np.asarray(xp.to_float64(v), dtype=np.float64) for v in (y, g))
        assert np.isnan(y).tolist() == [[True, True]]
        assert g.tolist() == [[1, 0, 7, 0, 0]]


@pytest.mark.parametrize("attrs,text", [
    ({"shape": (1, 4), "kernel": (0,)}, "pool: kernel must be > 0 on every pooled axis (got [0])"),
    ({"shape": (1, 4), "kernel": (2,), "stride": (1, 1), "padding": (0,), "dilation": (1,)},
     "pool: stride must have one entry per pooled axis (kernel has 1, got [1, 1])"),
    ({"shape": (1, 4), "kernel": (2,), "stride": (0,)},
     "pool: stride must be > 0 on every pooled axis (got [0])"),
])
def test_pool_window_checks(attrs, text):
    with pytest.raises(RouteError) as err:
        routes.op("pool", **attrs).check()
    assert str(err.value) == text


# ----- smoothMaxPool ---------------------------------------------------------------------------
def test_smooth_max_pool_known_answer():
    ctx = mp_context(200)
    o = routes.op("smoothMaxPool", shape=(1, 3), kernel=(2,), stride=(1,))
    x = np.array([[1.0, 3.0, 2.0]])
    for beta in (1.0, -2.0, 0.5):
        (y,) = o.rule(numerics.reference(200)).forward([x, np.array(beta)])
        want = [ctx.log(ctx.exp(beta * a) + ctx.exp(beta * b)) / beta
                for a, b in ((1, 3), (3, 2))]
        for got, w in zip(np.ravel(y), want):
            assert abs(ctx.mpf(got) - w) < ctx.mpf(2) ** -190
    # Large beta: no overflow, close to the max; large negative beta: close to the min.
    (y,) = o.rule(numerics.native("float64")).forward([x, np.array(1000.0)])
    assert np.allclose(y, [[3.0, 3.0]], atol=1e-3)
    (y,) = o.rule(numerics.native("float64")).forward([x, np.array(-1000.0)])
    assert np.allclose(y, [[1.0, 2.0]], atol=1e-3)


@pytest.mark.parametrize("beta,shown", [(0.0, "0"), (np.inf, "inf"), (-np.inf, "-inf"),
                                        (np.nan, "nan")])
def test_smooth_max_pool_validate_rejects_zero_or_nonfinite_beta(beta, shown):
    o = routes.op("smoothMaxPool")
    with pytest.raises(RouteError) as err:
        routes.invoke(o, [np.zeros((1, 2, 4)), np.array(beta)], numerics.native("float64"))
    assert str(err.value) == f"smoothMaxPool: beta must be finite and nonzero (got {shown})"


@pytest.mark.parametrize("shape, co, k, s, p, d, g", [
    ((1, 8, 30, 30), 16, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 6, 17, 15), 4, (3, 2), (2, 2), (1, 0), (1, 2), 2),
    ((1, 3, 40, 40), 8, (7, 7), (2, 2), (3, 3), (1, 1), 1)])
def test_conv_input_gradient_in_double_double_against_torch(shape, co, k, s, p, d, g):
    # The exact sweeps' path (one product over every kernel offset: xp.exact_dot) at sizes
    # where strides, dilation, groups and padding cut many windows; oracle: torch's float64
    # conv2d backward, within a few float64 roundings of the exact value.
    torch = pytest.importorskip("torch")
    from roundoff_coverage.numerics.double_double import double_double
    rng = np.random.default_rng(0)
    o = routes.op("conv", shape=shape, out_channels=co, kernel=k, stride=s, padding=p,
                  dilation=d, groups=g)
    assert o.problem() is None
    bk = double_double()
    x, w = rng.standard_normal(shape), rng.standard_normal((co, shape[1] // g) + k)
    xs = [bk.asarray(x), bk.asarray(w), bk.asarray(np.zeros(co))]
    gy = rng.standard_normal(o.rule(bk).forward(xs)[0].shape)
    gx = np.asarray(o.rule(bk).backward(xs, [bk.asarray(gy)])[0])["hi"]
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w)
    torch.nn.functional.conv2d(tx, tw, stride=s, padding=p, dilation=d,
                               groups=g).backward(torch.tensor(gy))
    assert np.max(np.abs(gx - tx.grad.numpy())) <= 1e-14 * np.max(np.abs(gx))
