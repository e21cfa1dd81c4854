"""The ``torch`` and ``torch_compile`` implementations: PyTorch's own kernels (issue 23),
measured against exact values like any implementation -- operators in the coverage run
(base.Implementation, the seam; kernels/torch_calls.py, the table of calls) and whole models
in the model run (``model --implementations torch,torch_compile``).

Operators.  ``Torch`` evaluates a task's routes with the operator's torch call
(kernels.torch_calls) in the format's dtype -- bfloat16, float16 (binary16), float32,
float64; the float8 dtypes only for the conversions (cast, bitcast), torch having no float8
arithmetic -- on the drawn inputs, which are format values and so exact in the dtype:

- forward: the call; gradient: ``torch.autograd.grad`` of the value outputs with the draw's
  cotangents; tangent: forward-mode AD, ``torch.func.jvp`` with the draw's tangents.
- What torch cannot measure is a ``no_rule`` row with the reason, never an error: torch not
  installed, no counterpart (at these attributes), a dtype torch lacks (for the format, or
  for this operator: a probe call on zeros), a mode other than nearest_even, a call without
  forward-mode AD (the table's ``no_jvp``).
- ``numbers`` is numerics.native of the format (outputs are read into float64 exactly);
  ``model_task`` is None: torch follows its own kernels (accumulation types, orders), so no
  bound of the emulated model applies; ``policy_labels`` gives the one label ``torch``.
- ``annotate`` writes ``device`` (``cpu``, or ``cuda:<name>`` where torch sees a GPU) into
  each row and applies the table's conventions: a row whose draws meet one (torch's
  convention differs from the rule's: the gradient of max at a NaN, of max pooling at a
  tie...) gets the status ``convention``, the difference in ``reason``, and its metrics
  measured against the exact value of torch's own convention (the rule's exact value
  elsewhere: the reference rerun at the row's ``ref_prec``).

``TorchCompile`` (``torch_compile``) runs the same calls through ``torch.compile`` (Inductor),
compiled per task (operator instance and dtype: a fresh function, Dynamo's caches reset
first, so instances never share a compiled graph) and reused for every draw -- frozen scalars
(an epsilon, a slope) enter as numbers that Dynamo makes symbolic after one recompilation, so
a task compiles at most twice; gradients go through the compiled graph's AOTAutograd
backward.  On the CPU Inductor writes C++ and needs a
C++ compiler (g++, or $CXX): without one every route is a ``no_rule`` row saying so; any other
compile failure is an ``error`` row with torch's message on one line, never a crash.
Forward-mode AD does not run through compiled graphs (torch.func.jvp of a compiled function
runs it eagerly: Dynamo captures no graph under the transform): tangents are ``no_rule``
rows there.

Graphs (the model run: the same samples, cotangents and exact values as the emulated run).

- ``torch`` (eager): the factory's model converted to the format's dtype, its parameters and
  arguments set to the sample's values (the same format values the emulated run reads),
  exported and decomposed exactly as routes.from_torch captures it, then run node by node
  by an ``fx.Interpreter`` (the aten kernels eager mode calls), recording every node's value
  and, from autograd, the cotangent its output receives: a graph node whose name is the FX
  node's (the node of the translation that gives the aten result) is measured against its
  exact values.  The whole model's outputs and the gradients of its arguments and
  parameters come from the module itself with autograd, the cotangents those of the
  emulated run.
- ``torch_compile``: ``torch.compile`` of the model (Inductor; on the CPU it needs a C++
  compiler: without one its row is ``no_rule`` saying so): the whole model's outputs and
  gradients only, since compiled kernels fuse nodes and keep no intermediate values.

Rows: implementation ``torch`` / ``torch_compile``, policy ``torch`` (torch's own orders and
accumulation), attribution ``propagated``, device ``cpu``.  What torch cannot run gives one
``no_rule`` row per implementation with the reason: a target that is an artifact (the
model's code is needed), a format without a torch dtype, a mode other than nearest_even,
torch missing.

torch is optional (the extra ``[torch]``): it is imported inside functions only
(``torch_module``), so the registry discovers this module without it.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import shutil

import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.routes.frontends.torch import exported
from roundoff_coverage.routes.graph import INPUT, Ref, Trace

from .. import rows as R
from .base import run_routes, subject_rule
from ..measuring import METRIC_FIELDS, measure_port, per_sample, worst_case
from ..targets import DTYPES, FLOAT8, importable
from ..task import one_line, route_ports
from .base import Implementation

INSTALL = "torch is not installed (pip install roundoff-coverage[torch])"
POLICY_LABEL = "torch"
# torch's floating dtypes by catalog format name; float8 types serve conversions only.
# The row fields a measurement fills (reset before a convention's measurement).
_METRICS = METRIC_FIELDS                 # reset before a row is measured again
# Messages of torch calls that a dtype is not supported (the zero probe).
_UNSUPPORTED = ("not implemented for", "Unsupported dtype", "Expected both inputs to be Half",
                "doesn't support tensors of type")


@functools.lru_cache(maxsize=1)
def torch_module():
    """The torch module, or None when torch is not installed."""
    try:
        import torch       # the optional extra [torch]: imported where it is used only
    except ImportError:
        return None
    return torch


def torch_version() -> str | None:
    """torch's version where installed (the results' meta records it)."""
    t = torch_module()
    return None if t is None else str(t.__version__)


def compiler_missing() -> str | None:
    """Why torch.compile cannot run on the CPU here (Inductor writes C++ there and needs a C++
    compiler: g++, or $CXX), else None."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        return (f"torch.compile on the CPU needs a C++ compiler (Inductor writes C++): "
                f"{cxx} not found (install g++ or set CXX)")
    return None


