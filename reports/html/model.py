"""The results document as the report reads it: normalized rows, coverage counts, groups.

``Report(doc, path)`` turns each raw row into a ``Row`` whose fields have checked types.
A row that is not an object, lacks a key field, holds a field of the wrong type or a number
outside its domain (results.field_problems, as the gate checks it) becomes an ``error`` row
whose reason names the defect: the report shows it like a failed route
instead of crashing on it (shared/STYLE.md rule 12).  Nothing here writes HTML.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from roundoff_coverage.engine import operators, results, rows
from roundoff_coverage.numerics.metrics import HIST_EDGES
from roundoff_coverage.reports import views
from roundoff_coverage.routes.codec import attributes_text

# The row's fields as engine/rows.py declares them: the key's text fields (the port may be
# any JSON value and is read as text), numbers, counts and precisions.
STATUSES, MEASURED = rows.STATUSES, rows.MEASURED
TEXT_FIELDS = tuple(f for f in rows.KEY_FIELDS if f not in ("attrs", "port"))
FLOAT_FIELDS = rows.FLOAT_FIELDS
INT_FIELDS = rows.COUNT_FIELDS + tuple(f.name for f in rows.FIELDS if f.kind == rows.BITS)
ROUTE_ORDER = tuple(sorted(rows.ROUTE_ORDER, key=rows.ROUTE_ORDER.get))
# The family of a model run's whole-model rows (operator ``model``: its outputs and input
# gradients), which no operator family holds.
MODEL_FAMILY = "whole model"


def number(v):
    """A row's float field as a float or None; "inf", "-inf", "nan" (the results file's
    spellings of non-finite values) as floats.  ValueError for anything else."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise ValueError("a Boolean")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    raise ValueError(f"{type(v).__name__} {v!r:.40}")


