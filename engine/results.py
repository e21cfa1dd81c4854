"""The results file ``roundoff-coverage/1``: JSON with ``schema``, ``meta`` and ``rows``.

``document(rows, selection) -> dict``; ``dumps(doc) -> str`` is deterministic: rows sorted by
their key (op, attributes, route, port, format, mode, policy, implementation), keys sorted,
floats as Python's shortest round-trip repr, non-finite floats as the strings ``"inf"``,
``"-inf"``, ``"nan"`` (JSON has none), numpy scalars as plain numbers.  Nothing in the file
depends on time, worker order or --jobs, so the same command and seed give the same bytes.
``write(path, doc, csv=None)`` writes atomically (a temporary file in the same folder, then
os.replace), except to a special file (``special_file``: /dev/null, a FIFO), which it writes
as a stream: a rename would replace the device with a regular file.
``load(path) -> pandas.DataFrame`` (one row per measured route, the columns of ROW_FIELDS
with ``attrs`` named ``attributes`` (FRAME_NAMES); floats back to float);
``to_csv(frame, path)`` with nested fields as JSON text.
"""

from __future__ import annotations

import json
import math
import os
import platform
import stat
import sys
import tempfile

import numpy as np

from . import operators, rows

SCHEMA = "roundoff-coverage/1"
ADVICE_SCHEMA = "roundoff-coverage/advice-1"     # the advisor's answer (engine/advise.py)
# The row's fields, key and order: engine/rows.py declares them once.
ROW_FIELDS, FLOAT_FIELDS, NESTED_FIELDS = rows.ROW_FIELDS, rows.FLOAT_FIELDS, rows.NESTED_FIELDS
KEY_FIELDS, STATUSES = rows.KEY_FIELDS, rows.STATUSES
NONNEGATIVE_FIELDS, SIGNED_FIELDS = rows.NONNEGATIVE_FIELDS, rows.SIGNED_FIELDS
AGREEMENT_FIELDS, COSINE_FIELDS = rows.AGREEMENT_FIELDS, rows.COSINE_FIELDS
COUNT_FIELDS = rows.COUNT_FIELDS
row_key, route_key = rows.sort_key, rows.key


class ResultsError(ValueError):
    """A file that is not a readable roundoff-coverage results file (one-line message)."""


def clean(v):
    """JSON-ready data: numpy scalars to Python, non-finite floats to strings, tuples to
    lists, dict keys kept (sorted on output)."""
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if isinstance(v, np.ndarray):
        return [clean(x) for x in v.tolist()]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return v


def document(records, selection) -> dict:
    """The results document of the rows ``records`` measured for ``selection`` (any run
    kind's: the protocol plan.Selection, ``seed``, ``command()``, ``describe()`` -> the
    meta's selection, ``reference_text``); ``meta.units`` gives each numeric field's
    unit (engine/rows.py).  A selection of operators (``ops``) also records them
    (engine/operators.py: family, order, notes, certificates), so the report and the gate
    render the file with the notes it was measured with."""
    # start-up time: reading a results file (reports.load) loads neither numerics nor routes.
    from roundoff_coverage.numerics.metrics import HIST_EDGES
    records = list(records)
    return {"schema": SCHEMA, "meta": clean({
        "tool": "roundoff-coverage", "version": _version("roundoff-coverage"),
        "versions": {name: _version(name) for name in ("numpy", "mpmath", "gmpy2", "ml_dtypes",
                                                        "numba")}
        | {"python": platform.python_version()} | _torch_version(records),
        "seed": selection.seed, "command": selection.command(),
        "selection": selection.describe(),
        "machine": {"system": platform.system(), "machine": platform.machine()},
        "histogram_edges_ulp": list(HIST_EDGES),
        "bucket_edges_ulp": list(rows.BUCKET_EDGES),
        "reference": selection.reference_text,
        "units": {f.name: f.unit or "1" for f in rows.FIELDS
                  if f.unit or f.kind in (rows.RATIO, rows.REL)}}),
        **({"operators": clean(operators.record(selection.ops))}
           if getattr(selection, "ops", None) else {}),
        "rows": sorted((clean(r) for r in records), key=row_key)}


def _torch_version(records) -> dict:
    """{"torch": version} when a row was measured by torch (the implementations torch and
    torch_compile, engine/implementations/torch.py), else {}: the files of other runs stay
    as they were."""
    if not any(str(r.get("implementation", "")).startswith("torch") for r in records):
        return {}
    return {"torch": _version("torch")}


