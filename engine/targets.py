"""The targets of ``roundoff-coverage measure``: what a target string means and how it is
called (engine/measure.py measures it).

``target(spec, fmt) -> Target``: a numpy ufunc (``numpy.exp``), a C function in a shared
library (``libm:expf``, ``/path/libfoo.so:f``), an importable callable
(``package.module:function`` or ``path/file.py:function``, numba-compiled or plain Python;
``importable``, which engine/quantizers.py shares), a torch operator
(``torch.exp``) when torch is installed, or a Python callable given directly.  A Target's
``call(xs)`` takes float64 arrays of values of the format, one per argument, and returns the
outputs as float64; its ``reference`` is the numerics.screen function it is compared with
(``reference_name``: from the target's name, numpy's and C's spellings included).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import importlib.abc
import os
import re
import sys
from dataclasses import dataclass, field

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.numerics import screen
from roundoff_coverage.numerics.native import resolve as native_dtype

from . import executors

# The torch dtype (its name in the torch module) of each catalog format torch computes in,
# for torch targets here and the torch implementation (engine/implementations/torch.py);
# the float8 formats only as the result of a conversion (torch has no arithmetic in them).
DTYPES = {"bfloat16": "bfloat16", "binary16": "float16", "binary32": "float32",
          "binary64": "float64"}
FLOAT8 = {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
          "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz"}

# numpy spellings of the reference functions.
ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
           "arccosh": "acosh", "arctanh": "atanh", "arctan2": "atan2", "power": "pow",
           "true_divide": "divide", "float_power": "pow"}
C_BINARY = ("pow", "atan2", "hypot")
_FNS = {}                                # compiled loops of C functions, by target spec


class MeasureError(ValueError):
    """A target, format or option measure cannot use (one-line message)."""


@dataclass
class Target:
    """A function to measure: ``call(xs) -> outputs`` on float64 arrays of values of the
    format (one per argument), outputs as float64; ``reference`` a numerics.screen name."""

    spec: str
    arity: int
    reference: str
    call: object = field(repr=False)


def reference_name(name: str, fmt=None) -> str | None:
    """The reference function a target's name means: ``exp``, numpy's ``arcsin``, C's
    ``expf`` / ``expl``; None when there is none."""
    name = ALIASES.get(name, name)
    if name in screen.REFERENCES:
        return name
    if name[-1:] in ("f", "l") and ALIASES.get(name[:-1], name[:-1]) in screen.REFERENCES:
        return ALIASES.get(name[:-1], name[:-1])
    return None


def target(spec, fmt, reference: str | None = None, arity: int | None = None) -> Target:
    """The Target of ``spec`` (a string as the command line takes it, or a Python callable)
    in format ``fmt``.  MeasureError when it cannot be measured."""
    fmt = formats.get(fmt)
    if callable(spec) and not isinstance(spec, str):
        name = getattr(spec, "__name__", "callable")
        return _finish(f"python:{name}", name, _python(spec, fmt), reference, arity,
                       _arity_of(spec))
    if not isinstance(spec, str) or not spec.strip():
        raise MeasureError("a target is numpy.NAME, LIBRARY:FUNCTION, module:function or "
                           "torch.NAME")
    spec = spec.strip()
    if spec.startswith(("numpy.", "np.")):
        name = spec.split(".", 1)[1]
        fn = getattr(np, name, None)
        if not isinstance(fn, np.ufunc):
            raise MeasureError(f"{spec} is not a numpy ufunc")
        return _finish(spec, name, _ufunc(fn, fmt), reference, arity, fn.nin)
    if spec.startswith("torch."):
        return _torch(spec, fmt, reference, arity)
    if ":" in spec:
        lib, name = spec.rsplit(":", 1)
        fn = importable(spec)
        if fn is not None:
            kind = _numba(fn, fmt) if hasattr(fn, "py_func") else _python(fn, fmt)
            return _finish(spec, name, kind, reference, arity, _arity_of(fn))
        return _c_function(spec, lib, name, fmt, reference, arity)
    raise MeasureError(f"unknown target {spec!r}: use numpy.NAME, LIBRARY:FUNCTION (libm:expf),"
                       f" package.module:function or torch.NAME")


def importable(spec: str):
    """The Python callable ``spec`` names: ``package.module:function`` or
    ``path/to/file.py:function`` (``function`` may be dotted: ``module:Class.method``); None
    when the part before the colon is neither a module nor a ``.py`` file (a shared library:
    ``libm``, ``./libf.so``).  MeasureError when it names one that cannot be imported or has
    no such callable.  measure (``target``) and the quantizer measurement
    (engine/quantizers.py) resolve their targets here."""
    if ":" not in spec:
        raise MeasureError(f"{spec}: give module:function or file.py:function")
    lib, name = spec.rsplit(":", 1)
    if not name:
        raise MeasureError(f"{spec}: no function name after ':'")
    if lib.endswith(".py"):
        module = _import_file(lib)
    elif _library_path(lib):
        return None
    else:
        module = _import(lib)
        if module is None:
            return None
    fn = module
    for part in name.split("."):
        fn = getattr(fn, part, None)
    if not callable(fn):
        raise MeasureError(f"{spec}: {lib} has no callable {name}")
    return fn


# torchvision's wheels on PyPI are built against a CUDA build of torch: beside torch's CPU
# build (the one this project installs) their compiled ops (torchvision/_C.so) do not
# load, and torchvision's __init__ then fails on the fake-tensor registrations it makes
# without checking that they did (torchvision 0.28: nms, qnms) -- and with it ``import
# timm`` and ``import transformers``, which import torchvision when it is installed.  The
# two schemas, declared before such an import, let the pure-Python model classes load; no
# kernel is declared, so a detection op that needs one still fails where it is called.
_TORCHVISION_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
                        "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_DECLARED: list = []                        # the torch.library fragment, kept alive


def prepare_torchvision() -> bool:
    """Before user code imports torchvision (or timm, transformers): declare its unguarded
    schemas when its compiled ops cannot load beside this torch.  True when they were
    declared (now or before); False when nothing was needed (no torch or torchvision,
    torchvision already imported, or its ops load)."""
    import importlib.util
    # The hook's work is being done now: without it, find_spec("torchvision") below cannot
    # call back into this function (which would declare the schemas twice).
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _BeforeTorchvision)]
    if _DECLARED:
        return True
    if "torchvision" in sys.modules or importlib.util.find_spec("torch") is None:
        return False
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return False
    import torch
    folder = os.path.dirname(spec.origin)
    compiled = [f for f in os.listdir(folder) if f.startswith("_C.") and f.endswith(".so")]
    try:
        for f in compiled:
            torch.ops.load_library(os.path.join(folder, f))
        if compiled:
            return False                          # the real ops load: nothing to declare
    except OSError:
        pass
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _TORCHVISION_SCHEMAS:
        lib.define(schema)
    _DECLARED.append(lib)
    return True


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """An import hook that runs prepare_torchvision when something first imports
    torchvision, then steps aside: preparing imports torch (over a second), which user code
    that never imports torchvision should not pay, in the parent and in every worker."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            prepare_torchvision()                 # (which removes this hook first)
        return None                               # the usual finders find it


