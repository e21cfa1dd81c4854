"""The harness every kernel test file uses: the cases the kernel table declares (one route of
one operator instance in one format and mode on sampled inputs, built from each kernel's
``Kernel.tests``), the simulator run of all of them, and the check of a case against its
kernel's contract.

``table_specs()`` lists every case the table declares without its inputs (cheap: the test ids,
at collection); ``table_cases()`` the same cases with their inputs, each drawn from a
generator seeded by the case's id (a case's inputs do not depend on which other cases
exist).  The fixture ``simulated`` (tests/conftest.py) is (the cases, {case id: result})
from ``table_results``, run once per test session whichever test asks first.  ``simulate(cases, folder, batches)`` runs cases in subprocesses with
NUMBA_ENABLE_CUDASIM=1 (it must be set before numba is imported); ``check(case, result)`` asserts
what the contract claims: bit for bit with ``o.rule(numerics.emulated(fmt, mode))`` where it
claims ``bitwise`` agreement (``screened``: except where an exact transcendental value lies
within the margin of a rounding boundary, detected with the reference), and within the
claimed ulps of ``o.rule(numerics.reference(200))`` where it claims a bound.  It returns
whether the case was compared bit for bit.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import kernels
from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.kernels.base import DIRECTED, FORMATS  # noqa: F401 (the tests')
from roundoff_coverage.kernels.contract import TRANSCENDENTAL
from roundoff_coverage.kernels.table import TABLE
from roundoff_coverage.numerics import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----- the cases the kernel table declares ---------------------------------------------------
def _shape_label(o):
    """The first output's shape, ``2x4`` (``scalar`` at rank 0)."""
    return "x".join(map(str, o.outputs[0].shape)) or "scalar"


def _operators(k, inst):
    """(label or None, op) of each operator instance ``inst`` (a kernels.base.Instance of
    kernel ``k``) names: every example the kernel serves, one example, or the attributes."""
    decl = routes.op(k.name).decl
    if inst.attrs is None:
        found = [(label or "default", routes.op(k.name, **attrs))
                 for label, attrs in decl.examples.items()]
        return [(label, o) for label, o in found if kernels.of_op(o) is k]
    if isinstance(inst.attrs, str):
        if inst.attrs not in decl.examples:
            raise ValueError(f"{k.name}: no example {inst.attrs!r} (examples: "
                             f"{', '.join(map(repr, decl.examples))})")
        return [(inst.label or inst.attrs or "default",
                 routes.op(k.name, **decl.examples[inst.attrs]))]
    return [(inst.label or None, routes.op(k.name, **inst.attrs))]


def _kernel_specs(k):
    """The cases kernel ``k`` declares, without inputs.  An instance without a label takes
    the label an earlier one gave the same operator instance, else ``default`` (the
    operator's defaults) or its first output's shape.  ValueError where a declaration names
    an instance the kernel does not serve, a route it lacks or a kind the operator does not
    sample, or where one label names two instances."""
    out, named = [], {}
    for inst in k.tests:
        for label, o in _operators(k, inst):
            o.check()
            if kernels.of_op(o) is not k:
                raise ValueError(f"{k.name}: the kernel does not serve test instance {o.attrs}")
            if label is None:
                label = next((n for n, p in named.items() if p == o), None) or \
                    ("default" if o == routes.op(k.name) else _shape_label(o))
            if named.setdefault(label, o) != o:
                raise ValueError(f"{k.name}: test label {label!r} names two instances")
            kinds = inst.kinds or tuple(o.decl.samples)
            unknown = [kd for kd in kinds if kd not in o.decl.samples]
            if inst.inputs is None and unknown:
                raise ValueError(f"{k.name}: {label}: the operator samples no {unknown[0]} "
                                 f"inputs (kinds: {', '.join(o.decl.samples)})")
            rts = inst.routes or k.routes
            if not set(rts) <= set(k.routes):
                raise ValueError(f"{k.name}: {label}: routes {rts} (the kernel's: {k.routes})")
            out += [{"id": "-".join((k.name, label, route, fmt, mode, kind)), "op": o,
                     "fmt": fmt, "mode": mode, "route": route, "kind": kind, "instance": inst}
                    for fmt in inst.formats for kind in kinds for route in rts
                    for mode in inst.modes]
    return out


_MEMO = {}