def _catalog_name(fmt):
    return next((n for n, f in formats.CATALOG.items() if f == fmt), None)


def _device(t):
    """(torch device, the rows' label): the first GPU where torch sees one, else the CPU."""
    if t.cuda.is_available():
        return "cuda", f"cuda:{t.cuda.get_device_name(0)}"
    return "cpu", "cpu"


class Torch(Implementation):
    """The operator's torch call in the format's dtype (module docstring)."""

    name = "torch"
    order = 3
    compiled = False
    graphs = True
    node_values = True          # eager: every node's value, from an fx Interpreter
    graph_policy = POLICY_LABEL

    @classmethod
    def policy_labels(cls, policies) -> tuple:
        # torch follows its own accumulation types and orders whatever policy is asked for:
        # one task, labelled as such.
        return (POLICY_LABEL,)

    @classmethod
    def graph_problem(cls, target, config) -> str | None:
        if target is None or ":" not in target or target.endswith(".json"):
            return "the target is a graph artifact: torch runs the model's own code (give " \
                   "file.py:factory)"
        if config.format not in DTYPES:
            return f"torch has no dtype for {config.format} (it has {', '.join(DTYPES)})"
        if config.mode != "nearest_even":
            return f"torch rounds to nearest even only (not {config.mode})"
        if torch_module() is None:
            return INSTALL
        return None

    @classmethod
    def graph_traces(cls, target, graph, config, xs, cots, want_grad) -> list:
        return _model_traces(cls.compiled, target, graph, config, xs, cots, want_grad)

    def __init__(self, task, o, fmt):
        super().__init__(task, o, fmt)
        # start-up time: kernels loads numba's CUDA; only a torch task reads the call table.
        from roundoff_coverage.kernels import torch_calls
        self.table = torch_calls
        self.t, self.problem, self.call, self.dtype = torch_module(), None, None, None
        self.device, self.device_label = "cpu", "cpu"
        self.out, self.draws, self._fn, self.left_out = {}, None, None, None
        if self.t is None:
            self.problem = ("no_rule", INSTALL, "torch")
            return
        if task.mode != "nearest_even":
            self.problem = ("no_rule", f"torch rounds to nearest even only (mode {task.mode})",
                            f"mode {task.mode}")
            return
        self.call = torch_calls.of_op(o)
        if self.call is None:
            self.problem = ("no_rule", f"torch: {torch_calls.missing(o)}", "torch counterpart")
            return
        name = _catalog_name(fmt)
        conversion = o.name in torch_calls.CONVERSIONS
        if name in DTYPES or (conversion and name in FLOAT8):
            self.dtype = getattr(self.t, (DTYPES | FLOAT8)[name])
        elif name in FLOAT8:
            self.problem = ("no_rule", f"torch has {name} for conversions only (no float8 "
                                       f"arithmetic)", f"torch {name}")
            return
        else:
            self.problem = ("no_rule", f"torch has no dtype for {fmt.label}",
                            f"torch {fmt.label}")
            return
        try:
            self.numbers = numerics.native(name)
        except (TypeError, ValueError, LookupError) as exc:
            self.problem = ("no_rule", f"torch: no numpy dtype reads {fmt.label} "
                                       f"({one_line(exc)})", None)
            return
        self.device, self.device_label = _device(self.t)

    # ----- what it cannot measure ----------------------------------------------------------
    def problems(self, pending):
        if self.problem is not None:
            return dict.fromkeys(pending, self.problem)
        reason = self.o.no_rule_reason()
        if reason:
            return dict.fromkeys(pending, ("no_rule", reason, self.o.need))
        probe = self._probe()
        if probe:
            return dict.fromkeys(pending, ("no_rule", f"torch: {probe}",
                                           f"torch {self.dtype}"))
        out = {}
        for r in pending:
            if r == "tangent" and self.call.no_jvp:
                out[r] = ("no_rule", f"torch: {self.call.no_jvp}", "torch forward AD")
        return out

    def _probe(self) -> str | None:
        """torch's message where the call does not exist for these dtypes (a call on zeros
        of the port shapes), else None (any other failure is left to the evaluation)."""
        zeros = [np.zeros(p.array_shape, dtype=_zero_dtype(p)) for p in self.o.inputs]
        try:
            with self.t.no_grad():
                self._base(self.o)(*self._tensors(self.o, zeros))
        except Exception as exc:                              # noqa: BLE001 (a probe)
            text = one_line(exc)
            if any(s in text for s in _UNSUPPORTED):
                return text
        return None

    # ----- evaluation ------------------------------------------------------------------------
    def select(self, d):
        """The draws torch accepts (the table's ``rejects``: binary_cross_entropy refuses
        targets outside [0, 1]); the rows say how many were left out and why."""
        self.left_out = None
        rejects = self.call.rejects if self.call is not None else None
        if rejects is None:
            return d
        why = [rejects(d.op.attrs, xs) for xs in d.inputs]
        keep = [k for k, w in enumerate(why) if w is None]
        if len(keep) == len(why):
            return d
        reason = next(w for w in why if w is not None)
        self.left_out = f"{len(why) - len(keep)} of {len(why)} draws left out: {reason}"
        return d.subset(keep) if keep else d

    def _base(self, o):
        """The call on tensors in port order (the format's dtype passed to conversions)."""
        t, fn, a = self.t, self.call.fn, o.attrs
        if o.name in self.table.CONVERSIONS:
            dtype = self.dtype
            return lambda *xs: _tuple(fn(t, a, *xs, d=dtype))
        return lambda *xs: _tuple(fn(t, a, *xs))

    def _function(self, o):
        """The function evaluated for draws of instance ``o`` (built once per task)."""
        if self._fn is None or self._fn[0] != o:
            self._fn = (o, self._base(o))
        return self._fn[1]

    def _tensors(self, o, xs):
        return [_tensor(self.t, x, p, self.dtype, self.device) for x, p in zip(xs, o.inputs)]

    def evaluate(self, d, wanted):
        """{route: per-draw outputs (float64 at value ports), or the exception}."""
        self.draws = d
        if self.left_out is not None and d.inputs and self.call.rejects(d.op.attrs,
                                                                        d.inputs[0]):
            exc = RuntimeError(f"torch refuses every draw: {self.left_out}")
            self.out = dict.fromkeys(wanted, exc)
            return self.out
        fn = self._function(d.op)
        out = {r: [] for r in wanted}
        for xs, ts, cs in zip(d.inputs, d.tangents, d.cotangents):
            todo = [r for r in wanted if not isinstance(out[r], Exception)]
            try:
                got = self._draw(fn, d.op, xs, ts, cs, todo)
            except Exception as exc:                          # noqa: BLE001 (the forward)
                out = {r: _failure(self, exc) for r in wanted}
                break
            for r in todo:
                if isinstance(got[r], Exception):
                    out[r] = _failure(self, got[r])
                else:
                    out[r].append(got[r])
        self.out = out
        return out

    def _draw(self, fn, o, xs, ts, cs, wanted):
        """One draw's routes from one forward call (the gradient's graph recorded on it)."""
        ins = self._tensors(o, xs)
        vals = [i for i, p in enumerate(o.inputs) if p.differentiable]
        if "gradient" in wanted:
            for i in vals:
                ins[i].requires_grad_(True)
        ys = fn(*ins)
        _check_outputs(o, ys)
        got = {}
        if "forward" in wanted:
            got["forward"] = tuple(_numpy(y, p) for y, p in zip(ys, o.outputs))
        if "gradient" in wanted:
            try:
                got["gradient"] = self._gradient(o, ins, ys, vals, cs)
            except Exception as exc:                          # noqa: BLE001 (the route's)
                got["gradient"] = exc
        if "tangent" in wanted:
            try:
                got["tangent"] = self._tangent(fn, o, ins, vals, ts)
            except Exception as exc:                          # noqa: BLE001 (the route's)
                got["tangent"] = exc
        return got

    def _gradient(self, o, ins, ys, vals, cs):
        t = self.t
        outs, cots = [], []
        for y, p, c in zip(ys, o.outputs, cs):
            if p.differentiable and y.requires_grad:
                outs.append(y)
                cots.append(_tensor(t, c, p, self.dtype, self.device))
        grads = t.autograd.grad(outs, [ins[i] for i in vals], cots, allow_unused=True) \
            if outs else [None] * len(vals)
        by_input = dict(zip(vals, grads))
        res = []
        for i, p in enumerate(o.inputs):
            if i not in by_input:
                res.append(None)
            elif by_input[i] is None:
                res.append(np.zeros(p.array_shape))
            else:
                res.append(_numpy(by_input[i], p))
        return tuple(res)

    def _tangent(self, fn, o, ins, vals, ts):
        t = self.t
        fixed = [x.detach() for x in ins]
        value_out = [j for j, p in enumerate(o.outputs) if p.differentiable]

        def f(*primals):
            args = list(fixed)
            for i, v in zip(vals, primals):
                args[i] = v
            ys = fn(*args)
            return tuple(ys[j] for j in value_out)
        tangents = tuple(_tensor(t, ts[i], o.inputs[i], self.dtype, self.device) for i in vals)
        _, touts = t.func.jvp(f, tuple(fixed[i] for i in vals), tangents)
        res = [None] * len(o.outputs)
        for j, tv in zip(value_out, touts):
            res[j] = np.zeros(o.outputs[j].array_shape) if tv is None \
                else _numpy(tv, o.outputs[j])
        return tuple(res)

    def model_task(self, route):
        return None

    # ----- rows ------------------------------------------------------------------------------
    def annotate(self, route, rows):
        for row in rows:
            row["device"] = self.device_label
        conventions = [c for c in self.call.conventions if c.route == route] \
            if self.call is not None else []
        if conventions and self.draws is not None and not isinstance(self.out.get(route),
                                                                      Exception):
            _apply_conventions(self, route, rows, conventions)
        if self.left_out is not None:
            for row in rows:
                if row["status"] in R.MEASURED:
                    row["reason"] = "; ".join(filter(None, (row["reason"], self.left_out)))


