"""Models at real sizes (issue: "Models at scale"): ``roundoff-coverage model`` on a real
architecture built by its library, forward values and every gradient in bfloat16 with
binary32 accumulation, local and propagated errors per node, one sample; its wall time and
peak memory (the command's process and its workers, getrusage of the children), and the
ratio to torch's own float32 forward + backward of the same model measured in the same run.

    python benchmarks/bench_model_scale.py [--model resnet18] [--image 32] [--layers 12]
                                           [--vocab 50257] [--jobs 1] [--spill-share N]
                                           [--out F]

Models (the tests' zoo builders, tests/zoo_models.py, at the size given): ``resnet18``
(torchvision, 10 classes), ``resnet10t`` (timm), ``mobilenet_v3_small`` (torchvision),
``gpt2`` (transformers, 2 layers of width 32), ``gpt2-small`` (transformers' GPT-2 small
shape: width 768, 12 heads, vocabulary 50,257, one sequence of 128 words; ``--layers``, 12
by default; ``--vocab`` a smaller vocabulary, whose output embedding is most of a
one-layer model's elements).  ``--image`` sets the side of the one square
image of the vision models (the issue's target is ResNet-18 at 224).  The factory the
command captures is ``factory`` below; it reads the model and size from the environment
(BENCH_MODEL, BENCH_IMAGE, BENCH_LAYERS, BENCH_VOCAB) that this script sets.
``--spill-share N``: the run spills its traces past 1/N of the available memory
(engine/spill.py SPILL_SHARE, 4) -- a large N measures here what a machine with less
memory would do (one process: ``--jobs 1``)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VISION = {"resnet18": "resnet18", "resnet10t": "timm_resnet",
          "mobilenet_v3_small": "mobilenet_v3_small"}


def factory():
    """(model, example args) of BENCH_MODEL at BENCH_IMAGE, built by the zoo's builders."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import zoo_models
    name, size = os.environ.get("BENCH_MODEL", "resnet18"), int(os.environ.get("BENCH_IMAGE",
                                                                                 "32"))
    if name == "gpt2":
        return zoo_models.ZOO["gpt2"]()
    if name == "gpt2-small":
        return _gpt2_small(zoo_models.libraries()["transformers"],
                           int(os.environ.get("BENCH_LAYERS", "12")),
                           int(os.environ.get("BENCH_VOCAB", "50257")))
    if name not in VISION:
        raise SystemExit(f"bench_model_scale: unknown model {name!r}; one of "
                         f"{', '.join(list(VISION) + ['gpt2', 'gpt2-small'])}")
    key = {"timm_resnet": "timm-resnet"}.get(VISION[name], VISION[name])
    model, _ = zoo_models.ZOO[key]()
    return model, (zoo_models.image(size),)


def _gpt2_small(transformers, layers, vocab):
    """(model, (ids,)): transformers' GPT2LMHeadModel shaped as GPT-2 small (width 768, 12
    heads, a vocabulary of ``vocab`` words: 50,257 is GPT-2's) with ``layers`` layers (12:
    GPT-2 small's), on one sequence of 128 random words; random weights (the
    configuration's initialisation, seeded).  ``transformers``: the module as the zoo
    imports it (zoo_models.libraries: torchvision's PyPI wheel beside torch's CPU build)."""
    import torch
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, n_positions=1024,
                                     vocab_size=vocab, bos_token_id=vocab - 1,
                                     eos_token_id=vocab - 1)
    ids = torch.randint(0, vocab, (1, 128), generator=torch.Generator().manual_seed(1))
    return transformers.GPT2LMHeadModel(config).eval(), (ids,)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18",
                    choices=list(VISION) + ["gpt2", "gpt2-small"])
    ap.add_argument("--image", type=int, default=32)
    ap.add_argument("--layers", type=int, default=12, help="gpt2-small's layers")
    ap.add_argument("--vocab", type=int, default=50257, help="gpt2-small's vocabulary")
    ap.add_argument("--routes", default="forward,gradient")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--spill-share", type=int, help="spill the traces past 1/N of the "
                    "available memory (default: the engine's, 4)")
    ap.add_argument("--out", help="keep the results file here (default: a temporary one)")
    args = ap.parse_args()
    if args.layers < 1 or args.image < 1 or args.vocab < 2:
        ap.error(f"--layers and --image must be >= 1, --vocab >= 2 (got {args.layers}, "
                 f"{args.image}, {args.vocab})")
    if args.spill_share is not None and (args.spill_share < 1 or args.jobs != 1):
        ap.error(f"--spill-share must be >= 1 and with --jobs 1 (got {args.spill_share}, "
                 f"--jobs {args.jobs})")
    env = dict(os.environ, BENCH_MODEL=args.model, BENCH_IMAGE=str(args.image),
               BENCH_LAYERS=str(args.layers), BENCH_VOCAB=str(args.vocab))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.abspath(args.out) if args.out else os.path.join(tmp, "model.json")
        # The command as `python -m roundoff_coverage`, with the spill share set first.
        start = ["-m", "roundoff_coverage"] if args.spill_share is None else [
            "-c", f"import sys; import roundoff_coverage.engine.spill as s; "
                  f"s.SPILL_SHARE = {args.spill_share}; "
                  f"from roundoff_coverage.reports.cli import main; sys.exit(main())"]
        cmd = [sys.executable, *start, "model",
               f"{os.path.abspath(__file__)}:factory", "--formats", "bfloat16",
               "--policies", "fp32_accumulate", "--routes", args.routes, "--samples", "1",
               "--jobs", str(args.jobs), "--out", out]
        t0 = time.perf_counter()
        # Run outside the checkout: ``-m`` puts the working directory first on sys.path,
        # where this project's top-level folders (kernels/...) would shadow libraries'
        # modules of the same name (transformers looks for a ``kernels`` package).
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"model run failed ({done.returncode}): {done.stderr.strip()[-800:]}")
        with open(out) as fh:
            doc = json.load(fh)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20    # KiB -> GiB
    print(f"{args.model} at {args.image}: {len(doc['rows'])} rows, {wall:.1f} s wall, peak "
          f"{peak:.2f} GiB (largest process); command: roundoff-coverage "
          f"{' '.join(cmd[1 + len(start):])}")
    whole = [r for r in doc["rows"] if (r["node"] or "").startswith(("output:", "input:"))
             and r["status"] == "ok" and r["bits"] is not None]
    for r in whole:
        r["bits"] = float(r["bits"])             # "inf" where a tensor is exact
    for route in ("forward", "gradient"):
        worst = min((r for r in whole if r["route"] == route), key=lambda r: r["bits"],
                    default=None)
        if worst is not None:
            print(f"worst {route} tensor: {worst['node']} {worst['bits']:.2f} bits")
    for key, summary in doc["model"]["summary"].items():
        for route, top in summary.get("largest_local", {}).items():
            if top:
                print(f"largest local error ({route}): {top[0]['node']} ({top[0]['module']}) "
                      f"{float(top[0]['bits']):.2f} bits")
    os.environ.update(env)
    import torch
    model, inputs = factory()
    params = [p for p in model.parameters() if p.requires_grad]
    out = model(*inputs)                                                 # warm up
    t0 = time.perf_counter()
    for _ in range(5):
        out = model(*inputs)
        logits = out if isinstance(out, torch.Tensor) else out.logits
        torch.autograd.grad(logits.sum(), params)
    torch_s = (time.perf_counter() - t0) / 5
    print(f"torch float32 forward + backward: {torch_s * 1e3:.1f} ms; model run / torch = "
          f"{wall / torch_s:.0f}x")


if __name__ == "__main__":
    main()
