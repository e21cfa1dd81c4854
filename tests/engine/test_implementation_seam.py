"""The one implementation seam (engine/implementations/): an implementation is one module
found by discovery, and one written outside the project (a directory named in
$ROUNDOFF_COVERAGE_IMPLEMENTATIONS) runs in the coverage run and in the model run with no
edit of the project.

The stand-in computes in numpy float64 (numerics.native("binary64")) and rounds once into
the format (formats.round_to).  Oracles, independent of the engine:
- exp in bfloat16: float64 exp is within a binary64 ulp of exp(x), so one rounding into
  bfloat16 lands within 0.5 bfloat16 ulp (plus 2**-45 of one for the float64 error: a
  double rounding near a tie); the same for its tangent and gradient (a product of two
  bfloat16 values with the float64 exp);
- a chain (x * a + b) * c of bfloat16 values: every float64 operation is exact there
  (products of 8-bit significands, sums of aligned ones), so the stand-in's output is the
  exact value rounded once -- its error is computed here with rationals (Fraction).
The rows' ``device`` field, which only the stand-in writes, shows they went through it.
"""

from __future__ import annotations

import ast
import json
import pathlib
import sys
import textwrap
from fractions import Fraction as F

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.engine import implementations
from roundoff_coverage.engine import model as M

from conftest import bf16_ulps, chain_graph, one_error, round_bf16, run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "engine" / "implementations"
BF16 = formats.get("bfloat16")
NAME = "float64_round"
# 0.5 ulp, and the float64 evaluation's own error seen in bfloat16 ulps (2**-53 relative of
# the result, times 2**8 to reach a bfloat16 ulp, with room for a few float64 roundings).
HALF = 0.5 + 2.0 ** -40