class TorchCompile(Torch):
    """The same calls through ``torch.compile`` (module docstring)."""

    name = "torch_compile"
    order = 4
    compiled = True
    node_values = False         # compiled kernels fuse nodes and keep no intermediate values

    @classmethod
    def graph_problem(cls, target, config) -> str | None:
        # The model runs on the CPU (_model_traces), where Inductor needs a C++ compiler.
        return super().graph_problem(target, config) or compiler_missing()

    def problems(self, pending):
        out = super().problems(pending)
        if self.problem is None and not self.o.no_rule_reason() and self.device == "cpu":
            reason = compiler_missing()
            if reason is not None:
                return dict.fromkeys(pending, ("no_rule", reason, "C++ compiler"))
        for r in pending:
            if r == "tangent" and r not in out:
                out[r] = ("no_rule", "torch.compile: torch.func.jvp runs a compiled "
                                     "function eagerly (Dynamo captures no graph under the "
                                     "forward-mode transform): no compiled tangent to "
                                     "measure", "torch forward AD")
        return out

    def _function(self, o):
        if self._fn is None or self._fn[0] != o:
            import torch._dynamo
            # A fresh compilation per task: cached graphs of other instances (the same
            # lambda at other attributes) must not count against Dynamo's recompile limit,
            # past which it would silently run the eager call.
            torch._dynamo.reset()
            self._fn = (o, self.t.compile(self._base(o)))
        return self._fn[1]

    def _tensors(self, o, xs):
        # Frozen rank-0 scalars (an epsilon, a slope) go in as Python numbers: Dynamo makes
        # them symbolic inputs after the first recompilation (automatic dynamic), where a
        # tensor read with ``.item()`` would break the graph and specialize on every value.
        return [float(np.asarray(x, np.float64)) if p.kind == "frozen" and p.shape == ()
                else _tensor(self.t, x, p, self.dtype, self.device)
                for x, p in zip(xs, o.inputs)]


