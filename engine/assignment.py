"""Mixed precision: an assignment of a format to each unit of a graph (a module, or a node),
how a run computes under it, and the assignment file that ``advise --out`` writes and
``model --assignment`` reads (issue 39).

The model is the user's model in binary32 (BASE: its inputs, parameters and constants
rounded once to binary32).  A node whose unit is assigned format F computes as autocast
does: it reads its float arguments (and, in the reverse sweep, the cotangents of its
outputs, the tangents of its arguments in the forward-mode sweep) rounded to nearest even into F, computes under numerics.emulated(F, mode, policy),
and its results -- values and gradient contributions -- are F values, read as they are by
binary32 nodes (F is within binary32) and rounded again into the format of the next unit
that reads them.  Nodes assigned binary32 are the model as it is.

A unit may also be assigned a recipe on its products (``scaled_recipe@mxfp8_e4m3``,
``fp8_recipe@fp8_e4m3_tensor``: class RecipeCandidate), as engine/model_recipe.py runs a
whole model under one: its product nodes read their operands quantized with the scheme
(along their contraction axis; the cotangents their pullbacks receive with the gradient
scheme along the last axis), their other float arguments rounded into the recipe's storage
format (bfloat16), compute in binary32, and store their results (values, tangents and
gradient contributions) into the storage format, as a GEMM's epilogue converts its FP32
accumulator; its other nodes compute in the storage format as an element format would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from roundoff_coverage import formats, numerics

from .model_recipe import RecipeRun
from .samples import ModelError
from .sites import Config

BASE = "binary32"                   # the model as the user has it
ASSIGNED = "assigned"               # the format label of a model run's rows under an assignment
TOP_LEVEL = "(top level)"           # the unit of the nodes outside every module
UNIT_KINDS = ("module", "node")


class AssignmentError(ValueError):
    """A bad assignment or assignment file (one-line message)."""


@dataclass(frozen=True)
class Unit:
    """What one format is chosen for: a module (its own nodes, not its submodules') or
    one node; ``nodes`` its node indices."""

    name: str
    nodes: tuple


def units_of(g, kind: str) -> list:
    """The units of graph ``g``: per module (each node in its innermost module; the nodes
    outside every module together as TOP_LEVEL) or per node, in execution order."""
    if kind not in UNIT_KINDS:
        raise AssignmentError(f"unit kind {kind!r}: give module or node")
    if kind == "node":
        return [Unit(g.node_names[k], (k,)) for k in range(len(g.nodes))]
    groups = {}
    for k, m in enumerate(g.node_modules):
        groups.setdefault(m or TOP_LEVEL, []).append(k)
    return [Unit(m, tuple(ks)) for m, ks in groups.items()]


@dataclass(frozen=True)
class RecipeCandidate:
    """A recipe on a unit's products (module docstring): ``label`` POLICY@SCHEME,
    ``policy`` the recipe's policy name, ``scheme`` the scaled format of the operands,
    ``storage`` the recipe's storage format; ``bits``, ``precision`` and ``emax`` those of
    the forward operands' elements (the search's order: cheapest first)."""

    label: str
    policy: str
    scheme: object
    storage: object
    bits: int
    precision: int
    emax: int

    def run(self, mode, seed) -> RecipeRun:
        return RecipeRun(self.scheme, Config(self.label, mode, self.policy), seed)


def candidate(name, known=None):
    """A unit's format from its name: an element format at most as precise and as wide as
    binary32, or POLICY@SCHEME, a recipe on the unit's products (RecipeCandidate); ``known``:
    the formats of a --formats-file by name (an element format of it is named by its spec,
    e5m6, so that an assignment file reads without that file).  FormatError for an unknown
    format name, AssignmentError for another refusal."""
    if "@" not in name:
        fmt = element_format(name, known)
        return formats.get(fmt.spec) if known and name in known else fmt
    policy, _, scheme_name = name.partition("@")
    recipe = numerics.policy.recipe(policy)
    if recipe is None:
        raise AssignmentError(f"{name}: {policy!r} is not a recipe (give "
                              f"{' or '.join(sorted(numerics.policy.RECIPES))}@SCHEME)")
    scheme = formats.get(scheme_name, known=known) if known else formats.get(scheme_name)
    if not isinstance(scheme, formats.ScaledFormat):
        raise AssignmentError(f"{name}: {scheme_name} is not a scaled format (give e.g. "
                              f"{policy}@mxfp8_e4m3)")
    try:
        run = RecipeRun(scheme, Config(name, "nearest_even", policy), 0)
    except ModelError as exc:
        raise AssignmentError(f"{name}: {exc}") from None
    element = run.fwd.element
    return RecipeCandidate(f"{policy}@{scheme.label}", policy, scheme, run.storage,
                           element.bits, element.precision, element.emax)


def element_format(name, known=None):
    """The format ``name`` as a unit's format: an element format at most as precise and as
    wide as binary32 (FormatError for an unknown name, AssignmentError for another);
    ``known``: a --formats-file's formats by name."""
    fmt = formats.get(name, known=known) if known else formats.get(name)
    if isinstance(fmt, formats.ScaledFormat):
        raise AssignmentError(f"{name}: a scaled format; a unit is assigned an element "
                              f"format (binary32, bfloat16, binary16, float8_e4m3fn...) or a "
                              f"recipe on its products (scaled_recipe@{name})")
    base = formats.get(BASE)
    if fmt.precision > base.precision or fmt.emax > base.emax:
        raise AssignmentError(f"{name}: more precise or wider than {BASE}, the model's own "
                              f"format; a unit's format is at most {BASE}")
    return fmt


