"""Imports point one way: formats <- numerics <- routes <- kernels <- reports.

Every .py file of the five packages is parsed (never imported) and each of its imports,
relative ones resolved, is reduced to the top package it names.  A package may import the
packages before it in ``LAYERS`` and itself, nothing after it (shared/ARCHITECTURE.md).
Imports inside functions and ``importlib.import_module("...")`` with a literal name count too.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("formats", "numerics", "routes", "kernels", "reports")


def imported_tops(source: str, module: tuple[str, ...], is_package: bool = False):
    """(line, top-level name) of every import in ``source``, the code of ``module`` (its dotted
    name as a tuple, e.g. ("formats", "codec")); ``is_package`` for an ``__init__.py``.
    A relative import that climbs above the top package yields the name "<beyond top>"."""
    package = module if is_package else module[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                yield node.lineno, node.module.split(".")[0]
                continue
            # "from ..x import y" in package a.b: level 1 is a.b, level 2 is a, level 3 is
            # above a.  Below the top it always names a module of the same top package.
            climbs = node.level - 1
            yield node.lineno, package[0] if climbs < len(package) else "<beyond top>"
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                    and not arg.value.startswith("."):
                yield node.lineno, arg.value.split(".")[0]


def _is_dynamic_import(func) -> bool:
    return (isinstance(func, ast.Name) and func.id in ("__import__", "import_module")) or \
        (isinstance(func, ast.Attribute) and func.attr == "import_module")


def violations(source: str, module: tuple[str, ...], is_package: bool = False) -> list[str]:
    """'module:line imports X' for each import of a later layer (or above the top)."""
    later = LAYERS[LAYERS.index(module[0]) + 1:]
    where = ".".join(module)
    found = []
    for line, top in imported_tops(source, module, is_package):
        if top == "<beyond top>":
            found.append(f"{where}:{line}: relative import climbs above the {module[0]} package")
        elif top in later:
            found.append(f"{where}:{line}: imports {top}; {module[0]} must not import "
                         f"{', '.join(later)}")
    return found


def package_modules():
    """(path, dotted module tuple, is_package) of every .py file of the five packages."""
    for top in LAYERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                yield path, parts[:-1], True
            else:
                yield path, parts, False


def test_packages_import_only_earlier_layers():
    found, checked = [], set()
    for path, module, is_package in package_modules():
        found += violations(path.read_text(encoding="utf-8"), module, is_package)
        checked.add(module[0])
    assert checked == set(LAYERS), f"missing packages: {set(LAYERS) - checked}"
    assert not found, "layering violations:\n" + "\n".join(found)


def test_walk_sees_the_formats_modules():
    # Guard against a vacuous pass: the walk must reach real modules with real imports.
    modules = {module: path for path, module, _ in package_modules()}
    assert ("formats", "codec") in modules
    tops = {top for _, top in imported_tops(modules[("formats", "codec")].read_text(),
                                            ("formats", "codec"))}
    assert {"numpy", "formats"} <= tops                # "from .catalog import get" is formats


SYNTHETIC = '''
import numpy as np
from . import codec                      # formats.sub.codec: fine
from .. import routes                    # formats.routes (a submodule of formats): fine
import reports.cli                       # line 5: violation
from numerics.emulated import emulated   # line 6: violation


def lazy():
    from ...kernels import cpu           # line 10: above the top package
    importlib.import_module("routes.table")   # line 11: violation
'''


def test_checker_detects_violations_in_synthetic_source():
    found = violations(SYNTHETIC, ("formats", "sub", "mod"))
    lines = sorted(int(v.split(":")[1]) for v in found)
    assert lines == [5, 6, 10, 11], found
    assert any("imports reports" in v for v in found)


@pytest.mark.parametrize("source,module,is_package,expected", [
    ("from . import codec", ("formats", "fast"), False, "formats"),
    ("from .catalog import get", ("formats",), True, "formats"),
    ("from ..formats import get", ("numerics", "emulated"), False, "<beyond top>"),
    ("from ..formats import get", ("numerics", "sub", "x"), False, "numerics"),
    ("from ...formats import get", ("numerics", "sub", "x"), False, "<beyond top>"),
    ("import formats.codec as c", ("reports", "cli"), False, "formats"),
])
def test_relative_imports_resolve_to_the_top_package(source, module, is_package, expected):
    assert [top for _, top in imported_tops(source, module, is_package)] == [expected]


@pytest.mark.parametrize("importer,imported,allowed", [
    ("numerics", "formats", True), ("routes", "numerics", True), ("reports", "kernels", True),
    ("formats", "numerics", False), ("numerics", "routes", False), ("routes", "kernels", False),
    ("kernels", "reports", False), ("formats", "reports", False),
])
def test_layer_order(importer, imported, allowed):
    found = violations(f"import {imported}\n", (importer, "m"))
    assert (found == []) == allowed
