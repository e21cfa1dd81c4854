"""No import cycle between files, and few imports inside functions.

The graph: one node per .py file of the packages (test_layering.package_modules), an edge
for every import of a project module, at module level or inside a function, relative ones
resolved.  ``from package import name`` reaches the submodule ``package.name`` when there is
one, else the package's __init__.py.  A strongly connected component of more than one file
is a cycle: those files can only be imported in some orders, and each needs the others to
be understood.  Imports inside functions hide such cycles; they are allowed for an optional
dependency (torch, jax, numba's CUDA, dask) or for start-up time, with a comment saying
which on the line or the line before, and at most MAX_INSIDE of them.
"""

from __future__ import annotations

import ast

from test_layering import PACKAGE, package_modules

MAX_INSIDE = 20
REASONS = ("optional", "start-up")


def _graph():
    """({module: set of modules it imports}, [(module, line, target, inside a function)])."""
    files = {module: (path, is_package) for path, module, is_package in package_modules()}

    def resolve(dotted):
        for k in range(len(dotted), 0, -1):
            if tuple(dotted[:k]) in files:
                return tuple(dotted[:k])
        return None

    edges, imports = {m: set() for m in files}, []
    for module, (path, is_package) in files.items():
        package = module if is_package else module[:-1]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, inside in _imports(tree):
            for target in _targets(node, package):
                r = resolve(target)
                if r is not None and r != module:
                    edges[module].add(r)
                    imports.append((module, node.lineno, r, inside))
    return edges, imports


def _imports(tree, inside=False):
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, inside
        yield from _imports(child, inside or isinstance(
            child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def _targets(node, package):
    """The dotted names (below roundoff_coverage) an import may reach."""
    if isinstance(node, ast.Import):
        return [a.name.split(".")[1:] for a in node.names if a.name.split(".")[0] == PACKAGE]
    if node.level == 0:
        parts = (node.module or "").split(".")
        if parts[0] != PACKAGE:
            return []
        base = parts[1:]
    else:
        base = list(package[:len(package) - (node.level - 1)]) + \
            (node.module.split(".") if node.module else [])
    return [base + [a.name] for a in node.names]


def cycles(edges) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm,
    iterative), each as sorted dotted names."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(".".join(w))
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycle_between_files():
    edges, _ = _graph()
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_inside_functions_are_few_and_say_why():
    _, imports = _graph()
    inside = [(m, line) for m, line, _, ins in imports if ins]
    lines = {}
    unexplained = []
    for module, line in sorted(set(inside)):
        path = next(p for p, mod, _ in package_modules() if mod == module)
        text = lines.setdefault(path, path.read_text(encoding="utf-8").splitlines())
        said = text[line - 1] + (text[line - 2] if line > 1 else "")
        if "#" not in said or not any(r in said for r in REASONS):
            unexplained.append(f"{path.name}:{line}: {text[line - 1].strip()}")
    assert not unexplained, ("imports inside functions without a comment naming an optional "
                             "dependency or start-up time:\n" + "\n".join(unexplained))
    assert len(set(inside)) <= MAX_INSIDE, f"{len(set(inside))} imports inside functions"


def test_the_cycle_finder_finds_a_cycle_and_nothing_else():
    a, b, c, d = ("a",), ("b",), ("c",), ("d",)
    assert cycles({a: {b}, b: {c}, c: {a}, d: {a}}) == [["a", "b", "c"]]
    assert cycles({a: {b}, b: set(), c: {b}, d: set()}) == []


def test_imports_inside_functions_are_told_apart():
    tree = ast.parse("import numpy\nfrom . import a\n\n\ndef f():\n    from .b import c\n"
                     "    g = lambda: __import__('x')\n\n\nclass K:\n    from . import d\n")
    seen = [(n.lineno, inside) for n, inside in _imports(tree)]
    assert seen == [(1, False), (2, False), (6, True), (11, False)]
    assert [_targets(n, ("formats",)) for n, _ in _imports(tree)] == \
        [[], [["formats", "a"]], [["formats", "b", "c"]], [["formats", "d"]]]
