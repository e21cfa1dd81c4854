"""The inputs of a results row's worst case, regenerated: ``reproduce(results, row)``.

A reproducer in a results file holds every input as bit patterns up to
evaluate.REPRO_MAX_ELEMENTS elements; larger inputs (a sum over 4 x 4096 values) are noted,
not stored.  Every draw comes from RNGs seeded by (seed, operator, attributes, format, kind)
(evaluate.rng_for), so the selection in the file's ``meta`` plans the same task again and its
sampling gives the same arrays, bit for bit, on any machine.
"""

from __future__ import annotations

import json


from ..engine import evaluate, runner


class ReproduceError(ValueError):
    """A row that cannot be regenerated (one-line message)."""


def reproduce(results, row) -> dict:
    """The worst case of ``row`` (a row dict of the results ``results``, or a row of its
    ``reports.load`` frame; ``results`` a path or a loaded JSON document): {"op": routes Op,
    "format": BinaryFormat, "route", "inputs", "tangents", "cotangents": {port name: float64
    array or words}, "worst": the row's reproducer}.  Tangents and cotangents are present
    for their routes only."""
    doc = results if isinstance(results, dict) else _read(results)
    row = dict(row)
    if "attrs" not in row and "attributes" in row:       # a row of reports.load's frame
        row["attrs"] = row["attributes"]
    worst = row.get("worst")
    if not isinstance(worst, dict) or "draw" not in worst:
        raise ReproduceError(f"row {row.get('op')}/{row.get('route')} has no worst case to "
                             f"reproduce (status {row.get('status')})")
    task = find_task(doc, row)
    o = task.build()
    fmt = task.fmt
    d = evaluate.draw(task, o, fmt)
    k = int(worst["draw"])
    if not 0 <= k < len(d.inputs):
        raise ReproduceError(f"the worst case's draw {k} is not among the {len(d.inputs)} "
                             f"draws of the task: a results file of another version?")
    out = {"op": d.op, "format": fmt, "route": row["route"], "worst": worst,
           "inputs": dict(zip(d.op.input_names, d.inputs[k]))}
    if row["route"] == "tangent":
        out["tangents"] = {n: t for n, t in zip(d.op.input_names, d.tangents[k])
                           if t is not None}
    if row["route"] == "gradient":
        out["cotangents"] = {n: c for n, c in zip(d.op.output_names, d.cotangents[k])
                             if c is not None}
    return out


def find_task(doc: dict, row: dict) -> evaluate.Task:
    """The task of the file's selection that made ``row``."""
    sel = doc.get("meta", {}).get("selection")
    if not isinstance(sel, dict):
        raise ReproduceError("the results file records no selection to plan from")
    try:
        selection = runner.Selection(
            ops=(row["op"],), formats=tuple(sel["formats"]), modes=tuple(sel["modes"]),
            routes=tuple(sel["routes"]), policies=tuple(sel["policies"]),
            implementations=tuple(sel["implementations"]), draws=int(sel["samples"]),
            seed=int(doc["meta"]["seed"]), exhaustive=bool(sel["exhaustive"]))
        tasks = runner.plan(selection)
    except (KeyError, TypeError, ValueError, LookupError) as exc:
        raise ReproduceError(f"cannot plan the run again from the file's selection: "
                             f"{evaluate.one_line(exc)}") from None
    for t in tasks:
        # A row is marked exhaustive only where its task enumerated the format; a task asked
        # for exhaustive draws of an operator or format it cannot enumerate made sampled rows.
        if ({k: evaluate.jsonable(v) for k, v in t.attrs} == row["attrs"]
                and (t.format, t.mode, t.policy, t.implementation)
                == (row["format"], row["mode"], row["policy"], row["implementation"])
                and (t.exhaustive or not row["exhaustive"])):
            return t
    raise ReproduceError(f"no task of the file's selection made the row {row['op']} "
                         f"{row.get('instance')} {row['format']}")


def _read(path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise ReproduceError(f"cannot read results file {path}: {evaluate.one_line(exc)}") \
            from None
