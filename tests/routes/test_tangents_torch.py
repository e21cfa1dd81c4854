"""Every rule's tangent (Rule.jvp) against PyTorch's forward mode (torch.func.jvp) in
float64, one value input at a time, at negative, zero and positive inputs.

The oracle is another framework's forward-mode AD: the torch call of each operator in the
torch table (kernels/torch_calls.py) differentiated by torch.func.jvp along one input while
the other inputs stay constants -- torch's "no tangent" (a symbolic zero), as a graph
constant has none in a model run (a captured ``x ** 3.0``).  The rule runs under numpy's
binary64 (numerics.native), or the 200-bit reference where numpy lacks the capability.

Inputs: the operator's ordinary and edge draws (they meet its validation: index ranges,
probabilities, shapes), their value inputs mapped to -|x| (negative), |x| (positive), and
with every other element zeroed (zero).  The tangent along input k is a nonzero dyadic
direction on k alone.  Compared (test_torch_impl's tolerance, normwise):
|rule - torch| <= 2**-30 (|torch| + s), s the largest finite |torch| of the output; NaN
where torch's tangent is NaN, the same infinity where it is infinite.  Left out, each with
its reason in the code: points where the forward value is not finite (outside the
operator's domain, or an overflow: a tangent there is a convention, not a derivative),
points where the torch table declares another convention (kernels/torch_calls.py:
``Convention`` of the route ``tangent``), edge draws of extreme magnitude, draws the rule's
validation refuses, and TORCH_WRONG; SELECTING operators get tie-free draws.
Test ids: ``<operator>[-<example>]-tangent-torch``.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (pip install roundoff-coverage[torch]): the "
                    "forward-mode comparison needs it")

from roundoff_coverage import numerics, routes  # noqa: E402
from roundoff_coverage.kernels import torch_calls as TC  # noqa: E402
from roundoff_coverage.routes.errors import RouteError  # noqa: E402
from conftest import EXAMPLES  # noqa: E402

RTOL = 2.0 ** -30
SIGNS = ("negative", "zero", "positive")
TABLE_EXAMPLES = [(n, label, attrs) for n, label, attrs in EXAMPLES if n in TC.TABLE]
# Where torch's forward mode is not the derivative: (operator, mode) -> why.
TORCH_WRONG = {
    ("scatter", "prod"): "torch's forward mode of scatter_reduce(prod) is 0 along self (its "
                         "reverse mode has the product of the updates, the rule's value); the "
                         "rule's tangent meets 256-bit central differences "
                         "(test_routes_registry)",
}
# Operators whose value outputs select among their inputs: at a tie -- which the sign
# variants make, |-a| = |a|, and the zero variant's repeated zeros -- which entry is
# returned, and so which tangent comes with it, is each framework's choice.
SELECTING = {"topk"}


def _cases():
    params = []
    for name, label, attrs in TABLE_EXAMPLES:
        ident = f"{name}-{label}" if label else name
        o = routes.op(name, **attrs)
        marks = [pytest.mark.xfail(strict=True, reason=kf.reason)
                 for kf in o.decl.known_failures
                 if kf.route == "tangent-torch" and kf.example in (None, ident)]
        params.append(pytest.param(o, id=f"{ident}-tangent-torch", marks=marks))
    return params


def _signed(x, sign, port):
    """A value input's draw moved to ``sign`` (module docstring); other ports unchanged."""
    if not (port.differentiable and port.scalar):
        return x
    x = np.asarray(x, dtype=np.float64)
    if sign == "negative":
        return -np.abs(x)
    if sign == "positive":
        return np.abs(x)
    flat = x.reshape(-1).copy()
    flat[::2] = 0.0
    return flat.reshape(x.shape)


def _direction(rng, port):
    """A nonzero dyadic tangent in [-1, -1/8] U [1/8, 1]: a zero element would hide the
    partial derivative it multiplies."""
    shape = port.array_shape
    return np.asarray(rng.choice([-1.0, 1.0], shape) * rng.integers(1, 9, shape) / 8.0)


def _extreme(xs, ports):
    """Whether a value input holds a nonzero magnitude outside [2**-64, 2**64] (edge draws
    near the format's extremes)."""
    for x, p in zip(xs, ports):
        if p.differentiable and p.scalar:
            a = np.abs(np.asarray(x, dtype=np.float64))
            a = a[np.isfinite(a) & (a > 0)]
            if ((a < 2.0 ** -64) | (a > 2.0 ** 64)).any():
                return True
    return False


def _untied(rng, x, sign, port):
    """A value input of ``sign`` without repeated values (SELECTING): distinct magnitudes
    k/n, k = 1..n in random order; the zero variant mixes signs and holds one 0."""
    if not (port.differentiable and port.scalar):
        return x
    shape = np.shape(x)
    n = max(1, int(np.prod(shape)))
    v = (rng.permutation(n) + 1.0) / n
    if sign == "negative":
        v = -v
    elif sign == "zero":
        v = v * rng.choice([-1.0, 1.0], n)
        v[rng.integers(n)] = 0.0
    return v.reshape(shape)