STAND_IN = textwrap.dedent('''
    """A stand-in implementation: numpy float64, then one rounding into the task's format."""

    import numpy as np

    from roundoff_coverage import formats, numerics
    from roundoff_coverage.engine.implementations.base import run_routes
    from roundoff_coverage.engine.implementations.base import Implementation
    from roundoff_coverage.routes.graph import INPUT, Trace

    DEVICE = "float64-then-round"


    def _rounded(ys, fmt, mode):
        return tuple(y if y is None or np.asarray(y).dtype.kind != "f" else
                     formats.round_to(np.asarray(y, np.float64), fmt, mode) for y in ys)


    class Float64Round(Implementation):
        name = "float64_round"
        graphs = True
        graph_policy = "float64"

        @classmethod
        def policy_labels(cls, policies):
            return ("float64",)

        def __init__(self, task, o, fmt):
            super().__init__(task, o, fmt)
            self.numbers = numerics.native("binary64")

        def problems(self, pending):
            return self.no_rule(pending)

        def evaluate(self, d, wanted):
            got = run_routes(self.rule_of(d), d, wanted)
            return {r: v if isinstance(v, Exception) else
                    [_rounded(ys, self.fmt, self.task.mode) for ys in v]
                    for r, v in got.items()}

        def annotate(self, route, rows):
            for row in rows:
                row["device"] = DEVICE

        @classmethod
        def graph_problem(cls, target, config):
            return None

        @classmethod
        def graph_traces(cls, target, graph, config, xs, cots, want_grad):
            fmt, rule = formats.get(config.format), graph.rule(numerics.native("binary64"))
            out = []
            for x, c in zip(xs, cots):
                tr = rule.trace([np.asarray(v, np.float64) for v in x],
                                c if want_grad else None)
                keep = Trace(values={ref: _rounded((tr.values[ref],), fmt, config.mode)[0]
                                     for ref in graph.output_refs})
                keep.cotangents = {ref: _rounded((v,), fmt, config.mode)[0]
                                   for ref, v in tr.cotangents.items() if ref.node == INPUT}
                out.append(keep)
            return out


    IMPLEMENTATIONS = (Float64Round,)
''')


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """The stand-in's module in a directory of its own, named in the registry's variable."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / f"{NAME}.py").write_text(STAND_IN)
    monkeypatch.setenv(implementations.PATH_VARIABLE, str(plugins))
    yield NAME
    sys.modules.pop(f"{implementations.__name__}.{NAME}", None)


def test_the_registry_lists_the_projects_implementations_in_order():
    assert implementations.names() == ("emulated", "native", "cuda", "torch", "torch_compile")
    assert implementations.names(graphs=True) == ("emulated", "torch", "torch_compile")
    assert implementations.names(scaled_inputs=True) == ("emulated", "native")
    with pytest.raises(KeyError, match="unknown implementation 'nope' .choose from emulated, "
                                       "native, cuda, torch, torch_compile"):
        implementations.named("nope")


def test_a_module_in_the_plugin_directory_registers_without_a_project_edit(stand_in):
    assert implementations.names()[-1] == stand_in
    assert stand_in in implementations.names(graphs=True)
    assert implementations.named(stand_in).__module__ == \
        f"{implementations.__name__}.{stand_in}"


def test_without_the_variable_the_stand_in_is_unknown(stand_in, monkeypatch):
    assert stand_in in implementations.names()
    monkeypatch.delenv(implementations.PATH_VARIABLE)
    assert stand_in not in implementations.names()


def test_the_stand_in_measures_exp_within_half_an_ulp_in_the_coverage_run(
        stand_in, tmp_path, capsys):
    out = tmp_path / "run.json"
    status, _, err = run_cli(capsys, "run", "--ops", "exp", "--formats", "bfloat16",
                             "--implementations", f"{stand_in},emulated", "--samples", "2",
                             "--jobs", "1", "--quiet", "--out", out)
    assert status == 0, err
    rows = [r for r in json.loads(out.read_text())["rows"] if r["implementation"] == stand_in]
    assert {r["route"] for r in rows} == {"forward", "tangent", "gradient"}
    assert {r["policy"] for r in rows} == {"float64"}
    assert {r["device"] for r in rows} == {"float64-then-round"}
    measured = [r for r in rows if r["status"] == "ok"]
    assert {r["route"] for r in measured} == {"forward", "tangent", "gradient"}
    assert all(r["samples"] > 0 and r["max_ulp"] <= HALF for r in measured), \
        [(r["route"], r["max_ulp"]) for r in measured]
    # It rounds: somewhere the error is a sizeable fraction of an ulp, not 0.
    assert max(r["max_ulp"] for r in measured) > 0.25


def test_a_cuda_like_refusal_names_the_implementation_on_one_line(stand_in, tmp_path, capsys,
                                                                    monkeypatch):
    cls = implementations.named(stand_in)
    monkeypatch.setattr(cls, "unavailable", classmethod(lambda c: "no such device here"))
    status, _, err = run_cli(capsys, "run", "--ops", "exp", "--implementations", stand_in,
                             "--out", tmp_path / "r.json", "--quiet")
    assert status == 2
    one_error(err, f"--implementations {stand_in}: no such device here")


def test_a_plugin_that_fails_to_import_is_one_line(tmp_path, capsys, monkeypatch):
    plugins = tmp_path / "broken"
    plugins.mkdir()
    (plugins / "broken_impl.py").write_text("raise RuntimeError('half written')\n")
    monkeypatch.setenv(implementations.PATH_VARIABLE, str(plugins))
    status, _, err = run_cli(capsys, "run", "--ops", "exp", "--out", tmp_path / "r.json",
                             "--quiet")
    assert status == 2
    one_error(err, "broken_impl.py failed to import: RuntimeError: half written",
              implementations.PATH_VARIABLE)


def test_the_stand_in_runs_a_graph_in_the_model_run_as_rationals_say(stand_in):
    g = chain_graph()
    rng = np.random.default_rng(5)
    xs = [[formats.round_to(rng.uniform(0.5, 2.0, 6), BF16) for _ in range(4)]]
    rows, _, _ = M.measure(g, M.Config("bfloat16", "nearest_even", "strict"), xs, 0,
                           ("forward", "gradient"), others=(stand_in,), target="g.py:make")
    mine = [r for r in rows if r["implementation"] == stand_in]
    assert {r["policy"] for r in mine} == {"float64"}
    whole = next(r for r in mine if r["node"] == "output:out0" and r["route"] == "forward")
    x, a, b, c = ([F(float(v)) for v in arr] for arr in xs[0])
    exact = [(p * q + r) * s for p, q, r, s in zip(x, a, b, c)]
    want = max(bf16_ulps(round_bf16(e), e) for e in exact)
    assert whole["status"] == "ok" and whole["max_ulp"] == pytest.approx(want, 1e-9)
    grads = [r for r in mine if r["route"] == "gradient"]
    assert {r["node"] for r in grads} == {"input:x", "input:a", "input:b", "input:c"}
    assert all(r["status"] == "ok" and r["max_ulp"] <= 0.5 for r in grads)
    # Only the model's outputs and input gradients: no node values (node_values is False).
    assert all(r["node_index"] is None for r in mine)


GRAPH_FACTORY = textwrap.dedent("""
    import numpy as np

    from roundoff_coverage import routes
    from roundoff_coverage.routes.ports import value
    
    def make():
        g = routes.Graph(x=value((4,)), a=value((4,)))
        g.output(g.apply(routes.op("mul", shape=(4,)), g.input("x"), g.input("a"),
                         name="mul"))
        g.example_inputs = (np.linspace(0.5, 2.0, 4), np.linspace(-3.0, 3.0, 4))
        return g