def integer(v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{type(v).__name__} {v!r:.40}")
    return v


@dataclass
class Row:
    """One route port of the results, every field typed (see module docstring)."""

    index: int
    op: str = "?"
    attrs: dict = field(default_factory=dict)
    instance: str = ""
    route: str = "?"
    port: str = "?"
    format: str = "?"
    mode: str = "?"
    policy: str = "?"
    implementation: str = "?"
    device: str = "?"
    status: str = "error"
    reason: str | None = None
    need: str | None = None
    values: dict = field(default_factory=dict)       # FLOAT_FIELDS and INT_FIELDS
    exceptional: dict = field(default_factory=dict)
    flags: list | None = None
    contract: dict | None = None
    histogram: list | None = None
    by_magnitude: list | None = None
    buckets: list | None = None
    by_kind: dict | None = None                       # {kind: rows.KIND_STATS}
    inside: dict | None = None
    by_input: dict | None = None
    worst: dict | None = None
    scaled: dict | None = None                        # rows.SCALED_FIELDS of a scaled task
    family: str = "unknown"
    problems: list = field(default_factory=list)
    # A model run's row (engine/rows.py): its graph node (None in coverage rows), module,
    # attribution (local, propagated, share) and, for a share, the output it reaches and
    # for the outputs' propagated rows the closure of the shares (both optional).
    node: str | None = None
    module: str = ""
    attribution: str | None = None
    output: str | None = None
    closure: float | None = None
    closure_misfit: float | None = None

    def __getattr__(self, name):                     # row.max_ulp, row.violations, ...
        if name in FLOAT_FIELDS or name in INT_FIELDS:
            return self.values.get(name)
        raise AttributeError(name)

    def stats(self, view) -> dict | None:
        """rows.KIND_STATS of the row in ``view`` (reports/views.py), numbers as floats or
        None; None where the row has none (no ordinary draws, an older results file)."""
        if view == views.WHOLE:
            out = {k: self.values.get(k) for k in rows.KIND_STATS if k in self.values}
            return out | {"exceptional": self.exceptional, "buckets": self.buckets}
        s = (self.by_kind or {}).get(views.ORDINARY)
        if not isinstance(s, dict):
            return None
        out = {k: views.number(s.get(k)) for k in rows.KIND_STATS
               if k not in ("samples", "unmeasured", "exceptional", "buckets")}
        return out | {k: s.get(k) for k in ("samples", "unmeasured", "buckets")} | {
            "exceptional": {str(k): n for k, n in (s.get("exceptional") or {}).items() if n}}

    @property
    def attrs_text(self) -> str:
        return attributes_text(self.attrs)

    @property
    def where(self) -> str:
        """The row's identity in words, for titles and error lists."""
        return (f"{self.op}[{self.attrs_text}] {self.route} {self.port} {self.format} "
                f"{self.mode} {self.policy} {self.implementation}")


def normalize(index: int, raw, families: dict) -> Row:
    """The Row of raw row number ``index``; defects become an error status (docstring)."""
    row = Row(index)
    if not isinstance(raw, dict):
        row.reason = f"malformed row {index}: not an object ({type(raw).__name__})"
        return row
    problems = []
    for name in TEXT_FIELDS:
        v = raw.get(name)
        if isinstance(v, str) and v:
            setattr(row, name, v)
        else:
            problems.append(f"{name} missing or not text")
    for name in ("device", "instance", "module"):
        if isinstance(raw.get(name), str):
            setattr(row, name, raw[name])
    for name in ("node", "attribution", "output"):
        if raw.get(name) is not None:
            setattr(row, name, str(raw[name]))
    for name in ("closure", "closure_misfit"):
        try:
            setattr(row, name, number(raw.get(name)))
        except ValueError as exc:
            problems.append(f"{name} is not a number ({exc})")
    row.port = str(raw.get("port", "?"))
    if isinstance(raw.get("attrs"), dict):
        row.attrs = raw["attrs"]
    else:
        problems.append("attrs missing or not an object")
    status = raw.get("status")
    if status not in STATUSES:
        problems.append(f"unknown status {status!r:.40}")
        status = "error"
    for name in ("reason", "need"):
        v = raw.get(name)
        setattr(row, name, None if v is None else str(v))
    for names, parse in ((FLOAT_FIELDS, number), (INT_FIELDS, integer)):
        for name in names:
            try:
                row.values[name] = parse(raw.get(name))
            except ValueError as exc:
                problems.append(f"{name} is not a number ({exc})")
    exc_field = raw.get("exceptional")
    if isinstance(exc_field, dict) and all(isinstance(n, int) and not isinstance(n, bool)
                                           for n in exc_field.values()):
        row.exceptional = {str(k): n for k, n in exc_field.items() if n}
    elif exc_field is not None:
        problems.append("exceptional is not an object of counts")
    flags = raw.get("flags")
    if flags is None or (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        row.flags = flags
    else:
        problems.append("flags is not a list of names")
    contract = raw.get("contract")
    if contract is None or isinstance(contract, dict):
        row.contract = contract
    else:
        problems.append("contract is not an object")
    # The domains of the numbers (results.field_problems, the gate's own check) for the
    # fields whose types were right; a bad histogram loses its figure only.
    bad = {p.split(" ", 1)[0] for p in problems}
    if results.key_problem(raw) is None:
        for name, problem in results.field_problems(raw):
            if name == "histogram":
                raw = dict(raw, histogram=None)
            elif name not in bad and name != "status":
                problems.append(problem)
    # Figures and the reproducer are optional: a defect there loses that figure only
    # (svg.py and operator.py check their shapes), not the row.
    row.histogram = raw.get("histogram") if isinstance(raw.get("histogram"), list) else None
    row.by_magnitude = raw.get("by_magnitude") if isinstance(raw.get("by_magnitude"),
                                                              list) else None
    row.worst = raw.get("worst") if isinstance(raw.get("worst"), dict) else None
    # Checked by results.field_problems (a defect there makes the row an error row).
    row.buckets = raw.get("buckets") if isinstance(raw.get("buckets"), list) else None
    row.by_kind = raw.get("by_kind") if isinstance(raw.get("by_kind"), dict) else None
    # Words and a figure only: svg.py and views.py check their shapes.
    row.inside = raw.get("inside") if isinstance(raw.get("inside"), dict) else None
    row.by_input = raw.get("by_input") if isinstance(raw.get("by_input"), dict) else None
    # A scaled task's fields (checked by results.field_problems; the figure checks again).
    row.scaled = {k: raw.get(k) for k in rows.SCALED_FIELDS} \
        if isinstance(raw.get("scheme"), str) else None
    row.family = families.get(row.op) or (MODEL_FAMILY if row.node is not None
                                          else "unknown")
    if problems:
        row.problems = problems
        row.by_kind = row.buckets = None
        was = f"; status {status}" + (f": {row.reason}" if row.reason else "")
        row.reason = f"malformed row {index}: {'; '.join(problems)}{was}"
        status = "error"
    row.status = status
    return row


# The numbers of a model summary's entries (engine/model.py: largest_local, keep_binary32):
# the names that start so are read as numbers, the others as text.
_SUMMARY_NUMBERS = ("norm_rel", "bits", "sqnr_db", "cosine", "scale_ulp", "cancelled",
                    "max_ulp", "mean_ulp", "max_rel", "nodes")


@dataclass
class Entry:
    """One entry of a model summary: ``text`` fields (node, module, op, port, keep, route,
    tensor_before...) and ``numbers`` (floats or None; a malformed number is None)."""

    text: dict
    numbers: dict

    def __getattr__(self, name):                     # entry.node, entry.bits_before, ...
        if name in ("text", "numbers"):
            raise AttributeError(name)
        if name.startswith(_SUMMARY_NUMBERS):
            return self.numbers.get(name)
        return self.text.get(name)


def entry(raw) -> Entry:
    text, nums = {}, {}
    for k, v in (raw.items() if isinstance(raw, dict) else ()):
        if str(k).startswith(_SUMMARY_NUMBERS):
            try:
                nums[str(k)] = number(v)
            except ValueError:
                nums[str(k)] = None
        elif v is not None:
            text[str(k)] = str(v)
    return Entry(text, nums)


@dataclass
class Summary:
    """A configuration's model summary: ``key`` (format|mode|policy), the nodes adding the
    most error per route, the keep-in-binary32 entries and the note said instead of them."""

    key: str
    largest: dict
    keep: list
    keep_note: str | None


@dataclass
class ModelInfo:
    """The results file's ``model`` object, typed: target, artifact, its sha256, summaries.
    ``problem``: why the summaries could not be read (None when they could)."""

    target: str
    artifact: str
    sha256: str
    summaries: list
    problem: str | None = None


def model_info(raw) -> ModelInfo | None:
    """The ModelInfo of a results file's ``model`` object; None for a coverage run."""
    if not isinstance(raw, dict):
        return None
    info = ModelInfo(*(str(raw.get(k, "?")) for k in ("target", "artifact", "sha256")), [])
    got = raw.get("summary")
    if got is not None and not isinstance(got, dict):
        info.problem = f"the summary is not an object ({type(got).__name__})"
        return info
    for key, s in (got or {}).items():
        if not isinstance(s, dict):
            info.problem = f"the summary of {key} is not an object"
            continue
        top = s.get("largest_local") if isinstance(s.get("largest_local"), dict) else {}
        keep = s.get("keep_binary32") if isinstance(s.get("keep_binary32"), list) else []
        note = s.get("keep_note")
        info.summaries.append(Summary(
            str(key), {str(r): [entry(e) for e in es] for r, es in top.items()
                       if isinstance(es, list)},
            [entry(e) for e in keep], None if note is None else str(note)))
    return info


def _families(table, ops) -> dict:
    """{operator: family} for the operators the file records (engine/operators.py)."""
    return {name: table.family(name) for name in ops if table.family(name)}


class Report:
    """A results document ready to render: meta, typed rows, groups, coverage."""

    def __init__(self, doc: dict, path: str):
        self.path = os.path.abspath(path)
        self.doc = doc
        self.model = model_info(doc.get("model"))
        meta = doc.get("meta")
        self.meta = meta if isinstance(meta, dict) else {}
        raw = doc.get("rows") if isinstance(doc.get("rows"), list) else []
        ops = {r.get("op") for r in raw if isinstance(r, dict) and isinstance(r.get("op"), str)}
        self.operators = operators.Table(doc)
        fams = _families(self.operators, ops)
        self.rows = [normalize(i, r, fams) for i, r in enumerate(raw)]
        self.edges = _edges(self.meta.get("histogram_edges_ulp"))
        self.by_op: dict[str, list[Row]] = {}
        for r in self.rows:
            self.by_op.setdefault(r.op, []).append(r)
        order = {f: i for i, f in enumerate(self.operators.family_order())}
        self.families = sorted({r.family for r in self.rows},
                               key=lambda f: (order.get(f, len(order)), f))
        sel = self.meta.get("selection") if isinstance(self.meta.get("selection"), dict) else {}
        self.selection = sel
        listed = [f for f in sel.get("formats", []) if isinstance(f, str)] \
            if isinstance(sel.get("formats"), list) else []
        self.formats = listed + sorted({r.format for r in self.rows} - set(listed))
        self.routes = [r for r in ROUTE_ORDER if any(x.route == r for x in self.rows)] + \
            sorted({x.route for x in self.rows} - set(ROUTE_ORDER))
        # Statistics per sample kind (files written before ``by_kind`` have none): the
        # report opens on the ordinary domain where it can, else on the whole range.
        self.has_kinds = any(r.by_kind is not None for r in self.rows)
        self.default_view = views.ORDINARY if any(
            r.stats(views.ORDINARY) is not None for r in self.rows) else views.WHOLE

    def ops_in_order(self) -> list[str]:
        """Operators by family (spec order), then in the spec's order (as recorded)."""
        fam = {f: i for i, f in enumerate(self.families)}
        def place(o):
            k = self.operators.order(o)
            return (fam[self.by_op[o][0].family], 1 << 30 if k is None else k, o)
        return sorted(self.by_op, key=place)

    def status_counts(self, rows=None) -> dict:
        out = dict.fromkeys(STATUSES, 0)
        for r in self.rows if rows is None else rows:
            out[r.status] += 1
        return out


def _edges(v):
    """Histogram bin edges in ulp from meta (numerics.metrics.HIST_EDGES when absent or
    malformed: the only edges the run has ever written)."""
    if isinstance(v, list) and len(v) >= 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            for x in v) and all(a < b for a, b in zip(v, v[1:])):
        return [float(x) for x in v]
    return list(HIST_EDGES)


def coverage(report: Report) -> list[tuple]:
    """[(family, format, measured, bounded, no_rule, not_differentiable, failed)] over every
    family and format present; counts of route ports (rows)."""
    counts = {}
    for r in report.rows:
        c = counts.setdefault((r.family, r.format), [0, 0, 0, 0, 0])
        if r.status in MEASURED:
            c[0] += 1
            if r.bound is not None or r.interval_bound is not None:
                c[1] += 1
        else:
            c[{"no_rule": 2, "not_differentiable": 3, "error": 4}[r.status]] += 1
    fmt = {f: i for i, f in enumerate(report.formats)}
    fam = {f: i for i, f in enumerate(report.families)}
    return [(f, m, *c) for (f, m), c in sorted(counts.items(),
                                               key=lambda kv: (fam[kv[0][0]], fmt[kv[0][1]]))]


def missing(report: Report) -> dict:
    """What the run could not measure, grouped: {status: [(op, route, reason or need,
    [formats], rows)]}, for no_rule, not_differentiable and error rows, and for convention
    rows (measured, against the implementation's own convention: the reason says where)."""
    groups: dict = {}
    for r in report.rows:
        if r.status == "ok":
            continue
        why = r.reason or ""
        if r.status == "no_rule" and r.need:
            why = f"needs {r.need}: {why}" if why else f"needs {r.need}"
        g = groups.setdefault((r.status, r.op, r.route, why), [[], 0])
        if r.format not in g[0]:
            g[0].append(r.format)
        g[1] += 1
    out = {s: [] for s in ("error", "convention", "no_rule", "not_differentiable")}
    for (status, op, route, why), (fmts, n) in groups.items():
        out[status].append((op, route, why, fmts, n))
    return out
