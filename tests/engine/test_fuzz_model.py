"""A fuzz of ``roundoff-coverage model`` and of graph artifacts, in the style of
test_cli_errors.py's: hostile artifacts (huge declared shapes, deep nesting, cycles,
dangling references, NaN/Infinity literals, unknown operators, non-UTF-8, huge integers,
pickled bytes) and random option values.  The oracle is the exit-status contract itself:
every case exits 0, 1 or 2, with at most one line on stderr (``--quiet``: no progress
lines), no traceback and no internal error, within CASE_LIMIT_S, in a process whose
address space is capped at MEMORY_CAP (resource.setrlimit in the child: an artifact that
makes the run allocate terabytes fails there, not on the machine).

Each case is its own ``python -m roundoff_coverage`` process (about 1.5 s to start), so the
file keeps to about 35 cases: every hostile artifact once, then 14 drawn command lines.
"""

from __future__ import annotations

import io
import json
import pathlib
import pickle
import resource
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roundoff_coverage import routes
from roundoff_coverage.routes import artifact
from roundoff_coverage.routes.ports import value

CASE_LIMIT_S = 60
MEMORY_CAP = 3 << 30                 # numba, mpmath and a small model run fit in 2 GiB
CHEAP = ["--samples", "1", "--routes", "forward", "--jobs", "1", "--quiet", "--out",
         "out.json"]


def _cap_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _graph() -> routes.Graph:
    """y = softmax(x * w + b) on (2, 3): the valid artifact the hostile ones start from."""
    g = routes.Graph(x=value((2, 3)), w=value((2, 3)), b=value((2, 3)))
    h = g.apply(routes.op("mul", shape=(2, 3)), g.input("x"), g.input("w"), name="mul")
    h = g.apply(routes.op("add", shape=(2, 3)), h, g.input("b"), name="add")
    g.output(g.apply(routes.op("softmax", shape=(2, 3), axis=1), h, name="softmax"))
    g.example_inputs = [np.linspace(-1, 1, 6).reshape(2, 3)] * 3
    return g


def _wide() -> bytes:
    """A consistent graph whose broadcast declares a 10**6 x 10**6 value (8 TB)."""
    g = routes.Graph(x=value((1,)))
    h = g.apply(routes.op("broadcast", shape=(1,), to=(10**6, 10**6)), g.input("x"),
                name="wide")
    g.output(g.apply(routes.op("exp", shape=(10**6, 10**6)), h, name="exp"))
    g.example_inputs = [np.array([0.5])]
    return (artifact.canonical(artifact.to_document(g)) + "\n").encode()


def _mutated(edit):
    def make():
        doc = json.loads(artifact.canonical(artifact.to_document(_graph())))
        edit(doc)
        return json.dumps(doc).encode()
    return make


def _text(replace):
    def make():
        return replace(artifact.canonical(artifact.to_document(_graph()))).encode("utf-8")
    return make


class _Payload:
    def __reduce__(self):
        return print, ("unpickled",)


HOSTILE = {
    "valid": _text(lambda t: t),
    "bom": lambda: b"\xef\xbb\xbf" + _text(lambda t: t)(),
    "huge-shape": _mutated(lambda d: d["inputs"][0]["port"].update(shape=[10**9, 10**9])),
    "huge-consistent-shape": _wide,
    "deep-nesting": lambda: b"[" * 100_000 + b"]" * 100_000,
    # node 0 reads node 1, which reads node 0
    "cycle": _mutated(lambda d: d["nodes"][0].update(args=[["node", 1, 0], ["input", 1]])),
    "dangling-input": _mutated(lambda d: d["nodes"][0]["args"].__setitem__(0, ["input", 9])),
    "dangling-output": _mutated(lambda d: d.update(outputs=[["node", 7, 0]])),
    "nan-literal": _text(lambda t: t.replace('"source":{}', '"source":{"x":NaN}')),
    "infinity-literal": _text(lambda t: t.replace('["input",0]', '["input",Infinity]', 1)),
    "huge-integer": _text(lambda t: t.replace('["input",0]', '["input",' + "7" * 5000 + "]",
                                              1)),
    "unknown-operator": _mutated(lambda d: d["nodes"][0]["op"].update(tag="os.system")),
    "non-utf8": lambda: _text(lambda t: t)().replace(b'"mul"', b'"m\xe9l"', 1),
    "pickle": lambda: pickle.dumps(_Payload()),
    "truncated": lambda: _text(lambda t: t)()[:200],
    "empty": lambda: b"",
    "wrong-schema": _mutated(lambda d: d.update(schema="roundoff-coverage/1")),
    "float-shape": _mutated(lambda d: d["inputs"][0]["port"].update(shape=[2.5, 3])),
    "negative-bound": _mutated(lambda d: d["inputs"][0]["port"].update(kind="index",
                                                                      bounds=[-4])),
}


