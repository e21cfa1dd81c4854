"""``roundoff-coverage report RESULTS --out DIR``: the static HTML report of a results
file, and the report that ``run --html`` writes of its fresh results."""

from __future__ import annotations

import json

from ...engine.results import ADVICE_SCHEMA
from ..html import HtmlError, build, build_advice, prepare
from .common import EXIT_OK, UsageError, path_arg


def add(sub, shared):
    p = sub.add_parser("report", help="write the static HTML report of a results file",
                       description="Write a static HTML report of the results file RESULTS "
                                   "into DIR (index.html, one page per operator, assets/): "
                                   "what was run, coverage, a heat map of max ulp errors, a "
                                   "sortable table of every row, histograms, errors by "
                                   "magnitude, bounds and worst-case reproducers.  It opens "
                                   "from disk, with no server and no network.")
    p.add_argument("results", metavar="RESULTS", type=path_arg,
                   help="a results file (roundoff-coverage/1), or the answer of "
                        "`advise --out` (its page, advice.html)")
    p.add_argument("--out", metavar="DIR", type=path_arg, required=True,
                   help="the report folder (created)")
    p.add_argument("--baseline", metavar="BASELINE", type=path_arg,
                   help="also compare with the baseline results file BASELINE "
                        "(compare.html: what got better and worse, as the gate judges it)")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    p.set_defaults(handler=cmd_report)


def cmd_report(args) -> int:
    """``report RESULTS --out DIR [--baseline BASELINE]``: exit 0, or 2 for a file that is
    not a readable results file or a folder that cannot be written (the files are read
    before the folder is made).  An advisor's answer gets its page."""
    advice = _advice(args.results)
    if advice is None:
        write_report(args.results, args.out, args.baseline, args.quiet)
        return EXIT_OK
    if args.baseline:
        raise UsageError(f"--baseline compares results files; {args.results} is an "
                         f"advisor's answer (leave out --baseline)")
    try:
        built = build_advice(advice, args.out)
    except HtmlError as exc:
        raise UsageError(str(exc)) from None
    if not args.quiet:
        print(f"report: {built.index}")
    return EXIT_OK


def _advice(path) -> dict | None:
    """The advisor's answer in ``path`` (``advise --out``), or None for any other file (the
    results reader then says what is wrong with it)."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == ADVICE_SCHEMA else None


def check_report_dir(path) -> None:
    """Before a run or a report: the report folder can be made and written."""
    try:
        prepare(path)
    except HtmlError as exc:
        raise UsageError(str(exc)) from None


def write_report(results_path, out_dir, baseline, quiet) -> None:
    """The HTML report of ``results_path`` (compared with ``baseline``) into ``out_dir``,
    a summary line unless ``quiet``; UsageError for a file or folder it cannot use."""
    try:
        built = build(results_path, out_dir, baseline)
    except HtmlError as exc:
        raise UsageError(str(exc)) from None
    if not quiet:
        print(f"report: {built.index} ({built.files} files, {built.seconds:.1f} s)")