def prepare_torchvision_on_import() -> None:
    """prepare_torchvision at the first ``import torchvision`` of this process (directly
    or through timm or transformers), not before."""
    if "torchvision" not in sys.modules and \
            not any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())


def _import_file(path: str):
    """The module of the Python file ``path``, run once per process (its folder goes on
    sys.path, as for a script, so it can import its neighbours; torchvision made importable
    first: prepare_torchvision_on_import)."""
    import importlib.util
    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise MeasureError(f"{path}: no such Python file")
    key = "_roundoff_coverage_target_" + re.sub(r"\W", "_", full)
    if key in sys.modules:
        return sys.modules[key]
    folder = os.path.dirname(full)
    if not any(os.path.abspath(p or ".") == folder for p in sys.path):
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(key, full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        prepare_torchvision_on_import()
        spec.loader.exec_module(module)
    except Exception as exc:                                  # noqa: BLE001 (user code)
        del sys.modules[key]
        raise MeasureError(f"importing {path} failed: {executors.one_line(exc)}") from None
    return module


def _library_path(lib: str) -> bool:
    """Whether ``lib`` (the part of LIBRARY:FUNCTION before the colon) names a shared library
    by its path -- ``./libfoo.so``, ``/x/libfoo.so``, ``lib/libfoo.so``, ``libfoo.so.6``, an
    existing file -- which is never a module name (import_module("./x") is a TypeError)."""
    seps = tuple(s for s in (os.sep, os.altsep, "/") if s)
    return (lib.startswith((".", *seps)) or any(s in lib for s in seps)
            or re.search(r"\.(so(\.\d+)*|dylib|dll)$", lib) is not None
            or os.path.isfile(lib))


def _import(lib: str):
    """The module ``lib``, None when there is no such module (then ``lib`` is a library
    name such as ``libm``).  The working directory is searched too, as ``python -m`` does:
    the console script does not put it on sys.path.  It is put there to stay, before any
    worker pool starts, so the workers (which rebuild the target from its spec with the
    parent's sys.path) import the module too."""
    cwd = os.getcwd()
    if not any(os.path.abspath(p or ".") == cwd for p in sys.path):
        sys.path.insert(0, cwd)
    try:
        prepare_torchvision_on_import()
        return importlib.import_module(lib)
    except ModuleNotFoundError as exc:
        if exc.name is not None and not (lib == exc.name or lib.startswith(exc.name + ".")):
            raise MeasureError(f"importing {lib} failed: {executors.one_line(exc)}") from None
        return None
    except Exception as exc:                                  # noqa: BLE001 (user code)
        raise MeasureError(f"importing {lib} failed: {executors.one_line(exc)}") from None


def _finish(spec, name, call, reference, arity, natural) -> Target:
    ref = reference or reference_name(name)
    if ref is None:
        raise MeasureError(f"no reference function for {name!r}: pass --reference, one of "
                           f"{', '.join(sorted(screen.REFERENCES))}")
    if ref not in screen.REFERENCES:
        raise MeasureError(f"unknown reference {ref!r} (choose from "
                           f"{', '.join(sorted(screen.REFERENCES))})")
    n = screen.REFERENCES[ref].arity
    if arity is not None and arity != n:
        raise MeasureError(f"{spec}: reference {ref} takes {n} argument(s), not {arity}")
    if natural is not None and natural != n:
        raise MeasureError(f"{spec} takes {natural} argument(s) but {ref} takes {n}")
    return Target(spec, n, ref, call)


def _arity_of(fn):
    import inspect
    try:
        params = inspect.signature(getattr(fn, "py_func", fn)).parameters.values()
    except (TypeError, ValueError):
        return None
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               for p in params)


