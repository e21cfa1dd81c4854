"""One import name: the distribution installs ``roundoff_coverage`` and nothing else at the
top level of site-packages, and it works beside other packages named like its layers
(``kernels``, ``routes``, ``reports``, ``formats``, ``numerics`` are all taken on the
package index) and beside a user's own folders of those names."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("formats", "numerics", "routes", "kernels", "reports")
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                              "results*", ".pytest_cache", ".hypothesis", "out")


@pytest.mark.slow
def test_wheel_holds_roundoff_coverage_and_its_dist_info_only(tmp_path):
    # Build from a copy of the source, so that no build/ folder of an earlier build can
    # leak stale files into the wheel.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(tmp_path / "wheel"), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [wheel] = (tmp_path / "wheel").glob("roundoff_coverage-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    dist_info = [t for t in tops if t.endswith(".dist-info")]
    assert tops == {"roundoff_coverage", *dist_info} and len(dist_info) == 1, sorted(tops)
    # Every layer and its subpackages are inside, with the entry points under the prefix.
    for sub in (*LAYERS, "routes/families", "reports/html"):
        assert f"roundoff_coverage/{sub}/__init__.py" in names, sub
    assert "roundoff_coverage/__main__.py" in names
    entry = zipfile.ZipFile(wheel).read(f"{dist_info[0]}/entry_points.txt").decode()
    assert "roundoff-coverage = roundoff_coverage.reports.cli:main" in entry
    assert "roundoff_coverage = roundoff_coverage.reports.pytest_plugin" in entry


STAND_IN = '"""A stand-in named like a layer of roundoff_coverage."""\nMARK = "stand-in {name}"\n'

CHECK = textwrap.dedent("""
    import json, sys
    from fractions import Fraction
    import formats, kernels, numerics, reports, routes          # the stand-ins
    marks = [m.MARK for m in (formats, kernels, numerics, reports, routes)]
    import numpy as np
    from roundoff_coverage import formats as F, numerics as N, routes as R, reports as P
    from roundoff_coverage import kernels as K
    bf16 = F.get("bfloat16")
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: nearest-even rounds it down to 1;
    # 1 + 3*2^-9 rounds up to 1 + 2^-7 (exact rationals decide).
    rounded = F.round_to(np.array([1 + 2.0**-8, 1 + 3 * 2.0**-9]), bf16)
    prod = N.emulated(bf16).multiply(np.array([3.0]), np.array([1 + 2.0**-7]))
    out = R.op("exp", shape=(2,)).rule(N.reference(80)).forward((np.array([0.0, 1.0]),))[0]
    print(json.dumps({
        "marks": marks,
        "still": [sys.modules[n].MARK for n in ("formats", "kernels", "numerics",
                                                "reports", "routes")],
        "where": [m.__name__ for m in (F, N, R, P, K)],
        "rounded": [float(v) for v in rounded],
        "product": float(prod[0]),
        "exp1": str(out[1]),
        "ops": len(R.names()),
        "kernel": K.of_op("exp") is not None,
    }))
""")


def _stand_ins(tmp_path):
    shadow = tmp_path / "shadow"
    for name in LAYERS:
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(STAND_IN.format(name=name))
    env = dict(os.environ, PYTHONPATH=str(shadow))
    return shadow, env


def test_stand_in_packages_and_roundoff_coverage_both_import_and_work(tmp_path):
    shadow, env = _stand_ins(tmp_path)
    # cwd holds the stand-ins too: a user's own formats/ or reports/ beside their script.
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=shadow, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["marks"] == [f"stand-in {n}" for n in sorted(LAYERS)] == got["still"]
    assert got["where"] == [f"roundoff_coverage.{n}" for n in
                            ("formats", "numerics", "routes", "reports", "kernels")]
    assert got["rounded"] == [1.0, 1 + 2.0**-7]
    # 3 * (1 + 2^-7) = 3 + 3*2^-7 = 3.0234375; bfloat16 spacing at 3 is 2^-6, and
    # 3*2^-7 = 1.5 * 2^-6 is a tie between 3 + 2^-6 and 3 + 2^-5: even mantissa is 3 + 2^-5.
    assert got["product"] == 3 + 2.0**-5
    assert got["exp1"].startswith("2.71828182845904523536")
    assert got["ops"] == 154 and got["kernel"]


def test_cli_runs_a_small_coverage_run_beside_stand_ins(tmp_path):
    shadow, env = _stand_ins(tmp_path)
    out = tmp_path / "cov.json"
    args = ["run", "--ops", "exp,add", "--formats", "bfloat16", "--routes", "forward",
            "--samples", "8", "--jobs", "1", "--quiet", "--out", str(out)]
    for cmd in ([sys.executable, "-m", "roundoff_coverage"],
                [str(pathlib.Path(sys.executable).parent / "roundoff-coverage")]):
        if not pathlib.Path(cmd[0]).exists():
            continue                      # the console script of an installed environment
        proc = subprocess.run(cmd + args, cwd=shadow, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(out.read_text())["rows"]
        # Float instances (the integer and Boolean instances of add have no ulp error).
        measured = [r for r in rows if r["status"] == "ok" and r["max_ulp"] is not None]
        assert {r["op"] for r in measured} == {"exp", "add"}
        # Correctly rounded primitives of the emulated model: within half an ulp.
        assert all(abs(r["max_ulp"]) <= 0.5 for r in measured)
        out.unlink()


def test_python_dash_m_roundoff_coverage_is_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "roundoff_coverage", "formats", "bfloat61"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "bfloat61" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_code_folder_is_a_listed_package():
    """pyproject lists the packages by hand (the root is the package's folder): every folder
    of the source with an __init__.py must be among them, or a fresh install lacks it."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = set()
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts and rel.parts[0] in ("tests", "benchmarks", "build", "docs") or \
                any(p.startswith(".") for p in rel.parts):
            continue
        found.add(".".join(("roundoff_coverage",) + rel.parts))
    assert found <= listed, sorted(found - listed)