def hooks(g, by_node: dict, mode: str, policy: str, seed: int, backends=None) -> tuple:
    """(override, pre, post) of GraphRule.trace and GraphRule.alone computing node k in
    ``by_node[k]`` (a format or a RecipeCandidate; binary32 where absent) under a binary32
    backend (module docstring); (None, None, None) when every node is binary32.
    ``backends``: a dict reused across calls (one emulated backend per format, one
    RecipeRun per recipe)."""
    backends = {} if backends is None else backends

    def backend(fmt):
        if fmt.label not in backends:
            backends[fmt.label] = numerics.emulated(fmt, mode, policy, seed=seed)
        return backends[fmt.label]

    def recipe_run(cand):
        key = ("recipe", cand.label)
        if key not in backends:
            backends[key] = cand.run(mode, seed)
        return backends[key]
    stored, recipes, override = {}, {}, {}
    for k, f in by_node.items():
        if isinstance(f, RecipeCandidate):
            stored[k] = f.storage
            if g.nodes[k].op.product_operands:
                recipes[k] = recipe_run(f)
                override[k] = recipes[k].compute
            else:
                override[k] = backend(f.storage)
        elif f.label != BASE:
            stored[k] = f
            override[k] = backend(f)
    if not override:
        return None, None, None
    quantize = {k: r.pre(g, "assigned", 0, record=False) for k, r in recipes.items()}

    def pre(kind, k, j, v):
        fmt = stored.get(k)
        if fmt is None or kind not in ("argument", "argument_tangent", "cotangent"):
            return v
        op = g.nodes[k].op
        ports = op.outputs if kind == "cotangent" else op.inputs
        if not ports[j].scalar:
            return v
        if k in quantize and (kind == "cotangent" or op.input_names[j] in op.product_operands):
            return quantize[k](kind, k, j, v)
        return formats.round_to(np.asarray(v, dtype=np.float64), fmt)

    def post(kind, k, j, v):
        # a recipe's product computes in binary32 and stores its results in the storage
        # format (the other nodes' results are in their format already)
        if k not in recipes:
            return v
        op = g.nodes[k].op
        port = (op.inputs if kind == "contribution" else op.outputs)[j]
        if not port.scalar:
            return v
        return formats.round_to(np.asarray(v, dtype=np.float64), stored[k])
    return override, pre, (post if recipes else None)


def by_node(units, assignment: dict) -> dict:
    """{node index: format} of {unit name: format}."""
    return {k: assignment[u.name] for u in units for k in u.nodes}


def read(path, graph) -> tuple[str, dict]:
    """(unit kind, {node index: format}) of an assignment file: ``advise --out``'s JSON
    (``unit`` and ``assignment``: unit name -> format name), every unit of the graph named
    once.  AssignmentError (one line) for anything else."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise AssignmentError(f"--assignment {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise AssignmentError(f"--assignment {path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("assignment"), dict):
        raise AssignmentError(f"--assignment {path}: no 'assignment' table (give the file "
                              f"`roundoff-coverage advise --out` writes)")
    kind = doc.get("unit", "module")
    if kind not in UNIT_KINDS:
        raise AssignmentError(f"--assignment {path}: unit {kind!r} (give module or node)")
    units = units_of(graph, kind)
    names = {u.name for u in units}
    given = doc["assignment"]
    unknown = sorted(set(given) - names)
    if unknown:
        raise AssignmentError(f"--assignment {path}: the graph has no {kind} "
                              f"{unknown[0]!r} (its {kind}s: {', '.join(sorted(names))})")
    missing = sorted(names - set(given))
    if missing:
        raise AssignmentError(f"--assignment {path}: no format for the {kind} "
                              f"{missing[0]!r} (every {kind} of the graph needs one)")
    try:
        chosen = {name: candidate(str(f)) for name, f in given.items()}
    except (AssignmentError, formats.FormatError) as exc:
        raise AssignmentError(f"--assignment {path}: {exc}") from None
    return kind, by_node(units, chosen)
