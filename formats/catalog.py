"""``get``: a format from a name, an alias, a compact spec, keywords or a scaled scheme; and
user formats from a TOML file.

The named element formats (``CATALOG``) and the compact spec are formats/format.py's; the
scaled schemes (``SCALED``) are formats/scaled.py's.  This module reads names of every kind,
so it sits above both.
"""

from __future__ import annotations

import difflib
import tomllib

from .format import CATALOG, ENCODINGS, BinaryFormat, FormatError, from_compact, named_if_catalog
from .scaled import SCALED, ScaledFormat, is_scaled_name, parse
from .scaled import from_mapping as scaled_from_mapping


ALIASES = {
    "float16": "binary16", "half": "binary16", "fp16": "binary16",
    "float32": "binary32", "single": "binary32", "fp32": "binary32",
    "float64": "binary64", "double": "binary64", "fp64": "binary64",
    "quad": "binary128", "float128": "binary128", "bf16": "bfloat16",
}

_KEYS = {"exp_bits", "man_bits", "bias", "encoding", "saturate", "flush_subnormals"}


def get(spec, known: dict | None = None):
    """A format from a BinaryFormat, a catalog name or alias, a name in ``known`` (formats
    loaded from a file), a compact spec (``e5m10``, ``e4m3fn``, ``e4m3b11fnuz``, suffixes
    ``-sat`` and ``-ftz``) or keywords (``exp_bits=5,man_bits=2,encoding=fnuz``): a
    BinaryFormat.

    A compact spec that is a catalog name without its ``floatN_`` prefix is that catalog
    format (``e2m1fn`` is float4_e2m1fn); otherwise the suffix is the encoding.

    A scaled format (a ScaledFormat: ``formats.scaled``) for a scaled catalog name or a
    ``[scaled.NAME]`` of ``known``, with options (``mxfp8_e4m3``, ``nvfp4``,
    ``mxfp8_e4m3:rceil``, ``fp8_e4m3_tensor:delayed:margin=1``).
    """
    if isinstance(spec, (BinaryFormat, ScaledFormat)):
        return spec
    if not isinstance(spec, str):
        raise FormatError(f"format: expected a format name or spec, got {type(spec).__name__}")
    text = spec.strip()
    key = text.lower()
    if known and text in known:
        return known[text]
    if key in CATALOG:
        return CATALOG[key]
    if key in ALIASES:
        return CATALOG[ALIASES[key]]
    if is_scaled_name(text, known):
        return parse(text, known)
    if "=" in text:
        return _from_keywords(text)
    fmt = from_compact(key)
    if fmt is not None:
        return fmt
    raise FormatError(f"unknown format {spec!r}{_suggest(key, known)}")


def _suggest(key, known=None) -> str:
    names = list(CATALOG) + list(ALIASES) + list(SCALED) + list(known or ())
    close = difflib.get_close_matches(key, names, n=4, cutoff=0.5)
    hint = f"; close: {', '.join(close)}" if close else ""
    return hint + "; or give a spec like e5m10, e4m3fn, or exp_bits=5,man_bits=2,encoding=fnuz"


def _from_keywords(text: str) -> BinaryFormat:
    fields = {}
    for part in text.split(","):
        if "=" not in part:
            raise FormatError(f"format spec {text!r}: expected key=value pairs separated by commas")
        k, v = (s.strip() for s in part.split("=", 1))
        if k not in _KEYS:
            raise FormatError(f"format spec {text!r}: unknown key {k!r}; keys are "
                              f"{', '.join(sorted(_KEYS))}")
        fields[k] = v
    return named_if_catalog(from_mapping(fields, text))


def from_mapping(fields: dict, where: str, name: str | None = None) -> BinaryFormat:
    """A format from a mapping of field names to values (strings or typed, as in TOML)."""
    missing = {"exp_bits", "man_bits"} - fields.keys()
    if missing:
        raise FormatError(f"format {where!r}: missing {', '.join(sorted(missing))}")
    unknown = fields.keys() - _KEYS
    if unknown:
        raise FormatError(f"format {where!r}: unknown key {sorted(unknown)[0]!r}; keys are "
                          f"{', '.join(sorted(_KEYS))}")
    kw = {}
    for k, v in fields.items():
        if k in ("exp_bits", "man_bits", "bias"):
            kw[k] = _integer(v, k, where)
        elif k in ("saturate", "flush_subnormals"):
            kw[k] = _boolean(v, k, where)
        else:
            if v not in ENCODINGS:
                raise FormatError(f"format {where!r}: encoding must be one of "
                                  f"{', '.join(ENCODINGS)} (got {v!r})")
            kw[k] = v
    try:
        return BinaryFormat(name=name, **kw)
    except FormatError as exc:
        raise FormatError(f"format {where!r}: {str(exc).removeprefix('format: ')}") from None