def table_specs() -> tuple:
    """Every case the kernel table declares, without inputs, in table order: dicts with the
    test ``id`` (``<op>-<label>-<route>-<format>-<mode>-<kind>``), ``op``, ``fmt``,
    ``mode``, ``route``, ``kind`` and the declaring ``instance`` (kernels.base.Instance)."""
    if "specs" not in _MEMO:
        specs = [s for k in TABLE.values() for s in _kernel_specs(k)]
        seen = {}
        for s in specs:
            if seen.setdefault(s["id"], s) is not s:
                raise ValueError(f"two test cases have the id {s['id']}")
        _MEMO["specs"] = tuple(specs)
    return _MEMO["specs"]


def _rng(case_id):
    """A generator seeded by the case id (stable whatever else the table declares)."""
    return np.random.default_rng(int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:8],
                                                "little"))


def _draw(s):
    """The spec ``s`` with its inputs ``xs`` (the operator's samples of the kind, or the
    instance's ``inputs``) and, on the gradient route, random cotangents ``cots`` of the
    format (None at outputs without one)."""
    o, fmt, rng, inputs = s["op"], formats.get(s["fmt"]), _rng(s["id"]), s["instance"].inputs
    xs = tuple(o.samples(rng, fmt, s["kind"]) if inputs is None else inputs(o, rng, fmt))
    cots = None
    if s["route"] == "gradient":
        cots = tuple(formats.round_to(rng.uniform(-2, 2, p.shape), fmt).reshape(p.shape)
                     if p.differentiable else None for p in o.outputs)
    return dict(s, xs=xs, cots=cots)


def table_cases() -> tuple:
    """``table_specs()`` with their inputs (``xs``) and cotangents (``cots``, ``_draw``)."""
    if "cases" not in _MEMO:
        _MEMO["cases"] = tuple(_draw(s) for s in table_specs())
    return _MEMO["cases"]


def table_results(folder_factory) -> dict:
    """{case id: result} of every table case from the simulator (one subprocess per CPU, at
    most 4), run once per pytest session (``folder_factory``: pytest's tmp_path_factory).
    Under pytest-xdist the workers share one run: the first to take the lock on a file
    beside their temporary folders runs it and writes the results there, the others read
    them (each would otherwise simulate every case again on the same cores)."""
    if "results" in _MEMO:
        return _MEMO["results"]
    base = folder_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    done = shared / "kernel-results.json"
    with open(shared / "kernel-results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file is closed
        if done.exists():
            with open(done) as fh:
                _MEMO["results"] = json.load(fh)
        else:
            _MEMO["results"] = simulate(table_cases(), folder_factory.mktemp("kernels"),
                                        _batches())
            with open(f"{done}.part", "w") as fh:
                json.dump(_MEMO["results"], fh)
            os.replace(f"{done}.part", done)
    return _MEMO["results"]


def _pack(a):
    if a is None:
        return None
    a = np.array(a, order="C")              # (ascontiguousarray would make 0-d arrays 1-d)
    return {"dtype": a.dtype.str, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode()}


def unpack(d):
    if d is None:
        return None
    return np.frombuffer(base64.b64decode(d["data"]), dtype=np.dtype(d["dtype"])) \
        .reshape(d["shape"]).copy()


_SCRIPT = textwrap.dedent("""
    import os, sys, json, time
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
    from roundoff_coverage import kernels, routes
    from kernel_harness import unpack, _pack
    cases = json.load(open(sys.argv[1]))
    out = {}
    t = time.time()
    for c in cases:
        o = routes.decode(c["op"])
        xs = [unpack(x) for x in c["xs"]]
        cots = None if c["cots"] is None else [unpack(g) for g in c["cots"]]
        try:
            res, dev = kernels.run(o, xs, c["fmt"], c["mode"], c["route"], cots)
        except Exception as exc:
            out[c["id"]] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        out[c["id"]] = {"device": dev, "outputs": [_pack(r) for r in res]}
    print(json.dumps({"results": out, "seconds": time.time() - t}))
""")


def simulate(cases, folder, batches=1):
    """{case id: {"device", "outputs"} or {"error"}} from ``batches`` simulator subprocesses
    run side by side (case i in batch i mod ``batches``: each batch keeps the cases' order,
    so every batch runs the kernels in table order), each given 1800 s."""
    procs = []
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    start = time.time()
    for b in range(batches):
        part = cases[b::batches]
        if not part:
            continue
        wire = [{"id": c["id"], "op": routes.encode(c["op"]), "fmt": c["fmt"],
                 "mode": c["mode"], "route": c["route"], "xs": [_pack(x) for x in c["xs"]],
                 "cots": None if c["cots"] is None else [_pack(g) for g in c["cots"]]}
                for c in part]
        path = os.path.join(str(folder), f"cases{b}.json")
        with open(path, "w") as f:
            json.dump(wire, f)
        procs.append(subprocess.Popen([sys.executable, "-c", _SCRIPT, path], text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=env, cwd=ROOT))
    results, seconds = {}, 0.0
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, 1800 - (time.time() - start)))
            assert proc.returncode == 0, err[-3000:]
            doc = json.loads(out.strip().splitlines()[-1])
            results.update(doc["results"])
            seconds += doc["seconds"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"simulator: {len(cases)} cases in {len(procs)} processes, {time.time() - start:.1f} s "
          f"({seconds:.1f} s of kernels)")
    return results


