"""The implementations under measurement: one registry, filled by discovery.

An implementation family is one module of this package: ``emulated`` (numerics.emulated,
the format's model), ``native`` (numpy in the format's dtype), ``cuda`` (the operators' CUDA
kernels), ``torch`` (``torch`` and ``torch_compile``: PyTorch's kernels, eager and compiled,
for operators and for whole models).  Each is a subclass of base.Implementation (the seam:
what it cannot measure, the draws it evaluates, its outputs, the model whose bounds apply,
and for graphs its traces) and its module lists it in ``IMPLEMENTATIONS``.  Both
``run --implementations`` and ``model --implementations`` read this registry.

Discovery: every module of this package (``base`` and names with a leading underscore
aside) is imported on the first question and its ``IMPLEMENTATIONS`` registered; the
modules import base, never this registry, so nothing here imports them by name.  Adding an
implementation is adding its module here -- or, outside the project, a module in a
directory named in $ROUNDOFF_COVERAGE_IMPLEMENTATIONS (``os.pathsep``-separated), searched
as part of this package (imported as ``roundoff_coverage.engine.implementations.<name>``).
An optional dependency (torch, numba.cuda) is imported inside the functions that use it,
so discovery stays cheap and works without it.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil

# The variable naming directories of implementation modules beyond this package.
PATH_VARIABLE = "ROUNDOFF_COVERAGE_IMPLEMENTATIONS"
# Modules that hold no implementation: the base class.
NOT_IMPLEMENTATIONS = ("base",)
_OWN_PATH = tuple(__path__)


class ImplementationError(ValueError):
    """An implementation module that cannot be registered (one-line message): it fails to
    import, or defines a name another module defines."""


def registry() -> dict:
    """{name: implementation class} in listing order (``order``, then name)."""
    extra = tuple(p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p)
    # The package's search path is its own folder and the variable's directories (as they are
    # now): importlib then finds a plugin module as a submodule, like the project's own.
    __path__[:] = list(dict.fromkeys(_OWN_PATH + extra))
    return _discover(tuple(__path__))


@functools.lru_cache(maxsize=None)
def _discover(path: tuple) -> dict:
    importlib.invalidate_caches()          # a module written since the last listing
    found = {}
    for info in pkgutil.iter_modules(list(path)):
        if info.name in NOT_IMPLEMENTATIONS or info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{__name__}.{info.name}")
        except Exception as exc:                      # noqa: BLE001 (a plugin's own code)
            where = os.path.join(info.module_finder.path, info.name + ".py")
            raise ImplementationError(
                f"implementation module {where} failed to import: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]} (fix it, or remove its folder from "
                f"${PATH_VARIABLE})") from None
        for cls in getattr(module, "IMPLEMENTATIONS", ()):
            if cls.name in found and found[cls.name] is not cls:
                raise ImplementationError(
                    f"implementation {cls.name!r} is defined twice (in "
                    f"{found[cls.name].__module__} and {cls.__module__})")
            found[cls.name] = cls
    return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))


def names(graphs: bool = False, scaled_inputs: bool = False) -> tuple:
    """The registered names in listing order; with ``graphs``, those the model run takes;
    with ``scaled_inputs``, those that measure tasks of a scaled format."""
    return tuple(n for n, cls in registry().items()
                 if (cls.graphs or not graphs) and (cls.scaled_inputs or not scaled_inputs))


def named(name: str) -> type:
    """The implementation class called ``name`` (KeyError naming the known ones otherwise)."""
    known = registry()
    try:
        return known[name]
    except KeyError:
        raise KeyError(f"unknown implementation {name!r} (choose from "
                       f"{', '.join(known)})") from None


def of(task, o, fmt):
    """The implementation object of ``task`` (KeyError naming the known ones otherwise)."""
    return named(task.implementation)(task, o, fmt)