def _dtype(fmt):
    try:
        return native_dtype(fmt)[0]
    except ValueError:
        return None


def _ufunc(fn, fmt):
    dtype = _dtype(fmt)
    if dtype is None:
        raise MeasureError(f"numpy has no dtype for {fmt.label}: measure numpy in binary16, "
                           f"binary32, binary64 or an ml_dtypes format (bfloat16, float8_*)")

    def call(xs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*[x.astype(dtype) for x in xs])).astype(np.float64)
    return call


def _python(fn, fmt):
    """A plain callable: called once on whole arrays (the format's numpy dtype where it has
    one, float64 otherwise); its result must have the inputs' shape."""
    dtype = _dtype(fmt) or np.dtype(np.float64)

    def call(xs):
        # What it returns is checked by measure's _outputs (numbers, one per input).
        with np.errstate(all="ignore"):
            return fn(*[x.astype(dtype) for x in xs])
    return call


def _numba(fn, fmt):
    """A numba-compiled scalar function: called element by element in a compiled loop,
    with float32 or float64 scalars (float64 for other formats)."""
    import numba
    dtype = np.float32 if fmt == formats.CATALOG["binary32"] else np.float64
    key = ("numba", id(fn), dtype)
    if key not in _FNS:
        @numba.njit(nogil=True)
        def loop1(x, out):
            for i in range(x.size):
                out[i] = fn(x[i])

        @numba.njit(nogil=True)
        def loop2(x, y, out):
            for i in range(x.size):
                out[i] = fn(x[i], y[i])
        _FNS[key] = (loop1, loop2)
    loop1, loop2 = _FNS[key]

    def call(xs):
        a = [x.astype(dtype) for x in xs]
        out = np.empty(a[0].size, dtype=np.float64)
        loop1(a[0], out) if len(a) == 1 else loop2(a[0], a[1], out)
        return out
    return call


