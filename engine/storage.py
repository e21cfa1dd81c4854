"""How a model run stores its values, as hooks of the graph interpreter: each storage kind
gives, for one run of a sample, the ``(override, pre, post)`` of routes.graph.GraphRule's
``trace`` and ``alone`` (override: {node: backend} computing a node elsewhere; pre: what a
node reads -- its arguments, their tangents, its outputs' cotangents; post: what it
stores -- its outputs, their tangents, its gradient contributions).

- Element: an element format; the backend of the run computes and stores every node, no
  hooks.
- engine/model_scaled.Scaled: a scaled format; every node computes in binary32 and its
  outputs are stored quantized (post).
- engine/model_recipe.RecipeRun: a recipe policy on a scaled format; the products' operands
  are quantized (pre) and the products compute in binary32 (override), their results
  stored in the storage format.
- Assigned: the precision advisor's answer; each node computes in its unit's format
  (engine/assignment.hooks).

``hooks(g, run, s, keep=(), wide=None, record=True)``: ``run`` names the run
("emulated", "local") that a storage counting its quantizations (``record``) files them
under, ``s`` the sample; ``keep``: the nodes of a keep-in-higher-precision experiment
(engine/model.py), computed by ``wide`` and left unquantized."""

from __future__ import annotations

from . import assignment


class Element:
    """An element format: no hooks; the kept nodes compute in ``wide``."""

    def hooks(self, g, run, s, keep=(), wide=None, record=True) -> tuple:
        return (dict.fromkeys(keep, wide) if keep else None), None, None


class Assigned:
    """A format per node ({node index: format or assignment.RecipeCandidate}): the hooks of
    assignment.hooks, the same for every run and sample; no keep experiment."""

    def __init__(self, g, by_node: dict, mode: str, policy: str, seed: int):
        self._hooks = assignment.hooks(g, by_node, mode, policy, seed)

    def hooks(self, g, run, s, keep=(), wide=None, record=True) -> tuple:
        if keep:
            raise ValueError("an assigned run has no keep experiment")
        return self._hooks


ELEMENT = Element()