def _integer(v, key, where):
    if isinstance(v, bool):
        raise FormatError(f"format {where!r}: {key} must be an integer (got {v!r})")
    if isinstance(v, int):
        return v
    try:
        return int(str(v))
    except ValueError:
        raise FormatError(f"format {where!r}: {key} must be an integer (got {v!r})") from None


def _boolean(v, key, where):
    if isinstance(v, bool):
        return v
    text = str(v).lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise FormatError(f"format {where!r}: {key} must be true or false (got {v!r})")


def load_formats_file(path) -> dict:
    """User formats from a TOML file: ``user_formats`` of its document, read here with
    messages of its own (formats is the lowest layer: it uses no reader above it).  The
    command line reads the file with its own TOML reader and calls ``user_formats``."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise FormatError(f"cannot read formats file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(f"formats file {path} is not valid TOML "
                          f"({' '.join(str(exc).split())})") from None
    except UnicodeDecodeError as exc:           # tomllib decodes before it parses
        raise FormatError(f"formats file {path} is not valid TOML (not UTF-8 text at byte "
                          f"{exc.start})") from None
    return user_formats(data, path)


def user_formats(data: dict, path) -> dict:
    """User formats from the document ``data`` of the TOML file ``path``: element formats
    (BinaryFormat), one table per format under ``[formats]``, and scaled formats
    (ScaledFormat, formats/scaled.py) under ``[scaled]``; at least one table in all.

        [formats.e3m4_sat]
        exp_bits = 3
        man_bits = 4
        encoding = "ieee"      # optional: ieee, fn, fnuz, finite
        bias = 3               # optional
        saturate = true        # optional

        [scaled.mx_e3m4]       # from scratch: element, block and scale are required
        element = "e3m4_sat"   # a format name or spec (this file's too), or "int8"
        block = 32             # or [128, 128] (tiles of two axes), or "tensor" (one scale)
        scale = "e8m0"         # "e8m0" or a format name (its positive values are used)
        rule = "floor"         # optional: floor (default), ceil, rceil, even
        tensor_scale = "binary32"   # optional second-level scale (as NVFP4)
        rounding = "nearest_even"   # optional: or "stochastic"
        saturate = true        # optional: elements saturate (false: the format's overflow)
        pow2 = false           # optional: scales only powers of two
        amax = "current"       # optional: "delayed" (per-tensor schemes: quantize(history=))
        margin = 0             # optional: a = amax * 2**margin
        scale_saturate = false # optional: an overflowing scale saturates instead of NaN

        [scaled.nvfp4_rceil]   # or from a catalog scheme, keys overriding it
        base = "nvfp4"
        rule = "rceil"
    """
    table = data.get("formats", {})
    scaled = data.get("scaled", {})
    if not isinstance(table, dict) or not isinstance(scaled, dict) or not (table or scaled):
        raise FormatError(f"formats file {path}: expected tables [formats.NAME] with "
                          f"exp_bits and man_bits, or [scaled.NAME]")
    out: dict[str, BinaryFormat | ScaledFormat] = {}
    for name, fields in table.items():
        if not isinstance(fields, dict):
            raise FormatError(f"formats file {path}: [formats.{name}] must be a table")
        if name.lower() in CATALOG or name.lower() in ALIASES or name.lower() in SCALED:
            raise FormatError(f"formats file {path}: {name!r} is already a catalog name")
        out[name] = from_mapping(fields, name, name=name)
    for name, fields in scaled.items():
        if not isinstance(fields, dict):
            raise FormatError(f"formats file {path}: [scaled.{name}] must be a table")
        if name in out or name.lower() in CATALOG or name.lower() in ALIASES \
                or name.lower() in SCALED or ":" in name:
            raise FormatError(f"formats file {path}: {name!r} is already a format name "
                              f"(or has a ':')")
        out[name] = scaled_from_mapping(fields, name, out, path, get)
    return out