def _version(name) -> str:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:                                     # noqa: BLE001
        return "unknown"


def dumps(doc) -> str:
    """The file's text: one row per line inside ``rows``, keys sorted."""
    head = {k: v for k, v in doc.items() if k != "rows"}
    text = json.dumps(head, sort_keys=True, indent=1, allow_nan=False)
    lines = ",\n".join("  " + json.dumps(r, sort_keys=True, allow_nan=False,
                                         separators=(",", ":")) for r in doc["rows"])
    return text[:-2] + ',\n "rows": [\n' + lines + ("\n" if lines else "") + " ]\n}\n"


def write(path, doc, csv=None) -> None:
    """Write ``doc`` to ``path`` atomically (and the CSV export to ``csv``)."""
    _atomic(path, dumps(doc))
    if csv:
        to_csv(frame(doc), csv)


def _mode() -> int:
    """The permissions a new file gets under the process umask (mkstemp gives 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def special_file(path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (links
    followed): "a character device" (/dev/null), "a FIFO"...; else None."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return ("a character device" if stat.S_ISCHR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "a special file")


def write_data(path, data) -> None:
    """Write JSON data other than a results file (the advisor's answer) atomically: keys
    sorted, non-finite numbers as strings (``clean``)."""
    _atomic(path, json.dumps(clean(data), sort_keys=True, indent=1, allow_nan=False) + "\n")


def _atomic(path, text) -> None:
    if special_file(path):
        # Written as a stream: renaming a temporary file over /dev/null would replace the
        # device (for every program on the machine) with a regular file.
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    os.chmod(tmp, _mode())
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read(path) -> dict:
    """The results document at ``path``; ResultsError (one line) when it is not one."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise ResultsError(f"cannot read results file {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or \
            not isinstance(doc.get("rows"), list):
        raise ResultsError(f"{path} is not a {SCHEMA} results file")
    return doc


# ----- checking a document ---------------------------------------------------------------------

def attrs_text(attrs_json: str) -> str:
    """``{"axis":1,"shape":[2,3]}`` (a route key's attributes) as ``axis=1,shape=[2,3]``
    (routes.attributes_text, the one text of an operator's attributes)."""
    from roundoff_coverage.routes.codec import attributes_text  # start-up time (document)
    return attributes_text(json.loads(attrs_json))


def route_label(k) -> str:
    """A route key as one test id, fields joined with ``-`` (shared/STYLE.md rule 5):
    ``softmax[axis=1,shape=[2,3]]-forward-y-bfloat16-nearest_even-strict-emulated``."""
    op, attrs, *rest = k
    text = attrs_text(attrs)
    return "-".join([op + (f"[{text}]" if text else "")] + list(rest))


def number(v):
    """A float field's value as a float (the file's "inf", "-inf", "nan" included); None for a
    value that is not a number at all."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    return None


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _shown(v) -> str:
    return " ".join(repr(v).split())[:40]


def key_problem(row) -> str | None:
    """Why ``row`` has no route key (not an object, a key field missing or malformed), or
    None."""
    if not isinstance(row, dict):
        return f"is not an object ({type(row).__name__})"
    missing = [f for f in KEY_FIELDS + ("status",) if f not in row]
    if missing:
        return f"lacks {', '.join(missing)}"
    if not isinstance(row["attrs"], dict) or not all(
            isinstance(row[f], str) for f in KEY_FIELDS if f not in ("attrs", "port")):
        return "has a malformed key field"
    return None


def field_problems(row) -> list:
    """[(field, what is wrong and what would be right)] of a row with a key: its status and
    the domains of its numbers -- statistics and bounds >= 0 or inf (never NaN), signed
    errors min <= max, counts non-negative integers, p99 and mean no larger than the maximum
    (beyond a histogram's resolution), exceptional counts, histogram counts."""
    out = []
    if row["status"] not in STATUSES:
        out.append(("status", f"status must be one of {', '.join(STATUSES)} "
                              f"(got {_shown(row['status'])})"))
    values = {}
    for name in NONNEGATIVE_FIELDS + SIGNED_FIELDS:
        v = row.get(name)
        if v is None:
            continue
        f = number(v)
        signed = name in SIGNED_FIELDS
        if f is None or math.isnan(f) or (not signed and f < 0):
            what = "a number, inf, -inf or null" if signed else "a number >= 0, inf or null"
            out.append((name, f"{name} must be {what} (got {_shown(v)})"))
        else:
            values[name] = f
    for name in AGREEMENT_FIELDS:
        v = row.get(name)
        if v is not None and (number(v) is None or math.isnan(number(v))):
            out.append((name, f"{name} must be a number, inf, -inf or null (got {_shown(v)})"))
    for name in COSINE_FIELDS:
        v = row.get(name)
        if v is not None and (number(v) is None or not -1.0 <= number(v) <= 1.0):
            out.append((name, f"{name} must be a number in [-1, 1] or null (got {_shown(v)})"))
    for name in COUNT_FIELDS:
        v = row.get(name)
        if v is not None and not _count(v):
            out.append((name, f"{name} must be a non-negative integer or null (got {_shown(v)})"))
    v = row.get("ref_prec")
    if v is not None and not (_count(v) and v > 0):
        out.append(("ref_prec", f"ref_prec must be a positive number of bits or null "
                                f"(got {_shown(v)})"))
    v = row.get("exhaustive")
    if v is not None and not isinstance(v, bool):
        out.append(("exhaustive", f"exhaustive must be true or false (got {_shown(v)})"))
    v = row.get("exceptional")
    if v is not None and not (isinstance(v, dict) and all(_count(n) for n in v.values())):
        out.append(("exceptional", f"exceptional must map outcome classes to non-negative "
                                   f"integer counts (got {_shown(v)})"))
    v = row.get("histogram")
    if v is not None and not (isinstance(v, list) and all(_count(n) for n in v)):
        out.append(("histogram", f"histogram must be a list of non-negative integer counts "
                                 f"(got {_shown(v)})"))
    top = values.get("max_ulp")
    if top is not None:
        # measure reads p99 and the mean off histograms of screened errors: p99 is the upper
        # edge of its 1/1024-ulp step below 4 ulps, of its binade above (edges 2**k up to
        # 2**20, then inf), so either may exceed the exact maximum by that resolution, never
        # by more than 2 * max + 2**-9.
        ceiling = math.inf if top >= 2.0 ** 19 else 2 * top + 2.0 ** -9
        for name in ("p99_ulp", "mean_ulp"):
            if values.get(name, 0.0) > ceiling:
                out.append((name, f"{name} {_shown(row[name])} exceeds max_ulp "
                                  f"{_shown(row['max_ulp'])}: it must be <= max_ulp"))
    lo, hi = values.get("min_signed_ulp"), values.get("max_signed_ulp")
    if lo is not None and hi is not None and lo > hi:
        out.append(("min_signed_ulp", f"min_signed_ulp {_shown(row['min_signed_ulp'])} exceeds "
                                      f"max_signed_ulp {_shown(row['max_signed_ulp'])}: it "
                                      f"must be <= max_signed_ulp"))
    if values.get("mean_bits", 0.0) > values.get("max_bits", math.inf):
        out.append(("mean_bits", f"mean_bits {_shown(row['mean_bits'])} exceeds max_bits "
                                 f"{_shown(row['max_bits'])}: it must be <= max_bits"))
    return out + _kind_field_problems(row) + _box_problems(row)


def _box_problems(row) -> list:
    """field_problems of ``box`` (roundoff-coverage bound): null, or [low, high], two finite
    numbers with low <= high."""
    v = row.get("box")
    if v is None:
        return []
    ends = [number(x) for x in v] if isinstance(v, list) and len(v) == 2 else None
    if ends is None or any(e is None or not math.isfinite(e) for e in ends) \
            or ends[0] > ends[1]:
        return [("box", f"box must be [low, high], two finite numbers with low <= high, or "
                        f"null (got {_shown(v)})")]
    return []


def _kind_field_problems(row) -> list:
    """field_problems of ``buckets``, ``by_kind``, ``inside`` and ``by_input`` (absent from
    files written before them: None passes)."""
    out = []
    problem = _buckets_problem(row.get("buckets"), row.get("samples"))
    if problem:
        out.append(("buckets", f"buckets {problem}"))
    v = row.get("by_kind")
    if v is not None:
        problem = "must map sample kinds to objects" if not isinstance(v, dict) else next(
            (f"[{k!r}] {p}" for k, stats in v.items()
             for p in [_kind_problem(stats)] if p), None)
        if problem:
            out.append(("by_kind", f"by_kind {problem}"))
    for name in ("inside", "by_input"):
        v = row.get(name)
        if v is not None and not isinstance(v, dict):
            out.append((name, f"{name} must be an object or null (got {_shown(v)})"))
    return out + _scaled_problems(row)


def _scaled_problems(row) -> list:
    """field_problems of a scaled task's fields (rows.SCALED_FIELDS; null elsewhere): text
    fields text, ``scale_exponents`` [[exponent, blocks], ...], zero and NaN blocks no more
    than the blocks, ``scaled_inputs`` an object of the same counts per input."""
    out = []
    for name in ("scheme", "scale_axis", "error_unit"):
        v = row.get(name)
        if v is not None and not isinstance(v, str):
            out.append((name, f"{name} must be text or null (got {_shown(v)})"))
    problem = _blocks_problem(row)
    if problem:
        out.append(("scale_exponents" if "scale_exponents" in problem else "blocks", problem))
    v = row.get("scaled_inputs")
    if v is not None:
        problem = "must map inputs to objects" if not isinstance(v, dict) else next(
            (f"[{k!r}] {p}" for k, c in v.items()
             for p in [_blocks_problem(c) if isinstance(c, dict) else "is not an object"]
             if p), None)
        if problem:
            out.append(("scaled_inputs", f"scaled_inputs {problem}"))
    return out


def _blocks_problem(c) -> str | None:
    """What is wrong with the block counts of one quantized port (blocks, clipped,
    zero_blocks, nan_blocks, scale_exponents), or None."""
    for name in ("blocks", "clipped", "zero_blocks", "nan_blocks"):
        if c.get(name) is not None and not _count(c[name]):
            return f"{name} must be a non-negative integer or null (got {_shown(c[name])})"
    v = c.get("scale_exponents")
    if v is not None and not (isinstance(v, list) and all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], int)
            and not isinstance(p[0], bool) and _count(p[1]) for p in v)):
        return (f"scale_exponents must be a list of [exponent, blocks] integer pairs "
                f"(got {_shown(v)})")
    blocks = c.get("blocks")
    if _count(blocks):
        parts = [c.get(n) for n in ("zero_blocks", "nan_blocks")]
        if sum(n for n in parts if _count(n)) > blocks:
            return (f"zero_blocks and nan_blocks add up to more than the {blocks} blocks "
                    f"(got {parts[0]} and {parts[1]})")
        if isinstance(v, list) and sum(p[1] for p in v) + (parts[1] or 0) > blocks:
            return (f"scale_exponents count more blocks than the {blocks} blocks with a "
                    f"finite scale")
    return None


