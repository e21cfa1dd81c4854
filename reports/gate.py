"""The gate on precision regressions: two results files compared route by route.

``compare(baseline_doc, current_doc, metric="max", tolerances=None,
allow_different_settings=False) -> Comparison``.  Both documents are ``roundoff-coverage/1``
results (engine/results.py) read through ``read(path)``, which turns every defect of a file
(missing, empty, truncated, not JSON, another schema, a row without its key fields, two rows
with one key) into a one-line ``GateError``.  A route is identified by its key (operator,
attributes, route, port, format, mode, policy, implementation); fields the gate does not
know (``flags``, anything added later) are ignored.

A route regressed when, against the baseline:

- its error metric (``max_ulp``, or ``p99_ulp`` with ``metric="p99"``) grew by more than the
  tolerance (ulp; default 0.01, per format and per operator family from a TOML file), or
  became unmeasurable;
- in a directed mode (toward_zero, upward, downward) either end of its signed error range
  moved outward by more than the tolerance: there the sign of every error is part of the
  mode's contract (upward: computed >= exact), and a mode silently done as round-to-nearest
  keeps |error| <= 0.5 ulp -- smaller than the correct directed error -- while putting errors
  on the side the mode forbids;
- it has more bound violations, more mismatches (exactly compared ports), more unmeasurable
  errors, or an exceptional outcome class (``nan_from_finite``, ``overflow_to_inf``, ...)
  the baseline row did not have;
- it is a scaled format's row (engine/quantize.py ``BlockCounts``) with more ``clipped``
  elements (beyond the element range at their block's scale) or more ``nan_blocks`` (a NaN
  scale: an Inf or NaN in the block, or a scale past the scale format) than the baseline
  row, on the same points, at its port or in one of its quantized inputs (``scaled_inputs``:
  a recipe's operands): values the format no longer represents, whatever the ulps say;
- it is a CUDA kernel's row (``--implementations cuda``) whose contract held in the baseline
  and does not now (engine/implementations/cuda.py);
- it was measured (status ``ok``) in the baseline and is now missing or not ``ok``.

Improvements (a metric that shrank by more than the tolerance, fewer violations or
mismatches, a route newly measured) are listed and pass.  The two files must have been made
with the same seed, sample count and exhaustive setting, or maxima over different points
would be compared; a difference fails the gate unless allowed.

Renderings are pure functions of a Comparison: ``text`` (terminal), ``markdown`` (a CI job
summary) and ``junit`` (JUnit XML, one test case per route key).  ``write_baseline(path,
doc)`` writes a results document as a baseline through results' deterministic writer: rows
sorted by key, keys sorted, floats as shortest round-trip repr, written atomically.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from roundoff_coverage import formats
from roundoff_coverage.routes.registry import FAMILIES

from ..engine import operators, results
from ..engine.rows import MEASURED
from . import tomlfile

DEFAULT_TOLERANCE = 0.01                  # ulp
METRICS = {"max": "max_ulp", "p99": "p99_ulp"}
DIRECTED = ("toward_zero", "upward", "downward")
KEY_FIELDS = results.KEY_FIELDS
_TEXT_LIMIT = 100                         # improvements shown on a terminal
_MARKDOWN_LIMIT = 500                     # rows per table in a job summary (GitHub caps at 1 MiB)


class GateError(ValueError):
    """A file or setting the gate cannot use (one-line message; exit status 2)."""


# ----- reading -----------------------------------------------------------------------------

def read(path, role="results file") -> dict:
    """The results document at ``path``, checked enough to be compared (results.check,
    strict): ``meta`` with a seed and a sample count, rows with every key field and their
    numbers in their domains, no two rows with one key."""
    try:
        doc = results.read(path)
    except results.ResultsError as exc:
        raise GateError(f"{role}: {_one_line(exc)}") from None
    try:
        return results.check(doc, path, role, strict=True)
    except results.ResultsError as exc:
        raise GateError(_one_line(exc)) from None


# A row's route key and its label: one definition, in results.
key = results.route_key
label = results.route_label
_attrs_text = results.attrs_text


# ----- tolerances ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Tolerances:
    """Allowed growth in ulps: ``default``, and by format spec and operator family.  A route
    gets the largest matching entry (format, family), else the default: an entry records
    known slack, and a route under two loosened scopes has both reasons for slack."""

    default: float = DEFAULT_TOLERANCE
    formats: dict = field(default_factory=dict)       # format spec (e8m7) -> ulp
    families: dict = field(default_factory=dict)      # family name -> ulp

    def of(self, fmt_name: str, family: str | None) -> float:
        matches = [self.families[family]] if family in self.families else []
        spec = _spec(fmt_name)
        if spec in self.formats:
            matches.append(self.formats[spec])
        return max(matches) if matches else self.default

    def describe(self) -> str:
        parts = [f"{_num(self.default)} ulp"]
        parts += [f"{name} {_num(v)}" for name, v in sorted(self.formats.items())]
        parts += [f"{name} {_num(v)}" for name, v in sorted(self.families.items())]
        return parts[0] + (f" (overrides: {', '.join(parts[1:])})" if parts[1:] else "")


def _spec(name):
    """The canonical compact spec of a format name (the name itself when unknown)."""
    try:
        return formats.get(name).spec
    except Exception:                                        # noqa: BLE001
        return name


def load_tolerances(path) -> Tolerances:
    """A tolerances TOML file::

        default = 0.01            # ulp, every route
        [formats]
        float8_e4m3fn = 0.05      # catalog names, aliases or compact specs
        [families]
        reduction = 0.25          # operator families (roundoff-coverage ops)

    GateError (one line) for an unreadable file, an unknown key, format or family, or a
    value that is not a finite number >= 0."""
    import difflib


    try:
        data = tomlfile.read(path, "tolerances file")
    except tomlfile.TomlError as exc:
        raise GateError(str(exc)) from None

    def value(v, where):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v < 0:
            raise GateError(f"tolerances file {path}: {where} must be a finite number of ulps "
                            f">= 0 (got {v!r})")
        return float(v)

    def close(name, known):
        hint = difflib.get_close_matches(name, list(known), n=3)
        return f" (close matches: {', '.join(hint)})" if hint else ""

    out = {"default": DEFAULT_TOLERANCE, "formats": {}, "families": {}}
    for name, v in data.items():
        if name == "default":
            out["default"] = value(v, "default")
        elif name in ("formats", "families"):
            if not isinstance(v, dict):
                raise GateError(f"tolerances file {path}: {name} must be a table ([{name}])")
            for entry, ulps in v.items():
                if name == "formats":
                    try:
                        spec = formats.get(entry).spec
                    except formats.FormatError as exc:
                        raise GateError(f"tolerances file {path}: [formats] {_one_line(exc)}") \
                            from None
                    out["formats"][spec] = value(ulps, f"formats.{entry}")
                else:
                    if entry not in FAMILIES:
                        raise GateError(f"tolerances file {path}: unknown family {entry!r}"
                                        f"{close(entry, FAMILIES)}")
                    out["families"][entry] = value(ulps, f"families.{entry}")
        else:
            hint = close(name, ("default", "formats", "families"))
            raise GateError(f"tolerances file {path}: unknown key {name!r} (expected default, "
                            f"[formats], [families]){hint}")
    return Tolerances(out["default"], out["formats"], out["families"])


# ----- comparing ---------------------------------------------------------------------------

@dataclass
class Change:
    """One route key that regressed or improved, with the reasons in words."""

    key: tuple
    reasons: list
    baseline: dict | None
    current: dict | None


@dataclass
class Comparison:
    """What the gate found: regressions and improvements (sorted by key), the settings that
    differ (each a phrase), the route keys of both files, and what was compared."""

    regressions: list
    improvements: list
    settings: list
    allowed: bool                     # settings differences allowed
    keys: dict                        # key -> (baseline row or None, current row or None)
    metric: str
    tolerances: Tolerances
    baseline_command: str = ""
    current_command: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.regressions) or (bool(self.settings) and not self.allowed)

    def verdict(self) -> str:
        """One line: PASS or FAIL, the counts, the metric and the tolerance."""
        head = "FAIL" if self.failed else "PASS"
        parts = [f"{len(self.regressions)} regression{_s(len(self.regressions))}",
                 f"{len(self.improvements)} improvement{_s(len(self.improvements))}",
                 f"{len(self.keys)} route{_s(len(self.keys))} compared"]
        if self.settings:
            parts.insert(0, "settings differ" + (" (allowed)" if self.allowed else ""))
        return (f"gate: {head}: {', '.join(parts)}; metric {self.metric}, tolerance "
                f"{self.tolerances.describe()}")


def _s(n):
    return "" if n == 1 else "s"


def settings_differences(base_meta, cur_meta) -> list:
    """Phrases naming the settings that decide the sampled points and differ."""
    out = []
    pairs = (("seed", base_meta.get("seed"), cur_meta.get("seed")),
             ("samples", base_meta["selection"].get("samples"),
              cur_meta["selection"].get("samples")),
             ("exhaustive", bool(base_meta["selection"].get("exhaustive")),
              bool(cur_meta["selection"].get("exhaustive"))))
    for name, b, c in pairs:
        if b != c:
            out.append(f"{name} {json.dumps(b)} in the baseline, {json.dumps(c)} now")
    return out


def compare(baseline, current, metric="max", tolerances=None,
            allow_different_settings=False) -> Comparison:
    """The Comparison of two results documents (as ``read`` returns them)."""
    if metric not in METRICS:
        raise GateError(f"metric must be one of {', '.join(METRICS)} (got {metric!r})")
    tol = tolerances or Tolerances()
    base = {key(r): r for r in baseline["rows"]}
    cur = {key(r): r for r in current["rows"]}
    keys = {k: (base.get(k), cur.get(k)) for k in sorted(set(base) | set(cur))}
    regressions, improvements = [], []
    ops = {k[0] for k in keys}
    families = _families(baseline, ops) | _families(current, ops)   # the current one wins
    for k, (b, c) in keys.items():
        worse, better = _judge(b, c, METRICS[metric], tol.of(k[4], families.get(k[0])), k[5])
        if worse:
            regressions.append(Change(k, worse, b, c))
        elif better:
            improvements.append(Change(k, better, b, c))
    return Comparison(regressions, improvements,
                      settings_differences(baseline["meta"], current["meta"]),
                      allow_different_settings, keys, METRICS[metric], tol,
                      str(baseline["meta"].get("command", "")),
                      str(current["meta"].get("command", "")))


def _families(doc, ops) -> dict:
    """{operator: family} as the results document records them (engine/operators.py; a
    removed operator has none: it gets the format or default tolerance)."""
    table = operators.Table(doc)
    return {name: table.family(name) for name in ops if table.family(name)}


def _judge(b, c, metric, tol, mode):
    """(regression reasons, improvement reasons) of one route key."""
    worse, better = [], []
    if b is None:
        if c.get("status") in MEASURED:
            better.append("newly measured")
        return worse, better
    if c is None:
        if b.get("status") in MEASURED:
            worse.append("missing: measured in the baseline, absent now")
        return worse, better
    bs, cs = b.get("status"), c.get("status")
    if bs in MEASURED and cs not in MEASURED:
        why = f": {c.get('reason')}" if c.get("reason") else ""
        worse.append(f"status {bs} -> {cs}{why}")
        return worse, better
    if bs not in MEASURED:
        if cs in MEASURED:
            better.append(f"now measured (was {bs})")
        return worse, better
    _metric(_number(b.get(metric)), _number(c.get(metric)), metric, tol, worse, better)
    if mode in DIRECTED:
        # The side of exact a directed mode puts every result on: upward errors >= 0,
        # downward <= 0, toward_zero opposite to the value's sign.
        for name, sign in (("max_signed_ulp", 1), ("min_signed_ulp", -1)):
            bv, cv = _number(b.get(name)), _number(c.get(name))
            if _finite(bv) and _finite(cv) and sign * (cv - bv) > tol:
                side = "above" if sign > 0 else "below"
                worse.append(f"{mode}: errors {side} exact reach {_num(cv)} ulp (was "
                             f"{_num(bv)}, tolerance {_num(tol)})")
    for name, what in (("violations", "bound violations"), ("mismatches", "mismatches"),
                       ("unmeasured", "unmeasurable errors")):
        bv, cv = _count(b.get(name)), _count(c.get(name))
        if cv > bv:
            extra = f" (bound {_num(_number(c.get('bound')))} ulp)" \
                if name == "violations" and c.get("bound") is not None else ""
            worse.append(f"{what} {bv} -> {cv}{extra}")
        elif cv < bv:
            better.append(f"{what} {bv} -> {cv}")
    bs, cs = b.get("scaled_inputs"), c.get("scaled_inputs")
    pairs = [("", b, c)] + ([(f"{label}: ", bs[label], cs[label])
                             for label in sorted(set(bs) & set(cs))
                             if isinstance(bs[label], dict) and isinstance(cs[label], dict)]
                            if isinstance(bs, dict) and isinstance(cs, dict) else [])
    for where, bb, cc in pairs:
        for name, what in (("clipped", "clipped elements"), ("nan_blocks", "NaN blocks")):
            bv, cv = bb.get(name), cc.get(name)
            if _is_count(bv) and _is_count(cv) and cv != bv:
                (worse if cv > bv else better).append(f"{where}{what} {bv} -> {cv}")
    bk, ck = b.get("contract"), c.get("contract")
    if isinstance(ck, dict) and ck.get("held") is False and \
            not (isinstance(bk, dict) and bk.get("held") is False):
        worse.append(f"kernel contract broken ({ck.get('agreement')} agreement: "
                     f"{ck.get('differing')} elements differ from the model)")
    bx, cx = _classes(b.get("exceptional")), _classes(c.get("exceptional"))
    new = sorted(k for k in cx if k not in bx)
    if new:
        worse.append("new exceptional outcome " + ", ".join(f"{k} ({cx[k]})" for k in new))
    return worse, better


def _metric(bv, cv, name, tol, worse, better):
    """Compare one error metric; None and NaN mean "not measurable"."""
    b_ok, c_ok = bv is not None and not math.isnan(bv), cv is not None and not math.isnan(cv)
    if b_ok and not c_ok:
        worse.append(f"{name} no longer measurable (was {_num(bv)} ulp)")
    elif c_ok and not b_ok:
        if bv is not None:                                   # NaN before: now a number
            better.append(f"{name} now measurable ({_num(cv)} ulp)")
    elif b_ok and c_ok:
        if cv > bv + tol or (math.isinf(cv) and not math.isinf(bv)):
            worse.append(f"{name} {_num(bv)} -> {_num(cv)} ulp ({_delta(bv, cv)}, tolerance "
                         f"{_num(tol)})")
        elif cv < bv - tol or (math.isinf(bv) and not math.isinf(cv)):
            better.append(f"{name} {_num(bv)} -> {_num(cv)} ulp ({_delta(bv, cv)})")


def _number(v):
    """A row's float field: None stays None; "inf", "-inf", "nan" become floats."""
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _finite(v):
    return v is not None and math.isfinite(v)


