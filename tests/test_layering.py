"""Imports point one way: formats <- numerics <- routes <- kernels <- engine <- reports.

Every .py file of the five packages (subpackages of roundoff_coverage) is parsed, never
imported, and each of its imports, relative ones resolved, is reduced to the layer it names.
A package may import the packages before it in ``LAYERS`` and itself, nothing after it
(shared/ARCHITECTURE.md), and always under the prefix: a bare ``import formats`` would find
whatever package of that name comes first on sys.path.
Imports inside functions and ``importlib.import_module("...")`` with a literal name count too.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "roundoff_coverage"
LAYERS = ("formats", "numerics", "routes", "kernels", "engine", "reports")
TOP_LEVEL = "<top-level>"      # a bare "import formats": someone else's package of that name
BEYOND = "<beyond top>"


def _layers_of(dotted: list[str], names: list[str]):
    """The layers an absolute import of ``dotted`` (importing ``names`` from it, if a from-
    import) reaches: roundoff_coverage.X... is X; "from roundoff_coverage import X, Y" is
    X and Y; a bare layer name is TOP_LEVEL; anything else is its own top name."""
    if dotted[0] == PACKAGE:
        if len(dotted) > 1:
            return [dotted[1]]
        return [n for n in names if n in LAYERS] or [PACKAGE]
    return [TOP_LEVEL if dotted[0] in LAYERS else dotted[0]]


def imported_tops(source: str, module: tuple[str, ...], is_package: bool = False):
    """(line, layer or top-level name) of every import in ``source``, the code of ``module``
    (its dotted name below roundoff_coverage as a tuple, e.g. ("formats", "codec"));
    ``is_package`` for an ``__init__.py``.  Relative imports are resolved against
    roundoff_coverage; one that climbs above it yields BEYOND."""
    package = (PACKAGE,) + (module if is_package else module[:-1])
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                for top in _layers_of(alias.name.split("."), []):
                    yield node.lineno, top
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level == 0:
                dotted = node.module.split(".")
            else:
                # "from ..x import y" in package a.b: level 1 is a.b, level 2 is a.
                keep = len(package) - (node.level - 1)
                if keep < 1:
                    yield node.lineno, BEYOND
                    continue
                dotted = list(package[:keep]) + (node.module.split(".") if node.module else [])
            for top in _layers_of(dotted, names):
                yield node.lineno, top
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                    and not arg.value.startswith("."):
                for top in _layers_of(arg.value.split("."), []):
                    yield node.lineno, top


def _is_dynamic_import(func) -> bool:
    return (isinstance(func, ast.Name) and func.id in ("__import__", "import_module")) or \
        (isinstance(func, ast.Attribute) and func.attr == "import_module")


def violations(source: str, module: tuple[str, ...], is_package: bool = False) -> list[str]:
    """'module:line ...' for each import of a later layer, of a bare layer name (which finds
    whatever package of that name comes first on sys.path), or above roundoff_coverage."""
    later = LAYERS[LAYERS.index(module[0]) + 1:]
    where = ".".join(module)
    found = []
    for line, top in imported_tops(source, module, is_package):
        if top == BEYOND:
            found.append(f"{where}:{line}: relative import climbs above {PACKAGE}")
        elif top == TOP_LEVEL:
            found.append(f"{where}:{line}: imports a top-level layer name; import it as "
                         f"{PACKAGE}.<layer>")
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
    tops = {top for _, top in imported_tops(modules[("reports", "cli", "run")].read_text(),
                                            ("reports", "cli", "run"))}
    assert {"formats", "routes", "reports"} <= tops


SYNTHETIC = '''
import numpy as np
from . import codec                      # formats.sub.codec: fine
from .. import routes                    # formats.routes (a submodule of formats): fine
import roundoff_coverage.reports.cli     # line 5: violation
from roundoff_coverage.numerics.emulated import emulated   # line 6: violation
from roundoff_coverage import formats, kernels             # line 7: violation (kernels)


def lazy():
    from ....kernels import cpu          # line 11: roundoff_coverage.kernels: violation
    importlib.import_module("roundoff_coverage.routes.table")   # line 12: violation
    import numerics                      # line 13: a bare layer name
    from .....x import y                 # line 14: above roundoff_coverage
'''


def test_checker_detects_violations_in_synthetic_source():
    found = violations(SYNTHETIC, ("formats", "sub", "mod"))
    lines = sorted(int(v.split(":")[1]) for v in found)
    assert lines == [5, 6, 7, 11, 12, 13, 14], found
    assert any("imports reports" in v for v in found)
    assert any(":13: imports a top-level layer name" in v for v in found)


@pytest.mark.parametrize("source,module,is_package,expected", [
    ("from . import codec", ("formats", "fast"), False, ["formats"]),
    ("from .catalog import get", ("formats",), True, ["formats"]),
    ("from ..formats import get", ("numerics", "emulated"), False, ["formats"]),
    ("from ..formats import get", ("numerics", "sub", "x"), False, ["numerics"]),
    ("from ...formats import get", ("numerics", "sub", "x"), False, ["formats"]),
    ("from .... import x", ("numerics", "sub", "x"), False, [BEYOND]),
    ("import roundoff_coverage.formats.codec as c", ("reports", "cli"), False, ["formats"]),
    ("from roundoff_coverage import numerics, routes", ("reports", "cli"), False,
     ["numerics", "routes"]),
    ("import formats", ("reports", "cli"), False, [TOP_LEVEL]),
])
def test_relative_imports_resolve_to_the_layer(source, module, is_package, expected):
    assert [top for _, top in imported_tops(source, module, is_package)] == expected


@pytest.mark.parametrize("importer,imported,allowed", [
    ("numerics", "formats", True), ("routes", "numerics", True), ("reports", "kernels", True),
    ("formats", "numerics", False), ("numerics", "routes", False), ("routes", "kernels", False),
    ("kernels", "reports", False), ("formats", "reports", False),
])
def test_layer_order(importer, imported, allowed):
    found = violations(f"from roundoff_coverage import {imported}\n", (importer, "m"))
    assert (found == []) == allowed


def private_imports(source: str, where: str) -> list[str]:
    """Every ``from <a module of the project> import _name`` in ``source`` (inside functions
    too): a private name belongs to its module; another module that needs it needs a public
    name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        ours = node.level > 0 or (node.module or "").split(".")[0] == PACKAGE
        for alias in node.names if ours else ():
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{where}:{node.lineno}: imports the private {alias.name} from "
                             f"{'.' * node.level}{node.module or ''}")
    return found


def test_no_private_name_is_imported_across_modules():
    found = []
    for path, _, _ in package_modules():
        found += private_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_the_private_import_check_sees_one():
    assert private_imports("from .eft import ADD, _odd_bits\n", "m.py") == \
        ["m.py:1: imports the private _odd_bits from .eft"]
    assert private_imports("from torch.utils import _pytree\n", "m.py") == []


def test_no_lower_layer_names_a_reports_module():
    # A lower layer documents what it offers, not who uses it: a docstring naming
    # engine/model.py goes stale when that module moves, and invites the import that layering
    # forbids.
    import re
    found = []
    for path, module, _ in package_modules():
        if module[0] == "reports":
            continue
        # The engine may name its own modules; nothing below reports names a reports module.
        above = "reports" if module[0] == "engine" else "(?:reports|engine)"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(rf"\b{above}/\w+\.py|\b{above}\.\w+\.\w", line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "lower layers naming reports modules:\n" + "\n".join(found)