def _buckets_problem(v, samples) -> str | None:
    """What is wrong with a ``buckets`` list (rows.BUCKET_LABELS), or None: one count per
    bucket, adding up to ``samples`` when that is a count."""
    if v is None:
        return None
    n = len(rows.BUCKET_LABELS)
    if not (isinstance(v, list) and len(v) == n and all(_count(c) for c in v)):
        return f"must be a list of {n} non-negative integer counts (got {_shown(v)})"
    if _count(samples) and sum(v) != samples:
        return f"add up to {sum(v)}, not to the {samples} samples"
    return None


def _kind_problem(stats) -> str | None:
    """What is wrong with one sample kind's statistics (rows.KIND_STATS), or None."""
    if not isinstance(stats, dict):
        return f"must be an object of statistics (got {_shown(stats)})"
    for name in ("samples", "unmeasured"):
        if stats.get(name) is not None and not _count(stats[name]):
            return f"{name} must be a non-negative integer (got {_shown(stats[name])})"
    for name in ("max_ulp", "p99_ulp", "mean_ulp", "max_bits", "mean_bits"):
        v = stats.get(name)
        f = None if v is None else number(v)
        if v is not None and (f is None or math.isnan(f) or f < 0):
            return f"{name} must be a number >= 0, inf or null (got {_shown(v)})"
    exc = stats.get("exceptional")
    if exc is not None and not (isinstance(exc, dict) and all(_count(n) for n in exc.values())):
        return f"exceptional must map outcome classes to counts (got {_shown(exc)})"
    problem = _buckets_problem(stats.get("buckets"), stats.get("samples"))
    return f"buckets {problem}" if problem else None