def _failure(impl, exc):
    """The exception a route's rows report: compile failures on one line, named."""
    if getattr(impl, "compiled", False) and type(exc).__module__.startswith("torch._"):
        return RuntimeError(f"torch.compile: {one_line(exc)}")
    return exc


IMPLEMENTATIONS = (Torch, TorchCompile)


# ----- tensors in, arrays out ------------------------------------------------------------------

def _tuple(ys):
    return tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)


def _zero_dtype(p):
    if p.kind == "bool":
        return bool
    if p.kind == "integer":
        return np.dtype(f"{'int' if p.signed else 'uint'}{p.width}")
    return np.int64 if p.kind == "index" else np.float64


def _tensor(t, x, p, dtype, device):
    """An input (or tangent, cotangent) at port ``p`` as a tensor: scalars in ``dtype``
    (format values: exact), indices int64, Booleans, words in their own dtype."""
    if p.scalar:
        a = np.array(x, dtype=np.float64)
        return t.from_numpy(a).to(device=device, dtype=dtype)
    a = np.array(x)
    if p.kind == "index":
        a = a.astype(np.int64)
    return t.from_numpy(a).to(device=device)


def _numpy(y, p):
    """An output tensor at port ``p`` as numpy: float64 at scalar ports (exact: every torch
    floating dtype widens exactly), the element type elsewhere."""
    y = y.detach().cpu()
    if p.scalar:
        return y.double().numpy().reshape(p.array_shape)
    a = y.numpy()
    if p.kind == "index":
        a = a.astype(np.int64)
    return a.reshape(p.array_shape)


