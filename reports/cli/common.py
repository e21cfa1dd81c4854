"""What the subcommands of the command line share: the parser class, ``UsageError`` and
the exit statuses, the validators of paths, name lists, numbers and seeds, the
``--formats-file`` reader, the executor options of ``run`` and ``measure``, and the text
table of ``formats`` and ``ops``."""

from __future__ import annotations

import argparse
import os
import re
import sys

from roundoff_coverage import formats

from ...engine import executors
from ...engine.orchestrate import checkpoint_path
from ...engine.results import special_file
from .. import tomlfile

PROG = "roundoff-coverage"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A user error: bad arguments or bad input.  Its message is one line; exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises UsageError instead of printing usage and exiting,
    so ``main`` reports it like every other user error (subparsers inherit the class).
    Options are never abbreviated: ``bound --formats X`` would otherwise be read as
    ``--formats-file X`` and report a missing file instead of an unknown option."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


# Seeds: numpy's SeedSequence takes any non-negative integer; the results file keeps the seed
# as a JSON integer, which readers with 64-bit integers hold exactly up to 2**63 - 1.
SEED_MAX = 2**63 - 1
SEED_WHY = ": at most 2**63 - 1, which every reader of the results file holds exactly"
# A Dask LocalCluster starts every one of its --jobs workers, whatever the work: the work is
# CPU-bound, so more than a few per core only adds memory (a worker holds numpy, numba and
# mpmath: hundreds of MiB).  The local executor starts no more workers than units, and
# engine/budget.py refuses a plan that cannot fit this machine's memory.
JOBS_PER_CORE = 4


# ----- arguments -------------------------------------------------------------------------------

def path_arg(text) -> str:
    """An argument that names a file or folder: not empty, no NUL character (the system
    refuses it); argparse reports the error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path (give a file or folder name)")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a path (it holds a NUL character)")
    return text


# ----- options run, model and bound share --------------------------------------------------

def add_modes_routes(p) -> None:
    """--modes and --routes."""
    p.add_argument("--modes", metavar="LIST", help="rounding modes (default: nearest_even)")
    p.add_argument("--routes", metavar="LIST",
                   help="route kinds among forward,tangent,gradient (default: all three)")


def add_seed_out(p, out: str) -> None:
    """--seed and --out (the results file, ``out`` by default)."""
    p.add_argument("--seed", metavar="N", type=int, help="seed of every random stream "
                                                         "(default 0)")
    p.add_argument("--out", metavar="PATH", type=path_arg,
                   help=f"results file (default {out})")


def modes_of(args, known=formats.MODES) -> tuple:
    """The rounding modes of --modes (nearest_even by default) among ``known``."""
    return name_list(args.modes, "rounding mode", known, ("nearest_even",), "--modes")


def routes_of(args, known) -> tuple:
    """The route kinds of --routes among ``known`` (all of them by default)."""
    return name_list(args.routes, "route", known, known, "--routes")


def seed_of(args) -> int:
    """The --seed (0 by default), within what every reader of the results file holds."""
    return in_range("--seed", 0 if args.seed is None else args.seed, 0, SEED_MAX, SEED_WHY)


def user_formats(args) -> dict:
    """The formats of ``--formats-file`` (empty without it), by name."""
    path = getattr(args, "formats_file", None)
    if not path:
        return {}
    return formats.user_formats(tomlfile.read(path, "formats file"), path)


def empty_list(option, what) -> str:
    return (f"{option}: empty list of {what}s (give one or more names, comma-separated; "
            f"leave the option out for the default)")


def name_list(text, what, known, default, option):
    """A comma-separated list checked against ``known`` (UsageError with close matches; an
    empty list is an error too)."""
    if text is None:
        return tuple(default)
    import difflib
    out = []
    for name in (n.strip() for n in text.split(",")):
        if not name:
            continue
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=4, cutoff=0.6)
            hint = f" (close matches: {', '.join(close)})" if close else ""
            raise UsageError(f"unknown {what} {name!r}{hint}")
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError(empty_list(option, what))
    return tuple(out)


def in_range(option, value, lo, hi, why="") -> int:
    """``value`` when lo <= value <= hi, else UsageError naming ``option`` and the range."""
    if not lo <= value <= hi:
        raise UsageError(f"{option} must be from {lo} to {hi} (got {value}){why}")
    return value


def check_jobs(jobs, executor, scheduler) -> None:
    """--jobs is at least 1 and, for a Dask LocalCluster, at most JOBS_PER_CORE per core."""
    if jobs is None:
        return
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1 (got {jobs})")
    if executor == executors.DASK and scheduler is None:
        cores = os.cpu_count() or 1
        in_range("--jobs", jobs, 1, JOBS_PER_CORE * cores,
                 f": a Dask LocalCluster of {JOBS_PER_CORE} worker processes per core of "
                 f"this machine's {cores}; more only cost memory")


def writable(path, what, stream_refused=None) -> str:
    """``path`` when its folder exists or can be made and a file can be written there.  An
    existing special file (/dev/null, a FIFO: results.special_file) is written as a stream,
    never replaced; ``stream_refused``, where the command cannot use one, says why (it keeps
    files beside it, or reads the file back), and it is refused."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{what} {path} is a directory")
    kind = special_file(path)
    if kind and stream_refused:
        raise UsageError(f"{what} {path} is {kind}, not a regular file: {stream_refused}; "
                         f"give a file path")
    if kind:
        if not os.access(path, os.W_OK):
            raise UsageError(f"cannot write {what} {path}: permission denied")
        return path
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".roundoff-coverage-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    return path