def check(doc, path, role="results file", strict=True) -> dict:
    """``doc`` (as ``read`` returns it) when it can be compared and reported; ResultsError,
    one line naming ``role``, ``path``, the row and the field, for the first defect.
    ``strict`` (the gate): ``meta`` must hold the seed and the sample count (non-negative
    integers) and every row must have its key and fields in their domains (``field_problems``).
    Not strict (the report, which draws a malformed row as an error row): only two
    well-formed rows with one route key are refused, as they are in both cases -- the route's
    numbers would be ambiguous."""
    where = f"{role} {path}"
    if strict:
        meta = doc.get("meta")
        if not isinstance(meta, dict):
            raise ResultsError(f"{where}: no meta object")
        sel = meta.get("selection")
        if not _count(meta.get("seed")) or not isinstance(sel, dict) \
                or not _count(sel.get("samples")):
            raise ResultsError(f"{where}: its meta lacks the seed or the sample count "
                               f"(meta.seed, meta.selection.samples: non-negative integers)")
    seen = {}
    for i, row in enumerate(doc["rows"]):
        problem = key_problem(row)
        if problem is not None:
            if strict:
                raise ResultsError(f"{where}: row {i} {problem}")
            continue
        k = route_key(row)
        fields = field_problems(row)
        if fields and strict:
            raise ResultsError(f"{where}: row {i} ({route_label(k)}): {fields[0][1]}")
        if fields:
            continue                     # drawn as an error row of its own, not the route's
        if k in seen:
            raise ResultsError(f"{where}: rows {seen[k]} and {i} are both {route_label(k)}")
        seen[k] = i
    return doc


