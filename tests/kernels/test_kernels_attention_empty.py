"""attentionFromScores and multiheadAttention kernels at empty extents, in numba's CUDA
simulator (the cases the attention kernels declare with ``emulated=False``, run with every
other case of the kernel table: tests/kernel_harness.py).  The spec's CUDA column says "yes" for
both, at every attribute: an empty batch, query or value axis gives empty outputs, an empty
contraction (head_dim 0, value_dim 0 in the gradient's g @ v^T, no queries in w^T g) the
empty sum +0.  The expected values come from a host model written here from the rule's
formulas (binary64 arithmetic rounded into the format after every operation, sequential
sums), independent of the kernels; the emulated rule itself cannot evaluate these extents
(numerics.emulated's reductions refuse empty operands), so the harness's check compares
their ports' shapes only.
"""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import kernels
from roundoff_coverage import numerics
from roundoff_coverage import routes
from kernel_harness import unpack

FMTS = ("binary64", "bfloat16", "float8_e4m3fn")
# The empty extents the spec's "yes" promises (the kernels' test instances must cover them).
INSTANCES = (
    ("attentionFromScores", {"queries": 0}),
    ("attentionFromScores", {"value_dim": 0}),
    ("attentionFromScores", {"batch": (2, 0)}),
    ("multiheadAttention", {"queries": 0}),
    ("multiheadAttention", {"head_dim": 0}),
    ("multiheadAttention", {"value_head_dim": 0}),
    ("multiheadAttention", {"batch": (0,)}),
)


# ----- the host model: every operation rounded once into the format ----------------------------
class Model:
    def __init__(self, fmt):
        self.fmt = fmt

    def r(self, v):
        v = np.asarray(v, dtype=np.float64)
        return formats.round_to(v, self.fmt).reshape(v.shape)

    def mm(self, x, y, scale=None):
        """x[n, k] @ y[k, m]: products rounded, summed left to right; +0 at k = 0."""
        out = np.zeros((x.shape[0], y.shape[1]))
        for i in range(x.shape[0]):
            for j in range(y.shape[1]):
                acc = 0.0
                for t in range(x.shape[1]):
                    p = self.r(x[i, t] * y[t, j])
                    acc = p if t == 0 else self.r(acc + p)
                out[i, j] = acc if scale is None else self.r(acc * scale)
        return out

    def softmax(self, s):
        out = np.zeros(s.shape)
        for i, row in enumerate(s):
            m = row.max()
            e = [self.r(np.exp(self.r(v - m))) for v in row]
            total = e[0]
            for v in e[1:]:
                total = self.r(total + v)
            out[i] = [self.r(v / total) for v in e]
        return out

    def lin(self, w, t, scale=None):
        """w * (t - sum_j t_j w_j) per row, times scale when given."""
        out = np.zeros(w.shape)
        for i in range(w.shape[0]):
            s = 0.0
            for j in range(w.shape[1]):
                p = self.r(t[i, j] * w[i, j])
                s = p if j == 0 else self.r(s + p)
            for j in range(w.shape[1]):
                v = self.r(w[i, j] * self.r(t[i, j] - s))
                out[i, j] = v if scale is None else self.r(v * scale)
        return out

    def attend(self, q, k, v, g, scale):
        """One (batch, head) block: (out, gq, gk, gv) of softmax(scale q k^T) v."""
        w = self.softmax(self.mm(q, k.T, scale))
        out = self.mm(w, v)
        if g is None:
            return out, None, None, None
        gs = self.lin(w, self.mm(g, v.T), scale)
        return out, self.mm(gs, k), self.mm(gs.T, q), self.mm(w.T, g)

    def from_scores(self, s, v, g):
        w = self.softmax(s)
        out = self.mm(w, v)
        if g is None:
            return out, None, None
        return out, self.lin(w, self.mm(g, v.T)), self.mm(w.T, g)