def _count(v) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
        and math.isfinite(v) else 0


def _is_count(v) -> bool:
    """Whether a row's count field holds a count (not null, as on an element format's row)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _classes(v) -> dict:
    """{class: count > 0} of a row's ``exceptional`` field (anything else: none)."""
    if not isinstance(v, dict):
        return {}
    return {str(k): n for k, n in v.items() if isinstance(n, (int, float)) and n > 0}


def _num(v) -> str:
    if v is None:
        return "-"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.4g}"


def _delta(bv, cv) -> str:
    if math.isinf(bv) or math.isinf(cv):
        return "to inf" if math.isinf(cv) else "from inf"
    return f"{cv - bv:+.4g}"


def _one_line(exc) -> str:
    return " ".join(str(exc).split())


# ----- renderings --------------------------------------------------------------------------

_COLUMNS = ("operator", "attributes", "route", "port", "format", "mode", "policy",
            "implementation", "change")


def _cells(change: Change) -> list:
    op, attrs, *rest = change.key
    return [op, _attrs_text(attrs), *rest, "; ".join(change.reasons)]


def _table(rows) -> list:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_COLUMNS)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in [list(_COLUMNS)] + rows]


def text(cmp: Comparison, baseline_path="", current_path="") -> str:
    """The terminal report: settings differences, regressions, improvements (the first
    _TEXT_LIMIT), then the verdict line."""
    lines = []
    if baseline_path or current_path:
        lines.append(f"baseline {baseline_path}: {cmp.baseline_command}")
        lines.append(f"current  {current_path}: {cmp.current_command}")
    for s in cmp.settings:
        lines.append(f"settings differ: {s}" + ("" if cmp.allowed else
                     " (rerun with the baseline's settings, or pass --allow-different-settings"
                     ", or make a new baseline with --update)"))
    if cmp.regressions:
        lines += ["", f"REGRESSIONS ({len(cmp.regressions)})"]
        lines += _table([_cells(c) for c in cmp.regressions])
    if cmp.improvements:
        shown = cmp.improvements[:_TEXT_LIMIT]
        lines += ["", f"improvements ({len(cmp.improvements)})"]
        lines += _table([_cells(c) for c in shown])
        if len(cmp.improvements) > len(shown):
            lines.append(f"... and {len(cmp.improvements) - len(shown)} more (--markdown or "
                         f"--junit list them all)")
    if lines:
        lines.append("")
    lines.append(cmp.verdict())
    return "\n".join(lines)