def _batches():
    """Simulator processes for the table's cases: one per CPU this process may use, at most
    4 (each spends about 3 s importing numba)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, cpus or 1))


def flipped(result, nonzero=False):
    """``result`` with one bfloat16-visible bit flipped in its first output's first finite
    (and, with ``nonzero``, nonzero) element."""
    got = json.loads(json.dumps(result))
    out = unpack(got["outputs"][0])
    flat = out.reshape(-1)
    j = int(np.flatnonzero(np.isfinite(flat) & ((flat != 0) if nonzero else True))[0])
    flat.view(np.int64)[j] ^= 1 << 50
    got["outputs"][0] = _pack(out)
    return got


def python(code, *args, timeout=900, **env_changes):
    """``python -c code *args`` in the repository root, without NUMBA_ENABLE_CUDASIM unless
    ``env_changes`` sets it."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)


# A PTX script's first lines: device functions compile for the current device's compute
# capability, and there is no driver here, so name one (sm_90): NVVM compiles to PTX
# without a GPU.
PTX_PRELUDE = textwrap.dedent("""
    import json, sys, types
    import numba
    import numba.cuda.dispatcher as _dispatcher
    _dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    from numba import cuda
    from roundoff_coverage.kernels.primitives import build
    f, i = numba.float64, numba.int64
""")


def ptx(script, *args):
    """{name: PTX} that PTX_PRELUDE + ``script`` prints as JSON on its last line (the GPU
    build, compiled by NVVM without a GPU); the test is skipped where NVVM is missing."""
    probe = python("from numba.cuda.cudadrv import nvvm; print(nvvm.is_available())")
    if probe.stdout.strip().splitlines()[-1:] != ["True"]:
        pytest.skip("NVVM (libnvvm, from the CUDA toolkit) is not installed here")
    proc = python(PTX_PRELUDE + textwrap.dedent(script), *args)
    err = proc.stderr.lower()
    if proc.returncode != 0 and "nvvm" in err and any(
            w in err for w in ("not found", "cannot be found", "could not", "cannot find",
                               "no such file", "not available")):
        pytest.skip("NVVM (libnvvm, from the CUDA toolkit) is not installed here")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def flavour_ptx(script):
    """{'<flavour>-<name>': PTX} of every kernel in the dict ``sigs`` ({name: (maker,
    signature)}) that ``script`` defines, built in the three precision flavours."""
    return ptx(textwrap.dedent(script) + textwrap.dedent('''
        out = {}
        for flav in ("binary64", "binary32", "emulated"):
            P = build(flav, False)
            for name, (make, sig) in sigs.items():
                out[flav + "-" + name] = cuda.compile_ptx(make(P).py_func, sig, cc=(9, 0))[0]
        print(json.dumps(out))
    '''))


class _Screen:
    """Wraps an emulated backend's transcendental primitives to note whether any exact value
    lies within ``margin`` (relative) of a rounding boundary of the format (reference at
    200 bits, then rounding its binary64 neighbourhood)."""

    def __init__(self, xp, fmt, mode, margin):
        self.ambiguous = False
        ref = numerics.reference(200)
        for name in sorted(TRANSCENDENTAL):
            orig = getattr(xp, name)

            def wrapped(a, _orig=orig, _name=name, **kw):
                exact = ref.to_float64(getattr(ref, _name)(ref.asarray(np.asarray(a))))
                y = np.asarray(exact, dtype=np.float64)
                ok = np.isfinite(y) & (y != 0)
                lo = formats.round_to(np.where(ok, y * (1 - margin), 1.0), fmt, mode)
                hi = formats.round_to(np.where(ok, y * (1 + margin), 1.0), fmt, mode)
                if np.any(lo.view(np.int64) != hi.view(np.int64)):
                    self.ambiguous = True
                return _orig(a, **kw)
            setattr(xp, name, wrapped)


