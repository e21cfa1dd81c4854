"""Rules compute with the backend only (STYLE rule 2): inside the rule pieces of every
declaration in routes/families (forward, backward, jvp, validate, and the helpers' f, d, dx,
dy), and every module-level function they call, no ``np.``/``math.`` arithmetic and no
``float()``/``int()`` of values.  numpy's shape and data-movement functions are allowed.
The source is parsed, never imported."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULE_KEYS = {"forward", "backward", "jvp", "validate", "f", "d", "dx", "dy"}
DECLARERS = {"define", "unary_elementwise", "binary_elementwise"}
NUMERIC_MODULES = {"np", "numpy", "math"}
DATA_MOVEMENT = {"shape", "ndim", "size", "reshape", "transpose", "swapaxes", "moveaxis",
                 "broadcast_to", "broadcast_arrays", "concatenate", "stack", "take",
                 "take_along_axis", "expand_dims", "squeeze", "flip", "pad", "asarray",
                 "empty", "zeros", "ones", "full", "arange", "indices", "prod", "ravel",
                 "logical_and", "logical_or", "logical_not"}
CASTS = {"float", "int", "complex"}


def _rule_nodes(tree):
    """The rule expressions of the module's declarations and the module-level functions
    they reach (by name)."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    todo = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in DECLARERS:
            todo += [k.value for k in node.keywords if k.arg in RULE_KEYS]
        if isinstance(node, ast.FunctionDef) and node.name in RULE_KEYS:
            todo.append(node)                         # helpers' inner forward/backward/jvp
    seen, out = set(), []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in functions:
                todo.append(functions[sub.id])
    return out


def violations(source: str, where: str) -> list[str]:
    found = []
    for node in _rule_nodes(ast.parse(source)):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and \
                    sub.value.id in NUMERIC_MODULES and sub.attr not in DATA_MOVEMENT:
                found.append(f"{where}:{sub.lineno}: {sub.value.id}.{sub.attr} in a rule")
            if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) in CASTS:
                found.append(f"{where}:{sub.lineno}: {sub.func.id}() in a rule")
    return sorted(set(found))


MODULES = sorted((ROOT / "routes" / "families").glob("*.py")) + [ROOT / "routes" / "helpers.py"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_rules_use_backend_primitives_only(path):
    assert not violations(path.read_text(encoding="utf-8"), path.name)


def test_the_walk_reaches_the_worked_examples():
    source = (ROOT / "routes" / "families" / "extrema.py").read_text(encoding="utf-8")
    reached = {getattr(n, "name", None) for n in _rule_nodes(ast.parse(source))}
    assert {"_share", "_inside", "_clamp_validate"} <= reached
    assert "_ties" not in reached and "_max_f64" not in reached    # samplers, numpy oracles


SYNTHETIC = '''
import math
import numpy as np

def _helper(xp, x):
    return xp.multiply(x, np.exp(x))             # line 6: np.exp inside a rule

def _sampler(rng, fmt, op):
    return np.exp(rng.random(3))                  # a sampler: fine

define("bad", "elementwise",
       forward=lambda xp, a, x: _helper(xp, x),
       backward=lambda xp, a, xs, ys, gs, needs: (xp.multiply(gs[0], float(2)),),  # line 13
       jvp=lambda xp, a, xs, ys, ts: xp.multiply(ts[0], math.e),                   # line 14
       samples={"ordinary": _sampler},
       float64=(np.exp, lambda x, g: g * np.exp(x)))
'''


def test_lint_detects_numeric_calls_in_rules():
    found = violations(SYNTHETIC, "synthetic")
    assert sorted(int(v.split(":")[1]) for v in found) == [6, 13, 14], found
