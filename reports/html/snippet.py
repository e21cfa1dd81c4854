"""Python snippets that reproduce a row's worst case with this package.

``snippet(row, results_path) -> str`` (SnippetError with a one-line reason when the row
cannot be reproduced).  Two forms:

- self-contained, when the reproducer stores every input as bit patterns (inputs of at most
  evaluate.REPRO_MAX_ELEMENTS elements) and the mode is deterministic: the patterns are
  decoded with ``formats.decode`` and the route evaluated with
  ``routes.op(...).rule(backend)``.  For elementwise operators (evaluate.batchable) the
  reproducer keeps only the worst element of each input, so the snippet builds the operator
  at shape (1,) -- the emulated backend rounds each element on its own, so one element gives
  the value it had inside the whole array;
- regenerated, for larger inputs and for stochastic rounding (whose random bits depend on
  the element's position and the task's seed): ``reports.reproduce`` plans the task again
  from the results file and redraws the inputs bit for bit, and the backend gets the task's
  seed as evaluate.implementation gives it.

Both print the computed value (to compare with the report's) and the exact value from the
reference backend at the run's precision.  Every value written into the code is a checked
integer, Boolean or a ``repr`` of JSON data, so a results file cannot inject code.
"""

from __future__ import annotations

import re

from roundoff_coverage import routes
from roundoff_coverage.engine import evaluate