def evaluate(c, backend):
    """The case's route under ``backend`` (the rule's values)."""
    rule = c["op"].rule(backend)
    if c["route"] == "forward":
        return rule.forward(c["xs"])
    return rule.backward(c["xs"], c["cots"])


def same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))


def check_ports(c, got):
    """Assert the case ran and returned one array per port of its route (the outputs, or on
    the gradient route the inputs, None exactly at those without a gradient), each of the
    port's shape."""
    assert "error" not in got, f"{c['id']}: {got.get('error')}"
    assert got["device"] == "simulator"
    outs = [unpack(g) for g in got["outputs"]]
    gradient = c["route"] == "gradient"
    ports = c["op"].inputs if gradient else c["op"].outputs
    assert len(outs) == len(ports), c["id"]
    for out, p in zip(outs, ports):
        assert (out is None) == (gradient and not p.differentiable), c["id"]
        assert out is None or out.shape == tuple(p.shape), (c["id"], out.shape, p.shape)


def check(c, got):
    """Assert the case's result meets its kernel's contract; whether it was compared bit
    for bit.  A case whose instance ``refuses`` its inputs must give that one-line error; a
    case numerics.emulated cannot evaluate (``emulated`` False) is checked for its ports
    only (its values: tests/kernels/test_kernels_attention_empty.py)."""
    inst = c.get("instance")
    if inst is not None and inst.refuses:
        err = got.get("error", "")
        assert err.startswith(f"KernelError: {inst.refuses}") and "\n" not in err, \
            f"{c['id']}: expected the one-line error {inst.refuses!r}, got {err or got!r}"
        return False
    check_ports(c, got)
    if inst is not None and not inst.emulated:
        return False
    k = kernels.of_op(c["op"])
    claim = k.claim(c["route"], c["fmt"], c["mode"])
    fmt = formats.get(c["fmt"])
    xp = numerics.emulated(fmt, c["mode"])
    screen = _Screen(xp, fmt, c["mode"], claim.margin) if claim.agreement == "screened" else None
    emu = evaluate(c, xp)
    outs = [unpack(g) for g in got["outputs"]]
    assert len(outs) == len(emu)
    compare = claim.agreement == "bitwise" or (claim.agreement == "screened"
                                               and not screen.ambiguous)
    for out, e in zip(outs, emu):
        assert (out is None) == (e is None), c["id"]
        if out is None:
            continue
        out = np.asarray(out).reshape(-1)
        e = np.asarray(e).reshape(-1)
        if compare:
            bad = ~same(out, e)
            assert not bad.any(), (f"{c['id']}: kernel {out[bad][:4]} != emulated "
                                   f"{e[bad][:4]} (inputs {[np.ravel(x)[:4] for x in c['xs']]})")
    if claim.max_ulp is not None:
        exact = evaluate(c, numerics.reference(200))
        for out, e, em in zip(outs, exact, emu):
            if out is None:
                continue
            out = np.asarray(out, dtype=np.float64).reshape(-1)
            e = clamped(np.asarray(e).reshape(-1), fmt)
            err = metrics.ulp_error(out, e, fmt)
            emu_err = metrics.ulp_error(np.asarray(em, dtype=np.float64).reshape(-1), e, fmt)
            assert not np.any(np.isnan(err) & ~np.isnan(emu_err)), c["id"]
            worst = float(np.nanmax(np.abs(err))) if np.any(~np.isnan(err)) else 0.0
            assert worst <= claim.max_ulp, f"{c['id']}: {worst} ulp > claimed {claim.max_ulp}"
    return compare


def clamped(exact, fmt):
    """Exact values beyond 2**(emax+2) (exp of a large format value) replaced by that power
    with their sign, and nonzero ones below 2**(qmin-60) by that power: metrics clamps the
    first to the extended range anyway and the second moves an error by 2**-58 ulp, and
    metrics cannot read an mpf whose exponent is far outside binary64's."""
    import mpmath
    out = exact.copy()
    for i, v in enumerate(exact):
        if not hasattr(v, "_mpf_") or not mpmath.isfinite(v) or v == 0:
            continue
        size = int(v.exp) + int(v.bc)        # 2**(size-1) <= |v| < 2**size (exponent, not value)
        if size > fmt.emax + 3:
            out[i] = mpmath.ldexp(1 if v > 0 else -1, fmt.emax + 2)
        elif size < fmt.qmin - 60:
            out[i] = mpmath.ldexp(1 if v > 0 else -1, fmt.qmin - 60)
    return out
