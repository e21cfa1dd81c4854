"""The results file ``roundoff-coverage/1``: JSON with ``schema``, ``meta`` and ``rows``.

``document(rows, selection) -> dict``; ``dumps(doc) -> str`` is deterministic: rows sorted by
their key (op, attributes, route, port, format, mode, policy, implementation), keys sorted,
floats as Python's shortest round-trip repr, non-finite floats as the strings ``"inf"``,
``"-inf"``, ``"nan"`` (JSON has none), numpy scalars as plain numbers.  Nothing in the file
depends on time, worker order or --jobs, so the same command and seed give the same bytes.
``write(path, doc, csv=None)`` writes atomically (a temporary file in the same folder, then
os.replace).  ``load(path) -> pandas.DataFrame`` (one row per measured route, the columns of
ROW_FIELDS; floats back to float); ``to_csv(frame, path)`` with nested fields as JSON text.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import tempfile

import numpy as np

SCHEMA = "roundoff-coverage/1"
ROW_FIELDS = ("op", "instance", "attrs", "route", "port", "format", "mode", "policy",
              "implementation", "device", "status", "reason", "need", "exhaustive", "samples",
              "max_ulp", "p99_ulp", "mean_ulp", "min_signed_ulp", "max_signed_ulp", "max_rel",
              "bound", "bound_ratio", "violations", "unbounded", "interval_bound",
              "interval_bound_ratio", "interval_unbounded", "exceptional", "flags", "unmeasured",
              "mismatches", "histogram", "by_magnitude", "ref_prec", "worst",
              "incorrectly_rounded", "resolved_exactly", "contract")
FLOAT_FIELDS = ("max_ulp", "p99_ulp", "mean_ulp", "min_signed_ulp", "max_signed_ulp",
                "max_rel", "bound", "bound_ratio", "interval_bound", "interval_bound_ratio")
NESTED_FIELDS = ("attrs", "exceptional", "flags", "histogram", "by_magnitude", "worst",
                 "contract")
ROUTE_ORDER = {"forward": 0, "tangent": 1, "gradient": 2}


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


def row_key(row) -> tuple:
    return (row["op"], json.dumps(row["attrs"], sort_keys=True),
            ROUTE_ORDER.get(row["route"], 9), row["route"], str(row["port"]), row["format"],
            row["mode"], row["policy"], row["implementation"])


COVERAGE_REFERENCE = ("numerics.reference at format precision + 64 bits, recomputed once at "
                      "+ 192 bits where an error exceeds 1 ulp or its bound or lies within "
                      "2**-40 ulp of a half-integer")


def document(rows, selection) -> dict:
    """The results document of ``rows`` measured for ``selection``: a runner.Selection or a
    measure.Measurement (``seed``, ``command()``, ``describe()`` -> the meta's selection,
    ``reference_text``)."""
    from roundoff_coverage.numerics.metrics import HIST_EDGES
    return {"schema": SCHEMA, "meta": clean({
        "tool": "roundoff-coverage", "version": _version("roundoff-coverage"),
        "versions": {name: _version(name) for name in ("numpy", "mpmath", "gmpy2", "ml_dtypes",
                                                        "numba")}
        | {"python": platform.python_version()},
        "seed": selection.seed, "command": selection.command(),
        "selection": selection.describe(),
        "machine": {"system": platform.system(), "machine": platform.machine()},
        "histogram_edges_ulp": list(HIST_EDGES),
        "reference": getattr(selection, "reference_text", COVERAGE_REFERENCE),
        "units": {"max_ulp": "ulp", "p99_ulp": "ulp", "mean_ulp": "ulp", "max_rel": "1",
                  "bound": "ulp", "interval_bound": "ulp", "ref_prec": "bits"}}),
        "rows": sorted((clean(r) for r in rows), key=row_key)}


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
    rows = ",\n".join("  " + json.dumps(r, sort_keys=True, allow_nan=False,
                                        separators=(",", ":")) for r in doc["rows"])
    return text[:-2] + ',\n "rows": [\n' + rows + ("\n" if rows else "") + " ]\n}\n"


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


def _atomic(path, text) -> None:
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


def frame(doc):
    """A tidy DataFrame of a results document: one row per (route, port) measured."""
    import pandas as pd
    rows = [{f: r.get(f) for f in ROW_FIELDS} for r in doc["rows"]]
    df = pd.DataFrame(rows, columns=list(ROW_FIELDS))
    for f in FLOAT_FIELDS:
        df[f] = pd.to_numeric(df[f].map(_number), errors="coerce").astype("float64")
    for f in ("samples", "unmeasured"):
        df[f] = df[f].fillna(0).astype("int64")
    for f in ("violations", "mismatches", "ref_prec"):
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
    """``reports.load``: the results file at ``path`` as a pandas DataFrame (ROW_FIELDS
    columns; ``df.attrs["meta"]`` holds the meta object)."""
    return frame(read(path))


def to_csv(df, path) -> None:
    """CSV export: nested fields (attrs, exceptional, histogram, worst) as JSON text."""
    out = df.copy()
    for f in NESTED_FIELDS:
        out[f] = out[f].map(lambda v: json.dumps(v, sort_keys=True) if v is not None else "")
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