def _check_outputs(o, ys):
    if len(ys) != len(o.outputs):
        raise RuntimeError(f"torch call of {o.name} returned {len(ys)} outputs, the ports say "
                           f"{len(o.outputs)}")
    for y, name, p in zip(ys, o.output_names, o.outputs):
        if tuple(y.shape) != tuple(p.array_shape):
            raise RuntimeError(f"torch call of {o.name} returned shape {list(y.shape)} at "
                               f"{name} (the port says {list(p.array_shape)})")


# ----- conventions -------------------------------------------------------------------------------

def _apply_conventions(impl, route, rows, conventions):
    """Rows of ports where a draw meets a convention: status ``convention``, the reasons, the
    metrics against torch's convention there and the rule's exact value elsewhere."""
    d, o, t = impl.draws, impl.draws.op, impl.t
    side = o.input_names if route == "gradient" else o.output_names
    per_draw, reasons, unmeasured = [], {}, set()
    for k, xs in enumerate(d.inputs):
        vs = d.cotangents[k] if route == "gradient" else \
            d.tangents[k] if route == "tangent" else None
        merged = [None] * len(side)
        for c in conventions:
            got = c.exact(t, o.attrs, xs, vs)
            if got is None:
                continue
            for j, arr in enumerate(got):
                if isinstance(arr, str):                     # DIFFERS: no exact value
                    reasons.setdefault(side[j], []).append(c.reason)
                    unmeasured.add(side[j])
                    continue
                if arr is None or not any(v is not None for v in np.asarray(arr).reshape(-1)):
                    continue
                reasons.setdefault(side[j], []).append(c.reason)
                merged[j] = arr if merged[j] is None else np.where(
                    np.equal(arr, None), merged[j], arr)
        per_draw.append(merged)
    hit = [row for row in rows if row["port"] in reasons]
    for row in [r for r in hit if r["port"] in unmeasured]:
        row["status"] = "convention"
        row["reason"] = "; ".join(dict.fromkeys(reasons[row["port"]])) + \
            " (torch's exact value is not computed there: measured against the rule's)"
    hit = [row for row in hit if row["port"] not in unmeasured]
    if not hit:
        return
    prec = max(int(row["ref_prec"] or impl.fmt.precision + 64) for row in hit)
    ref = run_routes(subject_rule(o, numerics.reference(prec)), d, [route])[route]
    if isinstance(ref, Exception):
        for row in hit:
            row["status"] = "convention"
            row["reason"] = "; ".join(dict.fromkeys(reasons[row["port"]])) + \
                f" (not remeasured: reference: {one_line(ref)})"
        return
    ports = {name: (i, p) for i, name, p in route_ports(o, route)}
    fresh = R.empty()
    for row in hit:
        i, port = ports[row["port"]]
        j = side.index(row["port"])
        comp, exact, where = [], [], []
        for k, ys in enumerate(impl.out[route]):
            c = np.asarray(ys[i], dtype=np.float64).reshape(-1)
            e = np.asarray(ref[k][i], dtype=object).reshape(-1).copy()
            rep = per_draw[k][j]
            if rep is not None:
                for n, v in enumerate(np.asarray(rep, dtype=object).reshape(-1)):
                    if v is not None:
                        e[n] = _mpf(v)
            comp.append(c)
            exact.append(e)
            where += [(k, n) for n in range(c.size)]
        comp, exact = np.concatenate(comp), np.concatenate(exact)
        for f in _METRICS:
            row[f] = fresh[f]
        ulp = measure_port(row, comp, exact, impl.fmt, None, None, None,
                           *per_sample(d, where))
        if ulp is not None:
            size = int(np.prod(port.shape, dtype=np.int64)) if port.shape else 1
            row["worst"] = worst_case(d, ulp, where, comp, exact, route, impl.fmt, size)
        row["status"] = "convention"
        row["reason"] = "; ".join(dict.fromkeys(reasons[row["port"]])) + \
            " (measured against torch's convention there)"