def _md_cell(s: str) -> str:
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown(cmp: Comparison, baseline_path="", current_path="") -> str:
    """A GitHub-flavoured Markdown report (for $GITHUB_STEP_SUMMARY): verdict, settings,
    a table of regressions and one of improvements (each up to _MARKDOWN_LIMIT rows)."""
    mark = "FAIL" if cmp.failed else "PASS"
    out = [f"## roundoff-coverage gate: {mark}", "", cmp.verdict().split(": ", 2)[2], ""]
    if baseline_path or current_path:
        out += [f"- baseline `{baseline_path}`: `{cmp.baseline_command}`",
                f"- current `{current_path}`: `{cmp.current_command}`", ""]
    for s in cmp.settings:
        out.append(f"- **settings differ**: {_md_cell(s)}" + (" (allowed)" if cmp.allowed
                                                             else ""))
    if cmp.settings:
        out.append("")
    for title, changes in (("Regressions", cmp.regressions), ("Improvements",
                                                              cmp.improvements)):
        out.append(f"### {title} ({len(changes)})")
        out.append("")
        if not changes:
            out += ["none", ""]
            continue
        out.append("| " + " | ".join(_COLUMNS) + " |")
        out.append("|" + "---|" * len(_COLUMNS))
        for c in changes[:_MARKDOWN_LIMIT]:
            out.append("| " + " | ".join(_md_cell(x) for x in _cells(c)) + " |")
        if len(changes) > _MARKDOWN_LIMIT:
            out.append(f"\n... and {len(changes) - _MARKDOWN_LIMIT} more (see the JUnit report)")
        out.append("")
    return "\n".join(out)


