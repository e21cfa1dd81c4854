"""The harness every kernel test file uses: cases (one route of one operator instance in one
format and mode on sampled inputs), one simulator subprocess that runs a list of cases, and
the check of a case against its kernel's contract.

``simulate(cases, folder)`` runs every case with NUMBA_ENABLE_CUDASIM=1 (it must be set before
numba is imported, hence the subprocess) and returns {case id: result}; ``check(case, result)``
asserts what the contract claims: bit for bit with ``o.rule(numerics.emulated(fmt, mode))``
where it claims ``bitwise`` agreement (``screened``: except where an exact transcendental value
lies within the margin of a rounding boundary, detected with the reference), and within the
claimed ulps of ``o.rule(numerics.reference(200))`` where it claims a bound.  It returns
whether the case was compared bit for bit.
"""

from __future__ import annotations

import base64
import itertools
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
from roundoff_coverage.kernels.contract import TRANSCENDENTAL
from roundoff_coverage.numerics import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = ("binary64", "binary32", "bfloat16", "binary16", "float8_e4m3fn")
FEW = ("binary64", "bfloat16", "float8_e4m3fn")
DIRECTED = ("toward_zero", "upward", "nearest_away", "odd")
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.5, 0.5])
_ids = itertools.count()


def op(name, **attrs):
    """routes.op, checked."""
    o = routes.op(name, **attrs)
    o.check()
    return o


def examples(name):
    """The operator's example instances."""
    return [op(name, **attrs) for attrs in routes.op(name).decl.examples.values()]


def special_inputs(o, rng):
    """Inputs drawn from signed zeros, infinities, NaN and a few finite values at every value
    port (other ports from the operator's own ordinary sampler)."""
    base = o.samples(rng, formats.get("binary32"), "ordinary")
    return tuple(SPECIALS[rng.integers(0, len(SPECIALS), np.shape(x))].reshape(np.shape(x))
                 if p.kind == "value" else x for x, p in zip(base, o.inputs))


def case(o, fmt, mode, route, kind, rng, inputs=None):
    """One case: ``inputs`` (one array per input port) or the operator's samples of ``kind``;
    random cotangents of the format for the gradient route."""
    xs = o.samples(rng, formats.get(fmt), kind) if inputs is None else tuple(inputs)
    cots = None
    if route == "gradient":
        cots = tuple(formats.round_to(rng.uniform(-2, 2, p.shape), fmt).reshape(p.shape)
                     if p.differentiable else None for p in o.outputs)
    shape = "x".join(map(str, o.outputs[0].shape)) if o.outputs else "-"
    return {"id": f"{o.name}-{shape}-{route}-{fmt}-{mode}-{kind}-{next(_ids)}",
            "op": o, "fmt": fmt, "mode": mode, "route": route, "xs": xs, "cots": cots}


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


def simulate(cases, folder):
    """{case id: {"device", "outputs"} or {"error"}} from one simulator subprocess."""
    wire = [{"id": c["id"], "op": routes.encode(c["op"]), "fmt": c["fmt"], "mode": c["mode"],
             "route": c["route"], "xs": [_pack(x) for x in c["xs"]],
             "cots": None if c["cots"] is None else [_pack(g) for g in c["cots"]]}
            for c in cases]
    path = os.path.join(str(folder), "cases.json")
    with open(path, "w") as f:
        json.dump(wire, f)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, path], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"simulator: {len(cases)} cases in {time.time() - start:.1f} s "
          f"({doc['seconds']:.1f} s of kernels)")
    return doc["results"]


def simulated_fixture(make_cases, folder):
    """A test file's module-scoped fixture ``simulated``: (the case list ``make_cases()``
    builds, {case id: result} from one simulator subprocess run in a fresh ``folder``)."""
    @pytest.fixture(scope="module", name="simulated")
    def fixture(tmp_path_factory):
        cases = make_cases()
        return cases, simulate(cases, tmp_path_factory.mktemp(folder))
    return fixture


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
    import pytest
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


def route_cases(instances, fmts, rng, mode="nearest_even"):
    """A case for every (op, kinds) of ``instances``, format of ``fmts``, sample kind of
    ``kinds`` and route of the op's kernel."""
    return [case(o, fmt, mode, route, kind, rng) for o, kinds in instances
            for fmt in fmts for kind in kinds for route in kernels.of_op(o).routes]


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


def check(c, got):
    """Assert the case's result meets its kernel's contract; whether it was compared bit
    for bit."""
    assert "error" not in got, f"{c['id']}: {got.get('error')}"
    k = kernels.of_op(c["op"])
    claim = k.claim(c["route"], c["fmt"], c["mode"])
    fmt = formats.get(c["fmt"])
    xp = numerics.emulated(fmt, c["mode"])
    screen = _Screen(xp, fmt, c["mode"], claim.margin) if claim.agreement == "screened" else None
    emu = evaluate(c, xp)
    outs = [unpack(g) for g in got["outputs"]]
    assert got["device"] == "simulator"
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