""")


def test_the_model_command_takes_the_stand_in_by_name(stand_in, tmp_path, capsys,
                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.py").write_text(GRAPH_FACTORY)
    status, _, err = run_cli(capsys, "model", "g.py:make", "--formats", "bfloat16",
                             "--routes", "forward", "--implementations", f"emulated,{stand_in}",
                             "--samples", "2", "--jobs", "1", "--quiet", "--out", "r.json")
    assert status == 0, err
    rows = [r for r in json.loads((tmp_path / "r.json").read_text())["rows"]
            if r["implementation"] == stand_in]
    whole = next(r for r in rows if r["node"] == "output:out0")
    # One product of two bfloat16 values, exact in float64, rounded once.
    assert whole["status"] == "ok" and whole["samples"] > 0 and whole["max_ulp"] <= 0.5


# ----- the package's shape ---------------------------------------------------------------------

def _imports(path: pathlib.Path) -> set:
    """The modules of engine/implementations/ that ``path`` imports (inside functions too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out |= {node.module} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.startswith("roundoff_coverage.engine.implementations"):
            rest = node.module.split(".")[3:]
            out |= {rest[0]} if rest else {a.name for a in node.names}
    return out


def test_no_module_of_the_package_imports_the_registry_or_a_sibling_but_base():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    for path in PACKAGE.glob("*.py"):
        got = _imports(path) & (modules | {"__init__"})
        if path.stem == "__init__":
            assert got == set(), f"the registry imports {got} by name"
        elif path.stem != "base":
            assert got <= {"base"}, f"{path.name} imports {got}"
    assert _imports(PACKAGE / "base.py") & modules == set()


OPTIONAL = ("torch", "numba", "jax")


def test_optional_dependencies_are_imported_inside_functions_only():
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:                     # module level only
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad = [n for n in names if n.split(".")[0] in OPTIONAL or
                   n in ("roundoff_coverage.kernels",)]
            bad += [a.name for a in getattr(node, "names", ())
                    if isinstance(node, ast.ImportFrom) and node.module == "roundoff_coverage"
                    and a.name == "kernels"]
            assert not bad, f"{path.name}:{node.lineno} imports {bad} at module level"
