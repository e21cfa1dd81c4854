"""``roundoff-coverage model``: a model run from its target to its results file.

The target is a graph artifact (routes.load_graph) or ``file.py:factory`` (or
``module:factory``), a function of no arguments returning ``(model, example_args)`` -- a
torch ``nn.Module`` and a tuple of tensors (or ``(model, args, kwargs)``: a transformers
model's ``labels=``), captured with routes.from_torch, or a JAX
function and its arguments, imported with routes.from_jax -- or a routes.Graph with
``example_inputs``.  A captured model is saved as an artifact first (by
default beside the results file, ``<out>.graph.json``): every unit of work reads the graph
from the artifact, and the results file names it with its sha256 (``meta.model``), so a
report can be reproduced from the artifact alone, without the model's code.

Units are configurations (format, mode, policy; engine/model.py measures one over every
sample), run on this machine's workers or a Dask cluster (engine/orchestrate.py: a unit
per worker; a local worker that dies ends the run with a message, a configuration that fails
on the cluster becomes its error row), each checkpointed as it finishes in
``<out>.partial.jsonl`` so an interrupted run resumes with ``--resume``; a long
configuration reports its phases on stderr (orchestrate.Phases).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import time
import zipfile
from dataclasses import dataclass, field

import numpy as np

from roundoff_coverage import routes

from . import budget, model, orchestrate, reference, results
from .assignment import candidate
from .executors import one_line
from .model import Config
from .samples import ModelError, sample_inputs
from .sites import ROUTES
from .plan import Outcome
from .rows import empty
from .targets import MeasureError, importable


@dataclass
class ModelSelection:
    """What a model run measures (the results file's meta.selection)."""

    target: str
    artifact: str
    artifact_hash: str
    formats: tuple
    modes: tuple
    policies: tuple
    routes: tuple = ROUTES
    samples: int = 2
    seed: int = 0
    inputs: str | None = None
    implementations: tuple = ("emulated",)
    argv: list = field(default_factory=list)
    reference_text: str = reference.MODEL
    # (label, ScaledFormat) of the --formats-file schemes among ``formats``: they travel with
    # the units (the catalog's are found by name).
    schemes: tuple = ()
    # Shares of the outputs' errors and their closure (engine/attribution.py: auto, share,
    # none).
    attribution: str = "auto"
    # ``model --assignment FILE``: the file, and ((node index, format label), ...) of the
    # nodes not in binary32 (engine/assignment.py); formats is then (ASSIGNED,).
    assignment_file: str | None = None
    assignment: tuple = ()

    def configs(self) -> list:
        return [Config(f, m, p) for f in self.formats for m in self.modes for p in self.policies]

    def command(self) -> str:
        """The command line of these results (``argv``: the options that decide them)."""
        return shlex.join(["roundoff-coverage", "model"] + list(self.argv))

    def describe(self) -> dict:
        return {"target": self.target, "artifact": self.artifact,
                "artifact_sha256": self.artifact_hash, "formats": list(self.formats),
                "modes": list(self.modes), "policies": list(self.policies),
                "routes": list(self.routes), "samples": self.samples,
                "inputs": self.inputs, "implementations": list(self.implementations),
                "attribution": self.attribution,
                **({"assignment": self.assignment_file,
                    "assigned": [list(p) for p in self.assignment]}
                   if self.assignment_file else {})}

    def fingerprint(self) -> str:
        # A user scheme's definition decides its rows too.
        return json.dumps({**self.describe(), "seed": self.seed,
                           "schemes": [[label, repr(s)] for label, s in self.schemes]},
                          sort_keys=True)


def load_target(target: str, artifact_out: str, check=None):
    """(graph, artifact path): an artifact read, or a factory's model captured and saved to
    ``artifact_out``.  ModelError (one line) for a target that is neither.  ``check(graph)``
    (raising a ModelError to refuse it) runs before a captured graph is saved: a model too
    large to measure is refused before its artifact is written (gigabytes for a GPT-2)."""
    if ":" not in target or target.endswith(".json"):
        if not os.path.isfile(target):
            raise ModelError(f"{target}: no such artifact (give a graph artifact written by "
                             f"graph.save, or file.py:factory)")
        try:
            graph = graph_of(target)
        except (routes.RouteError, OSError, ValueError) as exc:
            raise ModelError(str(exc)) from None
        if check is not None:
            check(graph)
        return graph, target
    made = factory_product(target)
    graph = made if isinstance(made, routes.Graph) else None
    if graph is None:
        model, args, kwargs, is_torch = made
        try:
            graph = routes.from_torch(model, args, kwargs) if is_torch else \
                routes.from_jax(model, args)
        except ImportError as exc:
            raise ModelError(f"{target}: a JAX function needs jax (the [jax] extra): "
                             f"{exc}") from None
        except routes.RouteError as exc:
            raise ModelError(f"{target}: {exc}") from None
    if graph.example_inputs is None:
        raise ModelError(f"{target}: the graph has no example inputs")
    if check is not None:
        check(graph)
    digest = graph.save(artifact_out)
    # This process's units read the captured graph itself (graph_of), and the results name
    # it by the hash its saving made (artifact_hash): a GPT-2 small's artifact is 2 GB of
    # hex, and reading it back whole held several times that.
    key = _file_key(artifact_out)
    _HASHES[key] = digest
    _GRAPHS.clear()
    _GRAPHS[key] = graph
    return graph, artifact_out


def factory_product(target: str):
    """What the factory ``file.py:factory`` (or ``module:factory``) returns: a routes.Graph,
    or (model, example args as a tuple, example keyword arguments as a dict -- a torch
    model's factory may return (model, args, kwargs): a transformers model's ``labels=`` --,
    whether the model is a torch nn.Module; else a JAX function).  ModelError (one line)
    for a factory that cannot be called or returns something else."""
    try:
        factory = importable(target)
    except MeasureError as exc:
        raise ModelError(str(exc)) from None
    if factory is None:
        raise ModelError(f"{target}: give file.py:factory or module:factory")
    try:
        made = factory()
    except Exception as exc:                                  # noqa: BLE001 (user code)
        raise ModelError(f"{target}: the factory raised {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]}") from None
    if isinstance(made, routes.Graph):
        return made
    if not (isinstance(made, tuple) and len(made) in (2, 3)) or \
            len(made) == 3 and not isinstance(made[2], dict):
        raise ModelError(f"{target}: the factory must return (model, example_args), "
                         f"(model, example_args, example_kwargs as a dict) or a routes.Graph "
                         f"(got {type(made).__name__}"
                         f"{' of ' + str(len(made)) if isinstance(made, tuple) else ''})")
    model, args, kwargs = made if len(made) == 3 else made + ({},)
    args = args if isinstance(args, tuple) else (args,)
    # A torch nn.Module (torch only when the factory imported it) is captured by from_torch;
    # any other callable is a JAX function, imported by from_jax.
    import sys
    torch = sys.modules.get("torch")
    is_torch = torch is not None and isinstance(model, torch.nn.Module)
    if not is_torch and not callable(model):
        raise ModelError(f"{target}: the factory's model must be a torch nn.Module or a "
                         f"JAX function (got {type(model).__name__})")
    if kwargs and not is_torch:
        raise ModelError(f"{target}: keyword arguments are taken for torch models only")
    return model, args, kwargs, is_torch


def unsupported(target: str) -> list:
    """Every refusal of capturing the torch model of factory ``target`` (routes'
    unsupported_torch: (aten operator, node, source line, reason) each).  ModelError (one
    line) for a target that is not a factory of a torch model, or a model torch.export
    cannot capture."""
    if ":" not in target or target.endswith(".json"):
        raise ModelError(f"{target}: --list-unsupported reads a file.py:factory (or "
                         f"module:factory) returning a torch model and its example args")
    made = factory_product(target)
    if isinstance(made, routes.Graph) or not made[3]:
        raise ModelError(f"{target}: --list-unsupported lists what a torch model's capture "
                         f"refuses; the factory gives a graph or a JAX function")
    try:
        return routes.unsupported_torch(made[0], made[1], made[2])
    except routes.RouteError as exc:
        raise ModelError(f"{target}: {exc}") from None


def check_memory(graph, samples: int, routes_=("forward",), workers: int = 1) -> None:
    """ModelError (one line) when ``samples`` samples of ``graph`` cannot fit the memory
    (budget.check_model: ``routes_`` measured, one configuration on each of ``workers``
    local processes; 0 for a remote cluster), naming its largest value."""
    sizes = [(math.prod(p.array_shape), f"input {n} {list(p.array_shape)}")
             for n, p in zip(graph.input_names, graph.inputs)]
    sizes += [(math.prod(p.array_shape), f"constant {i} {list(p.array_shape)}")
              for i, p in enumerate(graph.constant_ports)]
    for k, node in enumerate(graph.nodes):
        sizes += [(math.prod(p.array_shape),
                   f"node {k} {graph.node_names[k]!r} ({node.op.name}) output {name} "
                   f"{list(p.array_shape)}")
                  for name, p in zip(node.op.output_names, node.op.outputs)]
    big = max(sizes, key=lambda e: e[0]) if sizes else (0, "none")
    try:
        budget.check_model(sum(n for n, _ in sizes), samples, big[1], routes_, workers, big[0])
    except budget.BudgetError as exc:
        raise ModelError(str(exc)) from None


def read_inputs(path) -> dict:
    """The arrays of an ``--inputs`` .npz file by name.  ModelError (one line) when it is
    not a zip of .npy arrays, or when the arrays its .npy headers declare would not fit the
    memory (budget.check_model_inputs): checked before any array is read, since a small
    compressed file can expand to gigabytes."""
    what = f"--inputs {path}: not a .npz file of arrays (np.savez)"
    declared, largest = 0, (-1, "")
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                with z.open(info) as fh:
                    shape, dtype = _npy_header(fh)
                size = math.prod(shape) * dtype.itemsize
                declared += size
                name = info.filename.removesuffix(".npy")
                largest = max(largest, (size, f"{name}: {dtype} {list(shape)}"))
        budget.check_model_inputs(declared, path, largest[1])
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except budget.BudgetError as exc:
        raise ModelError(str(exc)) from None
    except OSError as exc:
        raise ModelError(f"--inputs {path}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ModelError(f"{what} ({reason})") from None


def _npy_header(fh) -> tuple:
    """(shape, dtype) of the .npy stream ``fh`` from its header alone (numpy's format 1.0
    and 2.0); ValueError when it is not one."""
    version = np.lib.format.read_magic(fh)
    read = {(1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:
        raise ValueError(f".npy format {version[0]}.{version[1]} is not read here")
    shape, _, dtype = read(fh)
    if dtype.hasobject:
        raise ValueError("an array of Python objects (pickled) is never loaded")
    return shape, dtype


# The graph this process has read, by artifact file (path, modification time, size): a
# run's units read their graph once per process, not once per configuration.  A captured
# graph is measured as read back from its artifact, as a later reproduction reads it.
_GRAPHS: dict = {}
_HASHES: dict = {}


def _file_key(path) -> tuple:
    st = os.stat(path)
    return os.path.abspath(path), st.st_mtime_ns, st.st_size


def artifact_hash(artifact) -> str:
    """The sha256 of the artifact file ``artifact`` (routes.graph_hash): as saved, where
    this process saved it (load_target), else read."""
    return _HASHES.get(_file_key(artifact)) or routes.graph_hash(artifact)


def graph_of(artifact):
    """The graph of the artifact file ``artifact``, read once per process."""
    key = _file_key(artifact)
    if key not in _GRAPHS:
        _GRAPHS.clear()                   # one run's graph at a time: bounded memory
        _GRAPHS[key] = routes.load_graph(artifact)
    return _GRAPHS[key]


def unit(artifact, fmt, mode, policy, samples, seed, routes_, inputs, others=(),
         target=None, scheme=None, attribution="auto", progress=False,
         assignment=()) -> dict:
    """One configuration measured: {"rows", "summary", "phases"} (JSON data); ``others``:
    the implementations run beside emulated, ``scheme`` the ScaledFormat of a user-defined
    format label ``fmt`` (model.measure); ``progress``: lines on stderr as its phases go
    (orchestrate.Phases: the exact sweeps node by node, the keep experiments), with ETAs;
    ``assignment``: ((node index, format label), ...) of a mixed-precision run."""

    graph = graph_of(artifact)
    log = orchestrate.Phases(f"{fmt}|{mode}|{policy}") if progress else None
    given = read_inputs(inputs) if inputs else None
    xs = sample_inputs(graph, samples, seed, given)
    try:
        got, summary, phases = model.measure(
            graph, Config(fmt, mode, policy), xs, seed, tuple(routes_), tuple(others), target,
            scheme, attribution, log,
            {k: candidate(label) for k, label in assignment} if assignment else None)
    except Exception as exc:                                  # noqa: BLE001 (data)
        return _error_result(fmt, mode, policy, one_line(exc))
    return results.clean({"rows": got, "summary": summary, "phases": phases})


def run(sel: ModelSelection, out: str, jobs: int | None = None, resume: bool = False,
        progress: bool = True, executor: str = "local", scheduler: str | None = None) -> Outcome:
    """Measure every configuration of ``sel``, checkpointing each; write ``out`` unless
    interrupted.  ``executor``: ``local`` (``jobs`` processes) or ``dask`` (the cluster at
    ``scheduler``, or a LocalCluster of ``jobs`` workers; each worker reads the artifact
    from its absolute path, so a remote cluster needs it on a shared file system); the
    results file is the same bytes either way."""
    t0 = time.perf_counter()
    configs = sel.configs()
    keep = orchestrate.resumed(out, sel.fingerprint(), resume)
    done = dict(keep)
    todo = [c for c in configs if config_key(c) not in done]
    others = tuple(i for i in sel.implementations if i != "emulated")
    # torch ignores the policy: its rows come with the first policy's unit of a format/mode
    first = {(c.format, c.mode): c for c in reversed(configs)}
    artifact = os.path.abspath(sel.artifact)
    units = [(config_key(c), (artifact, c.format, c.mode, c.policy, sel.samples, sel.seed,
                        sel.routes, sel.inputs,
                        others if first[(c.format, c.mode)] == c else (), sel.target,
                        dict(sel.schemes).get(c.format), sel.attribution, progress,
                        sel.assignment))
             for c in todo]
    ck = orchestrate.Checkpoint(orchestrate.checkpoint_path(out), sel, {},
                                append=bool(keep))
    bar = orchestrate.Progress(len(configs), done=len(done), quiet=not progress,
                               unit="configurations")
    workers = max(1, min(jobs or os.cpu_count() or 1, len(units) or 1))
    executor = orchestrate.Executor(executor, scheduler, workers, name=_unit_name,
                                    failed=_failed_unit)
    outcome = Outcome(total=len(configs), resumed=len(keep), out=str(out))
    orchestrate.orchestrate(unit, units, executor, lambda k, got: done.__setitem__(k, got),
                            checkpoint=ck, bar=bar, outcome=outcome)
    rows, summaries, phases = outcome.rows, outcome.summaries, outcome.phases
    for c in configs:
        got = done.get(config_key(c))
        if got is None:
            continue
        rows += got["rows"]
        summaries[config_key(c)] = got["summary"]
        for k, v in got.get("phases", {}).items():
            phases[k] = phases.get(k, 0.0) + v
    outcome.missing = tuple(config_key(c) for c in configs if config_key(c) not in done)
    # An interrupt that came after the last unit finished stopped nothing: the run is whole.
    outcome.interrupted = outcome.interrupted and bool(outcome.missing)
    outcome.wall = time.perf_counter() - t0
    if not outcome.interrupted:
        doc = results.document(rows, sel)
        doc["model"] = results.clean({"target": sel.target, "artifact": sel.artifact,
                                      "sha256": sel.artifact_hash, "summary": summaries})
        orchestrate.finish(out, doc)
    return outcome


def _unit_name(key) -> str:
    return f"configuration {key.replace('|', ' ')}"


def _failed_unit(key, message) -> dict:
    """What a configuration that failed on the cluster (its worker died, twice) becomes:
    one error row naming it, like a configuration whose measurement raised."""
    return _error_result(*key.split("|"), message)


def _error_result(fmt, mode, policy, reason) -> dict:
    """A configuration's result when it could not be measured: one error row."""
    return {"rows": [empty(op="model", route="forward", port="*", format=fmt, mode=mode,
                           policy=policy, implementation="emulated", status="error",
                           reason=reason, node="model", attribution="propagated")],
            "summary": {}, "phases": {}}


def config_key(c: Config) -> str:
    """The key of a configuration in an outcome's summaries and missing list."""
    return f"{c.format}|{c.mode}|{c.policy}"
