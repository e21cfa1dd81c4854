"""The precision advisor on a model (issue: "The precision advisor"): ``roundoff-coverage
advise`` under a budget, and one ``roundoff-coverage model`` run of the same model in the
lowest candidate (forward and gradients, the same samples) timed in the same script; the
target is advice within 5x that single model run.  Prints the answer as a README table row:
budget, the modules kept, the cost against every module in binary32 and the two hand rules,
the largest error / budget on the samples and on the held-back samples.

    python benchmarks/bench_advise.py [--model block] [--budget out:1e-2,grad:5e-2]
                                      [--candidates binary32,bfloat16] [--unit module]
                                      [--samples 2] [--margin 0.9]

Models: ``block`` (benchmarks/bench_model.py's transformer block), ``mlp`` and ``cnn``
(tests/torch_models.py), ``gpt2`` (transformers, 2 layers of width 32: tests/zoo_models.py),
``advised`` (tests/torch_models.py: the model whose answer is known).  The factory the
commands capture is ``factory`` below; it reads the model from BENCH_ADVISE_MODEL."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("block", "mlp", "cnn", "gpt2", "advised")


def factory():
    """(model, example args) of BENCH_ADVISE_MODEL."""
    name = os.environ.get("BENCH_ADVISE_MODEL", "block")
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    if name == "block":
        import bench_model
        return bench_model.block()
    if name == "gpt2":
        import zoo_models
        return zoo_models.ZOO["gpt2"]()
    import torch_models
    if name == "advised":
        return torch_models.advised()
    if name in ("mlp", "cnn"):
        model, args = torch_models.models()[name]
        return model.eval(), args
    raise SystemExit(f"bench_advise: unknown model {name!r}; one of {', '.join(MODELS)}")


def _timed(cmd, env):
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        sys.exit(f"{cmd[3]} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="block", choices=MODELS)
    ap.add_argument("--budget", default="out:1e-2,grad:5e-2")
    ap.add_argument("--candidates", default="binary32,bfloat16")
    ap.add_argument("--unit", default="module")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--margin", default="0.9")
    args = ap.parse_args()
    env = dict(os.environ, BENCH_ADVISE_MODEL=args.model)
    target = f"{os.path.abspath(__file__)}:factory"
    lowest = args.candidates.split(",")[-1]
    with tempfile.TemporaryDirectory() as tmp:
        advice = os.path.join(tmp, "advice.json")
        a = [sys.executable, "-m", "roundoff_coverage", "advise", target, "--budget",
             args.budget, "--candidates", args.candidates, "--unit", args.unit,
             "--samples", str(args.samples), "--margin", args.margin, "--out", advice,
             "--quiet"]
        m = [sys.executable, "-m", "roundoff_coverage", "model", target, "--formats", lowest,
             "--routes", "forward,gradient", "--samples", str(args.samples), "--jobs", "1",
             "--out", os.path.join(tmp, "model.json"), "--quiet"]
        advise_s = _timed(a, env)
        model_s = _timed(m, env)
        with open(advice) as fh:
            doc = json.load(fh)
    cost = doc["cost"]
    front = {p["source"]: p for p in doc["front"]}
    rules = "; ".join(f"{r['rule'].split(' in ')[0]}: {r['cost'] / cost['all_highest']:.2f}"
                      f"{'' if r['met'] else ' (misses)'}" for r in doc["rules"])
    held = max((v["held_back"] / v["budget"] for v in doc["confirmed"].values()
                if v["budget"]), default=0.0)
    print(f"advise {args.model}: {advise_s:.1f} s; one model run in {lowest}: {model_s:.1f} s; "
          f"ratio {advise_s / model_s:.2f} (target <= 5); {doc['runs']} measured runs")
    print(f"| {args.model} | `{args.budget}` | {len(doc['units'])} | "
          f"{', '.join(doc['keep']) or '(none)'} | "
          f"{cost['assignment'] / cost['all_highest']:.2f} | "
          f"{cost['all_lowest'] / cost['all_highest']:.2f}"
          f"{'' if front[f'all {lowest}']['usage'] <= 1 else ' (misses)'} | {rules} | "
          f"{front['chosen']['usage']:.2f} / {held:.2f} | {'yes' if doc['met'] else 'no'} |")


if __name__ == "__main__":
    main()