def _conventions(call, o, xs, ts, j):
    """Elements of output j where the torch table declares that torch's tangent follows
    another convention than the rule's (a tie of fmax, hypot at the origin...): a mask, or
    True for the whole output."""
    vs = [np.zeros(p.array_shape) if t is None and p.differentiable else t
          for t, p in zip(ts, o.inputs)]
    mask = np.zeros(o.outputs[j].array_shape, bool)
    for c in call.conventions:
        if c.route != "tangent":
            continue
        got = c.exact(torch, o.attrs, xs, vs)
        rep = None if got is None else got[j]
        if rep is None:
            continue
        if isinstance(rep, str):                            # TC.DIFFERS: the whole output
            return True
        mask |= np.vectorize(lambda v: v is not None, otypes=[bool])(
            np.asarray(rep, dtype=object)).reshape(mask.shape)
    return mask


def _tensor(x, port):
    a = np.array(x)
    if port.scalar:
        return torch.from_numpy(a.astype(np.float64))
    if port.kind == "index":
        return torch.from_numpy(a.astype(np.int64))
    return torch.from_numpy(a)


def _torch_tangents(o, call, xs, k, t):
    """torch's (outputs, output tangents) along input k, the others constants."""
    ins = [_tensor(x, p) for x, p in zip(xs, o.inputs)]
    conv = {"d": torch.float64} if o.name in TC.CONVERSIONS else {}

    def f(v):
        args = list(ins)
        args[k] = v
        ys = call.fn(torch, o.attrs, *args, **conv)
        ys = tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)
        return tuple(ys[j] for j, p in enumerate(o.outputs) if p.differentiable)
    ys, ts = torch.func.jvp(f, (ins[k],), (torch.from_numpy(t),))
    return [y.detach().double().numpy() for y in ys], [v.detach().double().numpy() for v in ts]


def _rule(o):
    return o.rule(numerics.native("float64")) or o.rule(numerics.reference(200))


@pytest.mark.parametrize("o", _cases())
def test_tangent_matches_torch_forward_mode(o):
    call = TC.of_op(o)
    if call is None:
        pytest.skip(f"torch: {TC.missing(o)}")
    if call.no_jvp:
        pytest.skip(f"torch.func.jvp does not run the call: {call.no_jvp}")
    if not o.has_jvp:
        pytest.skip(o.no_jvp_reason())
    wrong = TORCH_WRONG.get((o.name, getattr(o.attrs, "mode", None)))
    if wrong:
        pytest.skip(wrong)
    rule = _rule(o)
    if rule is None:
        pytest.skip(f"no float64 rule ({o.need})")
    value_ins = [k for k, p in enumerate(o.inputs) if p.differentiable]
    outs = [j for j, p in enumerate(o.outputs) if p.differentiable]
    if not value_ins or not outs:
        pytest.skip("no value input or output: no tangent")
    rng = np.random.default_rng(zlib.crc32(repr((o.name, o.attrs)).encode()))
    compared, skipped = 0, {}
    for kind in ("ordinary", "edges"):
        if kind not in o.decl.samples:
            continue
        base = o.samples(rng, None, kind)
        for sign in SIGNS:
            xs = [_signed(x, sign, p) for x, p in zip(base, o.inputs)]
            if call.rejects is not None and call.rejects(o.attrs, xs):
                skipped["torch refuses the draw"] = call.rejects(o.attrs, xs)
                continue
            if o.name in SELECTING:
                xs = [_untied(rng, x, sign, p) for x, p in zip(xs, o.inputs)]
            if kind == "edges" and _extreme(xs, o.inputs):
                # float64 intermediates (x^2 + y^2, 1/x) over- or underflow there in one
                # framework's formula and not in the other's: formulas differ, not derivatives.
                skipped["edge draw of extreme magnitude"] = kind
                continue
            try:
                rule.validate(xs)
            except RouteError as exc:           # the sign moved the draw out of the domain
                skipped["validate refuses the draw"] = str(exc)
                continue
            for k in value_ins:
                t = _direction(rng, o.inputs[k])
                ts = [t if i == k else None for i in range(len(o.inputs))]
                mine = rule.jvp(xs, ts)
                ys, theirs = _torch_tangents(o, call, xs, k, t)
                for j, y, want in zip(outs, ys, theirs):
                    got = np.asarray(rule.xp.to_float64(mine[j]) if hasattr(rule.xp, "to_float64")
                                     else mine[j], dtype=np.float64).reshape(want.shape)
                    # Outside the domain, or past an overflow, the forward value is not finite
                    # and its tangent is a convention, not a derivative.
                    keep = np.isfinite(y)
                    if not keep.all():
                        skipped["forward value not finite"] = int((~keep).sum())
                    conv = _conventions(call, o, xs, ts, j)
                    if conv is True:
                        skipped["torch's convention"] = o.output_names[j]
                        continue
                    keep &= ~conv.reshape(keep.shape)
                    got, want = got[keep], want[keep]
                    where = (o.name, kind, sign, o.input_names[k], o.output_names[j])
                    assert np.array_equal(np.isnan(got), np.isnan(want)), (where, xs, got, want)
                    inf = np.isinf(want)
                    assert np.array_equal(got[inf], want[inf]), (where, got, want)
                    fin = np.isfinite(want)
                    scale = float(np.abs(want[fin]).max()) if fin.any() else 0.0
                    err = np.abs(got[fin] - want[fin])
                    # + 1: a tangent that cancels to 0 (a loss flat along the direction)
                    # keeps both frameworks' float64 roundoff of its terms, of order 1 (the
                    # directions are at most 1 in magnitude, the ordinary inputs of order 1).
                    assert (err <= RTOL * (np.abs(want[fin]) + scale + 1)).all(), \
                        (where, xs, got, want)
                    compared += int(fin.sum())
    assert compared, f"nothing compared: {skipped}"