def _folder(tmp: pathlib.Path) -> None:
    """The case's files: every hostile artifact, --inputs files, a results file."""
    for name, make in HOSTILE.items():
        (tmp / f"{name}.json").write_bytes(make())
    np.savez(tmp / "inputs.npz", x=np.ones((2, 3)))
    (tmp / "empty.npz").write_bytes(b"")
    with zipfile.ZipFile(tmp / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as z:
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False,
                                                    "shape": (1 << 40,)})
        z.writestr("x.npy", head.getvalue())
    (tmp / "results.json").write_text('{"schema": "roundoff-coverage/1", "rows": []}')
    (tmp / "folder").mkdir()
    (tmp / "null").symlink_to("/dev/null")


def _run(argv, cwd):
    try:
        done = subprocess.run([sys.executable, "-m", "roundoff_coverage", *argv], cwd=cwd,
                              capture_output=True, text=True, errors="replace",
                              timeout=CASE_LIMIT_S, preexec_fn=_cap_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv} ran past {CASE_LIMIT_S} s")
    return done.returncode, done.stderr


def _contract(argv, status, err):
    assert status in (0, 1, 2), (argv, status, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    lines = err.splitlines()
    assert len(lines) <= 1, (argv, err)
    assert all(line.startswith("roundoff-coverage: ") for line in lines), (argv, err)
    assert (status == 2) == bool(lines), (argv, status, err)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_artifact_is_an_exit_status_and_at_most_one_line(name, tmp_path):
    _folder(tmp_path)
    argv = ["model", f"{name}.json", *CHEAP]
    status, err = _run(argv, tmp_path)
    _contract(argv, status, err)
    assert status == (0 if name in ("valid", "bom") else 2), (name, err)
    if status == 2:                     # refusals name the file, as every reader's do
        assert f"{name}.json" in err or "the model's values" in err, err


# "null" links to /dev/null (never /dev/null itself: a bug that replaced it would break
# the machine, where replacing the link harms nothing).
PATHS = ["out.json", "valid.json", "folder", "new/dir/r.json", "results.json", "", "null",
         "é.json", "out.json.graph.json"]


def _option(name, values):
    return st.tuples(st.just(name), st.sampled_from(values))


OPTIONS = st.one_of(
    _option("--formats", ["bfloat16", "binary16", "float8_e4m3fn", "", ",", "nope",
                          "binary128", "mxfp8_e4m3", "bfloat16,bfloat16"]),
    _option("--modes", ["nearest_even", "upward", "stochastic", "", ",", "bogus"]),
    _option("--policies", ["strict", "fp32_accumulate", "", "fast", "fixed_point:x",
                           "scaled_recipe"]),
    _option("--routes", ["forward", "gradient", "tangent", "", ",", "backward"]),
    _option("--implementations", ["emulated", "", "nope", "cuda"]),
    _option("--samples", ["1", "2", "0", "-3", "x", "", "10000000000000000000000"]),
    _option("--seed", ["0", "7", "-5", str(2**63), "x"]),
    _option("--jobs", ["1", "0", "-2", "x"]),
    _option("--inputs", ["inputs.npz", "empty.npz", "bomb.npz", "nope.npz", "valid.json"]),
    st.tuples(st.sampled_from(["--out", "--artifact", "--html", "--gate"]),
              st.sampled_from(PATHS)),
    st.tuples(st.sampled_from(["--resume", "--nope", "extra"])),
)


@st.composite
def command_lines(draw):
    target = draw(st.sampled_from(["valid.json"] * 4 + [f"{n}.json" for n in HOSTILE] +
                                  ["nosuch.json", "", ":", "x.py:f", "json:dumps"]))
    argv = ["model", target, *CHEAP]
    for option in draw(st.lists(OPTIONS, max_size=4)):
        argv += list(option)
    return argv + ["--quiet"]


@settings(max_examples=14, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
def test_fuzz_model_options_keep_the_exit_status_contract(argv, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    _folder(folder)
    status, err = _run(argv, folder)
    _contract(argv, status, err)
