"""The one TOML reader of reports: ``run --config``, ``--formats-file`` and
``gate --tolerances`` all read their files with ``read``, so a file that cannot be read or
is not TOML gives the same one-line message whichever option named it.

What the document means is each caller's business (reports/cli/run.py, formats.user_formats,
reports/gate.py); its messages name the file the same way: ``<what> <path>: ...``.
"""

from __future__ import annotations

import tomllib


class TomlError(ValueError):
    """A TOML file that cannot be read or parsed (one-line message)."""


def read(path, what: str) -> dict:
    """The document of the TOML file ``path``; ``what`` names the file in messages
    (``config file``).  TomlError: ``cannot read <what> <path>: <reason>`` or ``<what>
    <path> is not valid TOML (<reason>)``."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise TomlError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TomlError(f"{what} {path} is not valid TOML ({' '.join(str(exc).split())})") \
            from None
    except UnicodeDecodeError as exc:           # tomllib decodes before it parses
        raise TomlError(f"{what} {path} is not valid TOML (not UTF-8 text at byte "
                        f"{exc.start})") from None