def _c_function(spec, lib, name, fmt, reference, arity):
    """A C function through ctypes, called from a numba loop (numba calls ctypes function
    pointers natively, ~100x faster than ctypes from Python).  float for binary32, double
    for binary64."""
    ctype = {"binary32": ctypes.c_float, "binary64": ctypes.c_double}.get(
        next((n for n, f in formats.CATALOG.items() if f == fmt), ""))
    if ctype is None:
        raise MeasureError(f"{spec}: C functions are measured in binary32 (float) or binary64 "
                           f"(double), not {fmt.label}")
    # An existing file is loaded by its absolute path (dlopen searches the loader's
    # directories, not the working directory, for a name without a slash); another path or
    # file name (libm.so.6) as given; a library name (libm, m) through find_library.
    if _library_path(lib):
        path = os.path.abspath(lib) if os.path.isfile(lib) else lib
    else:
        path = ctypes.util.find_library(lib[3:] if lib.startswith("lib") else lib)
    try:
        so = ctypes.CDLL(path or lib)
    except OSError as exc:
        raise MeasureError(f"cannot load library {lib!r}: {exc}") from None
    cfn = getattr(so, name, None)
    if cfn is None:
        raise MeasureError(f"library {lib} has no function {name}")
    ref = reference or reference_name(name)
    n = arity or (screen.REFERENCES[ref].arity if ref in screen.REFERENCES else
                  2 if name.rstrip("fl") in C_BINARY else 1)
    cfn.argtypes, cfn.restype = [ctype] * n, ctype
    key = (spec, ctype)
    if key not in _FNS:
        import numba

        # Arguments narrowed and results widened inside the loop (exact: values of the
        # format), so no array is converted on the way.
        cast = np.float32 if ctype is ctypes.c_float else np.float64

        @numba.njit(nogil=True)
        def loop1(x, out):
            for i in range(x.size):
                out[i] = cfn(cast(x[i]))

        @numba.njit(nogil=True)
        def loop2(x, y, out):
            for i in range(x.size):
                out[i] = cfn(cast(x[i]), cast(y[i]))
        _FNS[key] = (loop1, loop2)
    loop1, loop2 = _FNS[key]

    def call(xs):
        out = _out(xs[0].size)
        loop1(xs[0], out) if n == 1 else loop2(xs[0], xs[1], out)
        return out
    return _finish(spec, name, call, reference, arity, n)


def _torch(spec, fmt, reference, arity):
    try:
        import torch
    except ImportError:
        raise MeasureError(f"{spec}: torch is not installed (pip install torch)") from None
    fn = getattr(torch, spec.split(".", 1)[1], None)
    if not callable(fn):
        raise MeasureError(f"{spec} is not a torch function")
    name = next((n for n, f in formats.CATALOG.items() if f == fmt), "")
    tdtype = getattr(torch, DTYPES[name]) if name in DTYPES else None
    if tdtype is None:
        raise MeasureError(f"{spec}: torch has no dtype for {fmt.label}")

    def call(xs):
        ts = [torch.from_numpy(x).to(tdtype) for x in xs]     # exact: values of the format
        return fn(*ts).to(torch.float64).numpy()
    return _finish(spec, spec.split(".", 1)[1], call, reference, arity, None)


_OUT = {}                 # the output array of a C target, reused by every chunk of a process


def _out(n):
    if _OUT.get("out", np.empty(0)).size < n:
        _OUT["out"] = np.empty(n)
    return _OUT["out"][:n]