# XML 1.0 allows tab, newline, carriage return and code points from 0x20 on.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(s) -> str:
    return _NOT_XML.sub("?", str(s))


def junit(cmp: Comparison) -> str:
    """JUnit XML: one test case per route key (a failure per regression, skipped where
    neither file measured the route), and a ``settings`` case when settings differ."""
    import xml.etree.ElementTree as ET
    bad = {c.key: c for c in cmp.regressions}
    good = {c.key: c for c in cmp.improvements}
    failures = len(bad) + (1 if cmp.settings and not cmp.allowed else 0)
    cases = len(cmp.keys) + (1 if cmp.settings else 0)
    skipped = 0
    suite = ET.Element("testsuite", name="roundoff-coverage gate")
    if cmp.settings:
        case = ET.SubElement(suite, "testcase", classname="roundoff-coverage.gate",
                             name="settings")
        if not cmp.allowed:
            msg = "; ".join(cmp.settings)
            ET.SubElement(case, "failure", message=_xml_text(msg), type="settings").text = \
                _xml_text(msg)
    for k, (b, c) in cmp.keys.items():
        case = ET.SubElement(suite, "testcase", classname=f"roundoff-coverage.{k[0]}",
                             name=_xml_text(label(k)))
        if k in bad:
            msg = "; ".join(bad[k].reasons)
            ET.SubElement(case, "failure", message=_xml_text(msg), type="regression").text = \
                _xml_text(msg)
        elif k in good:
            ET.SubElement(case, "system-out").text = _xml_text("improved: " +
                                                               "; ".join(good[k].reasons))
        elif not any(r is not None and r.get("status") in MEASURED for r in (b, c)):
            skipped += 1
            status = "/".join(str(r.get("status")) for r in (b, c) if r is not None)
            ET.SubElement(case, "skipped", message=_xml_text(f"not measured (status {status})"))
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="roundoff-coverage gate", tests=str(cases),
                      failures=str(failures), errors="0")
    root.append(suite)
    ET.indent(root, space=" ")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") \
        + "\n"