# The DataFrame's names of row fields that pandas shadows: ``Series.attrs`` and
# ``DataFrame.attrs`` are pandas' own metadata, so a row's ``row.attrs`` could never be the
# operator's attributes.  The frame (and its CSV export) calls that column ``attributes``.
FRAME_NAMES = {"attrs": "attributes"}
FRAME_COLUMNS = tuple(FRAME_NAMES.get(f, f) for f in ROW_FIELDS)


def frame(doc):
    """A tidy DataFrame of a results document: one row per (route, port) measured; the
    columns FRAME_COLUMNS (the row fields, ``attrs`` as ``attributes``), the file's meta in
    ``df.attrs["meta"]``."""
    import pandas as pd
    records = [{FRAME_NAMES.get(f, f): r.get(f) for f in ROW_FIELDS} for r in doc["rows"]]
    df = pd.DataFrame(records, columns=list(FRAME_COLUMNS))
    for f in FLOAT_FIELDS:
        df[f] = pd.to_numeric(df[f].map(_number), errors="coerce").astype("float64")
    for f in ("samples", "unmeasured"):
        df[f] = df[f].fillna(0).astype("int64")
    for f in ("violations", "mismatches", "ref_prec", "cancelled"):
        df[f] = df[f].astype("Int64")
    df["exhaustive"] = df["exhaustive"].astype(bool)
    df.attrs["meta"] = doc.get("meta", {})
    return df


def _number(v):
    if v is None:
        return math.nan
    if isinstance(v, str):
        return float(v)                    # "inf", "-inf", "nan"
    return float(v)


def load(path):
    """``reports.load``: the results file at ``path`` as a pandas DataFrame (FRAME_COLUMNS:
    the row fields, the operator's attributes as ``attributes``, so ``row.attributes``
    reaches them on a row; ``df.attrs["meta"]`` holds the meta object)."""
    return frame(read(path))


def to_csv(df, path) -> None:
    """CSV export of a ``frame``: its columns, nested fields (attributes, exceptional,
    histogram, by_kind, worst...) as JSON text."""
    out = df.copy()
    for f in NESTED_FIELDS:
        f = FRAME_NAMES.get(f, f)
        out[f] = out[f].map(lambda v: json.dumps(v, sort_keys=True) if v is not None else "")
    if special_file(path):                               # a stream, never a rename (_atomic)
        out.to_csv(path, index=False)
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".csv", dir=folder)
    os.close(fd)
    os.chmod(tmp, _mode())
    try:
        out.to_csv(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def machine_note() -> str:
    return f"{platform.system()} {platform.machine()}, python {sys.version.split()[0]}"