def _mpf(v):
    """A convention's exact value (a Fraction, a float for inf and NaN, an mpmath number) as
    an mpmath number: dyadic Fractions exactly, others rounded at 256 bits (as far beyond
    the format as the reference's working precision)."""
    import mpmath
    from mpmath import libmp
    if hasattr(v, "_mpf_"):
        return mpmath.mpf(v._mpf_)
    if isinstance(v, float) and not math.isfinite(v):
        return mpmath.mpf(v)
    from fractions import Fraction
    q = Fraction(v)
    den = q.denominator
    if den & (den - 1) == 0:
        return mpmath.mpf(libmp.from_man_exp(q.numerator, -(den.bit_length() - 1)))
    return mpmath.mpf(libmp.from_rational(q.numerator, den, 256, libmp.round_nearest))


# ----- graphs: the model run -----------------------------------------------------------------

def _model_traces(compiled, target, graph, config, xs, cots, want_grad) -> list:
    """Per sample, a routes.graph.Trace of what torch computed on the CPU (module docstring):
    node values (eager only), the whole model's outputs, and the gradients of its inputs
    (``cotangents`` at input Refs) when ``want_grad``."""
    torch = torch_module()
    model, args = importable(target)()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"the factory's model is a {type(model).__name__}, not a torch "
                         f"nn.Module: torch cannot run it")
    args = args if isinstance(args, tuple) else (args,)
    dtype = getattr(torch, DTYPES[config.format])
    n_args = len(args)
    out = []
    for x, c in zip(xs, cots):
        m = copy.deepcopy(model).to(dtype)
        params = dict(m.named_parameters())
        # An integer argument (ids, a mask: an index or frozen graph input) goes back in
        # its own dtype; floating ones in the format's.
        targs = [_graph_tensor(torch, v, dtype) if a.is_floating_point() else
                 torch.as_tensor(np.asarray(v)).to(a.dtype) for v, a in zip(x[:n_args], args)]
        with torch.no_grad():
            for name, v in zip(graph.input_names[n_args:], x[n_args:]):
                if name in params:
                    params[name].copy_(_graph_tensor(torch, v, dtype))
        tr = Trace(values={})
        if not compiled:
            _node_values(torch, m, targs, graph, tr, c if want_grad else None)
        run = torch.compile(m) if compiled else m
        if want_grad:
            for t in targs:
                if t.is_floating_point():
                    t.requires_grad_(True)
        outs = run(*targs)
        # The outputs as the capture names them: the leaves of an output object or tuple.
        outs = torch.utils._pytree.tree_leaves(outs)
        for ref, o in zip(graph.output_refs, outs):
            tr.values[ref] = _array(o)
        if want_grad:
            pairs = [(o, torch.as_tensor(np.asarray(ct), dtype=o.dtype))
                     for o, ct in zip(outs, c) if ct is not None and o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [ct for _, ct in pairs])
            for i, name in enumerate(graph.input_names):
                held = targs[i] if i < n_args else params.get(name)
                if held is not None and held.grad is not None:
                    tr.cotangents[Ref(INPUT, i)] = _array(held.grad)
        out.append(tr)
    return out