# ----- baselines -----------------------------------------------------------------------------

def baseline_document(doc) -> dict:
    """``doc`` in the canonical form of a baseline: plain JSON data, rows sorted by key."""
    return {"schema": results.SCHEMA, "meta": results.clean(doc["meta"]),
            "rows": sorted((results.clean(r) for r in doc["rows"]), key=results.row_key)}


def write_baseline(path, doc) -> None:
    """Write ``doc`` to ``path`` as a baseline (results' deterministic, atomic writer)."""
    try:
        results.write(path, baseline_document(doc))
    except OSError as exc:
        raise GateError(f"cannot write baseline {path}: {exc.strerror or exc}") from None


def write_text(path, content, what) -> None:
    """Write a report file; GateError (one line) when it cannot be written."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(content)
    except OSError as exc:
        raise GateError(f"cannot write {what} {path}: {exc.strerror or exc}") from None


def gate(baseline_path, current_path, metric="max", tolerances_path=None,
         allow_different_settings=False, markdown_path=None, junit_path=None,
         update=False) -> tuple:
    """The whole gate of the command line: (Comparison or None, terminal text).  Reads both
    files (GateError for a defective one), compares, writes the requested reports, and with
    ``update`` writes the current results as the new baseline (a missing baseline is then
    created and no Comparison is made)."""
    import os
    tolerances = load_tolerances(tolerances_path) if tolerances_path else Tolerances()
    current = read(current_path, "current results")
    if update and not os.path.exists(baseline_path):
        write_baseline(baseline_path, current)
        return None, f"gate: no baseline at {baseline_path}; wrote the current results there"
    baseline = read(baseline_path, "baseline")
    cmp = compare(baseline, current, metric, tolerances, allow_different_settings)
    report = text(cmp, baseline_path, current_path)
    if markdown_path:
        write_text(markdown_path, markdown(cmp, baseline_path, current_path), "Markdown report")
    if junit_path:
        write_text(junit_path, junit(cmp), "JUnit report")
    if update:
        write_baseline(baseline_path, current)
        report += f"\ngate: --update: wrote the current results to {baseline_path}"
    return cmp, report
