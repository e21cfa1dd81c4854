"""The ``roundoff-coverage`` command line: one parser, one module per subcommand.

``main(argv) -> int`` returns the exit status of shared/ARCHITECTURE.md: 0 success, 1 a gate
or check failed, 2 bad usage or bad input, 130 interrupted.  User errors (``UsageError``,
``FormatError``, ``TomlError``, argparse's own) are turned into one line
``roundoff-coverage: error: <reason>`` on stderr in exactly one place, ``main``; a
subcommand only raises them.

A subcommand is a module of this package (formats, ops, policies, run, model, advise, bound, gate, report,
measure) whose ``add(subparsers, shared)`` declares its arguments and sets ``handler``;
``SUBCOMMANDS`` names them.  ``shared`` is the parent parser of the options every subcommand that names
formats shares (``--formats-file``).  What the modules share is in ``common``.  Only the
module of the subcommand that runs is imported (``run`` needs the operator table and the
engine, ``formats`` neither): the whole list is read only to list them all (``--help``, a
missing or unknown subcommand).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from roundoff_coverage.engine.implementations import ImplementationError
from roundoff_coverage.formats import FormatError

from ..tomlfile import TomlError
from .common import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PROG, Parser,
                     UsageError, path_arg)

__all__ = ["main", "build_parser", "UsageError", "PROG", "EXIT_OK", "EXIT_FAILED",
           "EXIT_USAGE", "EXIT_INTERRUPTED"]

SUBCOMMANDS = ("formats", "ops", "policies", "run", "model", "advise", "bound", "gate", "report", "measure")


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); the exit status.

    Every way out is one of the statuses above, never a traceback: a user error is one line
    and 2; Ctrl-C is one line and 130; output cut off by its reader (``| head``) ends
    quietly with 1 (the status the command would have had is unknown, so never a pass);
    anything else is a bug, reported in one line with 1 (the traceback too under
    ROUNDOFF_COVERAGE_TRACEBACK=1)."""
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(_subcommand(argv))
        args = parser.parse_args(argv)
        status = args.handler(args)
        sys.stdout.flush()                             # a closed pipe shows here, not at exit
        return status
    except (UsageError, FormatError, TomlError, ImplementationError) as exc:
        message = " ".join(str(exc).split())           # one line, whatever the source
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:                          # --help exits 0 from inside argparse
        return EXIT_OK if exc.code in (None, 0) else EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_FAILED
    except Exception as exc:                           # noqa: BLE001 (the last resort)
        return _internal_error(exc)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed pipe is quiet."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):      # not a real file (a test's capture)
        pass


def _internal_error(exc) -> int:
    """One line for an exception no code path expected (a bug), the traceback before it
    only when ROUNDOFF_COVERAGE_TRACEBACK is set; exit status 1."""
    import os
    import traceback
    if os.environ.get("ROUNDOFF_COVERAGE_TRACEBACK", "") not in ("", "0"):
        traceback.print_exc()
    message = " ".join(str(exc).split())[:500]
    print(f"{PROG}: internal error: {type(exc).__name__}: {message} (a bug: please report it; "
          f"ROUNDOFF_COVERAGE_TRACEBACK=1 shows the traceback)", file=sys.stderr)
    return EXIT_FAILED


def _subcommand(argv) -> str | None:
    """The subcommand ``argv`` runs (its first word, when it names one), else None."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in SUBCOMMANDS and argv[0] == first else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line: every subcommand of ``SUBCOMMANDS`` under one parser, or the one
    named ``only``."""
    parser = Parser(prog=PROG, description="Roundoff and numerics analysis workbench.")
    shared = Parser(add_help=False)
    shared.add_argument("--formats-file", metavar="PATH", type=path_arg,
                        help="TOML file of user formats ([formats.NAME] tables with exp_bits, "
                             "man_bits and optionally bias, encoding, saturate, "
                             "flush_subnormals)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=Parser)
    for name in SUBCOMMANDS if only is None else (only,):
        importlib.import_module(f"{__name__}.{name}").add(sub, shared)
    return parser