_HEX = re.compile(r"0x[0-9a-f]{1,32}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SnippetError(ValueError):
    """A worst case that no snippet can reproduce (one-line message)."""


def snippet(row, results_path: str, force_regenerate: bool = False) -> str:
    """The reproducer of ``row`` (a model.Row with a ``worst`` dict); see module docstring."""
    w = row.worst
    if not isinstance(w, dict) or not isinstance(w.get("inputs"), dict):
        raise SnippetError("the row has no reproducer")
    element = w.get("element")
    if isinstance(element, bool) or not isinstance(element, int) or element < 0:
        raise SnippetError("the reproducer's element index is missing")
    if row.implementation not in ("emulated", "native"):
        raise SnippetError(f"no snippet for implementation {row.implementation}")
    if row.route not in ("forward", "tangent", "gradient"):
        raise SnippetError(f"unknown route {row.route}")
    try:
        op = routes.op(row.op, **row.attrs)
    except Exception as exc:                                  # noqa: BLE001
        raise SnippetError(f"cannot build {row.op}: {evaluate.one_line(exc)}") from None
    absent = [n for n in op.input_names if n not in w["inputs"]]
    if absent:
        raise SnippetError(f"the reproducer lacks input {', '.join(absent)}")
    stored = [w["inputs"][n] for n in op.input_names]
    stored += list((w.get("tangents") or {}).values()) + list((w.get("cotangents") or {}).values())
    small = all(v is None or _literal_ok(v) for v in stored)
    elementwise = evaluate.batchable(op)
    if force_regenerate or not small or row.mode == "stochastic" or (
            elementwise and _port_shape(row, op) != tuple(op.attrs["shape"])):
        # A rank-0 port of an elementwise operator (a gradient summed over every element)
        # depends on the whole draw, not on the worst element alone.
        return _regenerated(row, results_path, element)
    return _self_contained(row, op, w, element, elementwise)


def _port_shape(row, op):
    names, ports = (op.input_names, op.inputs) if row.route == "gradient" else \
        (op.output_names, op.outputs)
    return tuple(ports[list(names).index(row.port)].shape) if row.port in names else None


def _literal_ok(v) -> bool:
    """Whether a stored input is data the snippet can write as code: hex bit patterns,
    integers or Booleans, in nested lists (a string that is not a pattern is a note)."""
    if isinstance(v, list):
        return all(_literal_ok(x) for x in v)
    if isinstance(v, str):
        return bool(_HEX.fullmatch(v))
    return isinstance(v, (bool, int))


def _literal(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    if isinstance(v, str):
        return v                                       # checked by _HEX: 0x and hex digits
    return repr(bool(v)) if isinstance(v, bool) else repr(int(v))


def _array(v) -> str:
    """Code for a stored input: decoded bit patterns, or integers/Booleans as they are."""
    if _has_patterns(v):
        return f"formats.decode(np.array({_literal(v)}, dtype=np.uint64), fmt)"
    return f"np.array({_literal(v)})"


def _has_patterns(v) -> bool:
    return any(_has_patterns(x) for x in v) if isinstance(v, list) else isinstance(v, str)


def _call(name, attrs) -> str:
    args = [repr(name)]
    if all(_IDENT.fullmatch(k) for k in attrs):
        args += [f"{k}={v!r}" for k, v in attrs.items()]
    else:
        args.append(f"**{attrs!r}")
    return f"routes.op({', '.join(args)})"


def _backend(row) -> str:
    if row.implementation == "native":
        return "numerics.native(fmt.name)"
    return f"numerics.emulated(fmt, {row.mode!r}, {row.policy!r})"


def _route_call(row, op) -> tuple[str, int]:
    """(the expression evaluating the route under ``rule``, the index of the row's port in
    its result tuple)."""
    names = op.input_names if row.route == "gradient" else op.output_names
    if row.port not in names:
        raise SnippetError(f"{row.op} has no port {row.port} for its {row.route} route")
    call = {"forward": "forward(xs)", "tangent": "jvp(xs, ts)",
            "gradient": "backward(xs, cs)"}[row.route]
    return call, list(names).index(row.port)


def _self_contained(row, op, w, element, elementwise) -> str:
    attrs = dict(row.attrs)
    if elementwise:
        attrs["shape"] = (1,)            # one element of each input (module docstring)
        element = 0
    call, j = _route_call(row, op)
    lines = ["import numpy as np", "from roundoff_coverage import formats, numerics, routes", "",
             f"fmt = formats.get({row.format!r})", f"op = {_call(row.op, attrs)}"]

    def values(var, stored, names):
        out = [f"{var} = ("]
        for n in names:
            v = stored.get(n) if isinstance(stored, dict) else None
            out.append("    None," if v is None else
                       f"    np.reshape({_array(v)}, op.{'inputs' if var != 'cs' else 'outputs'}"
                       f"[{list(names).index(n)}].shape),  # {n}")
        return out + [")"]
    lines += values("xs", w["inputs"], op.input_names)
    if row.route == "tangent":
        lines += values("ts", w.get("tangents") or {}, op.input_names)
    if row.route == "gradient":
        lines += values("cs", w.get("cotangents") or {}, op.output_names)
    lines += _tail(row, call, j, element, _backend(row))
    return "\n".join(lines) + "\n"


def _tail(row, call, j, element, backend) -> list[str]:
    computed, exact = row.worst.get("computed"), row.worst.get("exact")
    return [f"computed = op.rule({backend}).{call}[{j}]",
            "exact = op.rule(numerics.reference(fmt.precision + 64))." + call + f"[{j}]",
            f"print('computed', float(np.asarray(computed, dtype=np.float64).reshape(-1)"
            f"[{element}]))  # the report: {_comment(computed)}",
            f"print('exact', np.asarray(exact, dtype=object).reshape(-1)[{element}])"
            f"  # the report: {_comment(exact)}"]


def _comment(v) -> str:
    """A stored decimal as a comment: printable characters only, one line."""
    text = str(v) if v is not None else "?"
    return "".join(c for c in text if c.isprintable())[:60]


def _regenerated(row, results_path, element) -> str:
    key = {"op": row.op, "attrs": row.attrs, "route": row.route, "port": row.port,
           "format": row.format, "mode": row.mode, "policy": row.policy,
           "implementation": row.implementation}
    op = routes.op(row.op, **row.attrs)
    call, j = _route_call(row, op)
    backend = ("numerics.native(fmt.name)" if row.implementation == "native" else
               "numerics.emulated(fmt, task.mode, task.policy, seed=zlib.crc32(task.key.encode()))")
    lines = ["import zlib", "import numpy as np",
             "from roundoff_coverage import numerics, reports",
             "from roundoff_coverage.engine import results",
             "from roundoff_coverage.reports import regenerate", "",
             f"doc = results.read({results_path!r})",
             f"key = {key!r}",
             "row = next(r for r in doc['rows'] if all(r.get(k) == v for k, v in key.items()))",
             "case = reports.reproduce(doc, row)       # the worst draw, redrawn from the seed",
             "task = regenerate.find_task(doc, row)",
             "op, fmt = case['op'], case['format']",
             "xs = tuple(case['inputs'][n] for n in op.input_names)",
             "ts = tuple(case.get('tangents', {}).get(n) for n in op.input_names)",
             "cs = tuple(case.get('cotangents', {}).get(n) for n in op.output_names)"]
    lines += _tail(row, call, j, element, backend)
    return "\n".join(lines) + "\n"