def expected(c):
    """The route's outputs from the host model (None where the kernel gives None)."""
    o, xs, model = c["op"], c["xs"], Model(formats.get(c["fmt"]))
    g = None if c["cots"] is None else model.r(c["cots"][0])
    lead = o.attrs.batch
    if o.name == "attentionFromScores":
        s, v = xs
        outs = [np.zeros(p.shape) for p in o.outputs + o.inputs]
        for b in np.ndindex(*lead):
            res = model.from_scores(s[b], v[b], None if g is None else g[b])
            for arr, r in zip(outs, res):
                if r is not None:
                    arr[b] = r
        return outs[:1] if g is None else outs[1:]
    q, k, v, scale = xs
    h, d, dv = o.attrs.heads, o.attrs.head_dim, o.attrs.value_head_dim
    outs = [np.zeros(p.shape) for p in o.outputs + o.inputs[:3]]
    for b in np.ndindex(*lead):
        for j in range(h):
            cols = slice(j * d, (j + 1) * d), slice(j * d, (j + 1) * d), slice(j * dv, (j + 1) * dv)
            blocks = [a[b][:, c] for a, c in zip((q, k, v), cols)]
            res = model.attend(*blocks, None if g is None else g[b][:, cols[2]], float(scale))
            for arr, r, c in zip(outs, res, (cols[2],) + cols):
                if r is not None:
                    arr[b + (slice(None), c)] = r
    return outs[:1] if g is None else outs[1:] + [None]


@pytest.fixture(scope="module")
def empty(simulated):
    """(the table's cases at empty extents, {case id: result})."""
    cases, results = simulated
    return [c for c in cases if not c["instance"].emulated], results


def same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all(a.view(np.int64) == b.view(np.int64)))


def test_attention_kernels_accept_empty_extents_and_match_the_model_bit_for_bit(empty):
    """Spec, CUDA column of attentionFromScores and multiheadAttention: "yes" (an entry at
    every attribute).  Each case's outputs have the ports' shapes and equal the host model
    bit for bit, signed zeros included."""
    cases, results = empty
    nonempty = 0
    for c in cases:
        got = results[c["id"]]
        assert "error" not in got, f"{c['id']}: {got.get('error')}"
        outs = [unpack(a) for a in got["outputs"]]
        want = expected(c)
        ports = c["op"].outputs if c["route"] == "forward" else c["op"].inputs
        assert len(outs) == len(want) == len(ports), c["id"]
        for out, w, p in zip(outs, want, ports):
            assert (out is None) == (w is None) == (not p.differentiable), c["id"]
            if out is None:
                continue
            assert out.shape == p.shape, (c["id"], out.shape, p.shape)
            assert same(out, w), (c["id"], out.ravel()[:6], w.ravel()[:6])
            nonempty += out.size > 0
    # Not only empty arrays: the zeros of empty sums and head_dim 0's averages are compared.
    assert nonempty >= 20


def test_the_model_agrees_with_the_rule_in_binary64(empty):
    """The host model is the rule's mathematics: in binary64 it matches the operator's rule
    under numpy (which evaluates these extents) to a few ulps."""
    cases, _ = empty
    for c in cases:
        if c["fmt"] != "binary64":
            continue
        rule = c["op"].rule(numerics.native("float64"))
        ref = rule.forward(c["xs"]) if c["route"] == "forward" else \
            rule.backward(c["xs"], c["cots"])
        for w, e in zip(expected(c), ref):
            assert (w is None) == (e is None)
            if w is not None:
                assert np.shape(w) == np.shape(e)
                assert np.allclose(w, e, rtol=1e-15, atol=0), c["id"]


def test_the_cases_cover_every_empty_extent(empty):
    """Each empty extent of INSTANCES, in every format of FMTS, on both routes, is a case the
    attention kernels declare; no other case skips the emulated check."""
    cases, _ = empty
    got = {(c["op"], c["fmt"], c["route"]) for c in cases}
    want = set()
    for name, attrs in INSTANCES:
        o = routes.op(name, **attrs)
        o.check()
        assert kernels.of_op(o).routes == ("forward", "gradient")
        want |= {(o, fmt, route) for fmt in FMTS for route in ("forward", "gradient")}
    assert got == want