def _graph_tensor(torch, v, dtype):
    a = np.asarray(v)
    return torch.tensor(a, dtype=dtype) if a.dtype.kind == "f" else torch.tensor(a)


def _array(t) -> np.ndarray:
    """A tensor's values as numpy (floating ones widened exactly to float64)."""
    t = t.detach().cpu()
    return (t.double() if t.is_floating_point() else t).numpy()


def _node_values(torch, model, targs, graph, tr, cots=None) -> None:
    """Every graph node's value as eager torch computes it, and with ``cots`` (output
    cotangents) the cotangent its output receives from autograd: the model exported and
    decomposed as routes.from_torch does, run by an fx Interpreter keeping each node's
    tensor (``retain_grad``); nodes matched by name and shape."""
    ep = exported(model, targs)
    seen = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            first = value[0] if isinstance(value, (tuple, list)) and value else value
            if isinstance(first, torch.Tensor):
                seen[n.name] = first
                if first.requires_grad:
                    first.retain_grad()
            return value

    leaves = [t.detach().requires_grad_(cots is not None and t.is_floating_point())
              for t in targs]
    with torch.set_grad_enabled(cots is not None):
        outs = Recorder(ep.module()).run(*leaves)
    if cots is not None:
        outs = torch.utils._pytree.tree_leaves(outs)
        pairs = [(o, torch.as_tensor(np.asarray(ct), dtype=o.dtype))
                 for o, ct in zip(outs, cots) if ct is not None and o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [ct for _, ct in pairs])
    for k, (name, node) in enumerate(zip(graph.node_names, graph.nodes)):
        v = seen.get(name)
        port = node.op.outputs[0]
        if v is not None and v.is_floating_point() and port.kind == "value" and \
                tuple(v.shape) == tuple(port.shape):
            tr.values[Ref(k, 0)] = _array(v)
            if v.grad is not None:
                tr.cotangents[Ref(k, 0)] = _array(v.grad)