# ----- executor options ------------------------------------------------------------------------

def add_units(p, jobs="worker processes (default: all cores)",
              resume="continue an interrupted run from <out>.partial.jsonl",
              quiet="no progress and no summary", executor=True):
    """The options of a command whose units are checkpointed as they finish
    (engine/orchestrate.py): --jobs, --executor and --scheduler (``executor``), --resume
    and --quiet, with their help texts."""
    p.add_argument("--jobs", metavar="N", type=int, help=jobs)
    if executor:
        add_executor(p)
    p.add_argument("--resume", action="store_true", help=resume)
    p.add_argument("--quiet", action="store_true", help=quiet)


def interrupted(outcome, out, units="tasks") -> int:
    """Say on stderr how much of an interrupted run its checkpoint keeps and how to go on;
    EXIT_INTERRUPTED."""
    print(f"{PROG}: interrupted: {outcome.resumed + outcome.ran} of {outcome.total} {units} "
          f"kept in {checkpoint_path(out)}; rerun with --resume", file=sys.stderr)
    return EXIT_INTERRUPTED


def add_executor(p):
    """The --executor and --scheduler options of ``run``, ``measure`` and ``model``."""
    p.add_argument("--executor", metavar="NAME",
                   help="where the work units run: local (this machine's worker processes, "
                        "the default) or dask (a Dask cluster; pip install "
                        "'roundoff-coverage[dask]')")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="the Dask scheduler to send the units to (tcp://HOST:PORT; implies "
                        "--executor dask); with --executor dask and no address, a "
                        "LocalCluster of --jobs worker processes on this machine")


def executor_options(args) -> tuple:
    """(executor, scheduler address or None) of the options.  Dask is imported here, so a
    missing extra fails before any work, not after the planning."""
    executor = args.executor if args.executor is not None else \
        executors.DASK if args.scheduler is not None else executors.LOCAL
    if executor not in executors.EXECUTORS:
        raise UsageError(f"unknown executor {executor!r} (choose from "
                         f"{', '.join(executors.EXECUTORS)})")
    if executor == executors.LOCAL and args.scheduler is not None:
        raise UsageError(f"--scheduler {args.scheduler}: the local executor has no scheduler; "
                         f"use --executor dask")
    if executor == executors.DASK:
        try:
            executors.require()
        except executors.ExecutorError as exc:
            raise UsageError(str(exc)) from None
        if args.scheduler is not None:
            check_scheduler(args.scheduler)
    return executor, args.scheduler


_SCHEDULER_FORMS = ("tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT, wss://HOST:PORT, "
                    "ucx://HOST:PORT, inproc://ADDRESS or HOST:PORT (tcp)")


def check_scheduler(address) -> None:
    """UsageError, at once and without connecting, for a --scheduler address Dask cannot
    parse: distributed's own parsers (``parse_address``, ``parse_host_port``) on a scheme it
    knows, a host and a port in 1..65535 (inproc: any location)."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    def bad(why):
        return UsageError(f"--scheduler {address!r}: {why}; give {_SCHEDULER_FORMS}")

    if not isinstance(address, str) or not address.strip() or address != address.strip():
        raise bad("not an address")
    try:
        scheme, location = parse_address(address, strict=False)
    except (ValueError, TypeError) as exc:
        raise bad(" ".join(str(exc).split())) from None
    known = set(backends) | {"tcp", "tls", "ws", "wss", "ucx", "inproc"}
    if scheme not in known:
        raise bad(f"unknown protocol {scheme!r}")
    if scheme == "inproc":
        if not location:
            raise bad("no location after inproc://")
        return
    try:
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise bad(" ".join(str(exc).split())) from None
    if not host:
        raise bad("no host")
    # A host name, an IPv4 address or an IPv6 one (brackets taken off, maybe with a zone).
    if not re.fullmatch(r"[A-Za-z0-9._:%-]+", host):
        raise bad(f"host {host!r} is not a host name or an IP address")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise bad(f"port {port} is not in 1..65535")


# ----- text ------------------------------------------------------------------------------------

def text_table(headers, rows, numeric=()) -> str:
    """Rows of strings aligned under ``headers``; the columns whose indices are in
    ``numeric`` are right-aligned, the others left-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers)] + [line(r) for r in rows])
