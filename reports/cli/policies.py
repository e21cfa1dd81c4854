"""``roundoff-coverage policies [NAME]``: the accumulation policies -- the presets, the
parametrized ones, and the tensor-core presets (``tc:GPU``) with every datapath's
parameters and their sources; with NAME, one policy explained."""

from __future__ import annotations

from roundoff_coverage.numerics import policy, tensor_cores

from .common import EXIT_OK, UsageError, text_table


def add(sub, shared):
    p = sub.add_parser("policies", help="list the accumulation policies and tensor cores",
                       description="Without NAME: the policy presets, the parametrized "
                                   "policies, and a table of the tensor-core presets (tc:GPU): "
                                   "each input format's group size, extra alignment bits, "
                                   "final rounding, outputs and the unit's exponent floor.  "
                                   "With NAME: that policy's parts, or a tensor core's "
                                   "datapaths and sources.")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="a policy (strict, fp32_accumulate, fixed_point:14, tc:h100...)")
    p.set_defaults(handler=cmd_policies)


def _datapath_rows(core):
    rows = []
    for fin, p in core.paths.items():
        rows.append([f"tc:{core.name}", fin, str(p.group),
                     "none (exact)" if p.extra is None else f"{p.extra:+d}", p.rounding,
                     "binary32, binary16" if p.binary16 else "binary32",
                     _floor(core.floor) + ("" if p.floor16 is None else
                                           f" (binary16 outputs: {p.floor16})")])
    return rows


def _floor(floor) -> str:
    return "none" if floor is None else str(floor)


_COLUMNS = ("policy", "input", "group", "extra bits", "rounding (binary32)", "outputs",
            "exponent floor")


def cmd_policies(args) -> int:
    """``policies [NAME]``: the table, or one policy; exit 0 (2 for an unknown name)."""
    if args.name is None:
        print("presets: " + ", ".join(policy.PRESETS))
        print("parametrized: " + ", ".join(policy.PARAMETRIZED))
        print("\ntensor cores (tc:GPU; binary16 outputs round to nearest even, binary32 "
              "operands are read as tf32):")
        rows = [r for core in tensor_cores.PRESETS.values() for r in _datapath_rows(core)]
        print(text_table(_COLUMNS, rows, numeric={2, 3}))
        sources = sorted({s for core in tensor_cores.PRESETS.values()
                          for s in core.source.split("; ")})
        print("\nsources: " + "; ".join(sources))
        return EXIT_OK
    try:
        p = policy.preset(args.name, "bfloat16")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if p.tensor_core is not None:
        core = tensor_cores.tensor_core(p.tensor_core)
        print(f"{p.label}: the products (matmul, linear, convolutions, attention) as the "
              f"{core.name} tensor cores compute them; the rest accumulates in binary32")
        print(text_table(_COLUMNS, _datapath_rows(core), numeric={2, 3}))
        print(f"subnormal inputs {'kept' if core.subnormal_inputs else 'flushed'}, outputs "
              f"{'kept' if core.subnormal_outputs else 'flushed'}; source: {core.source}")
        return EXIT_OK
    parts = ["storage: the run's format", f"accumulate: {p.accumulate.label}",
             f"order: {p.order}", f"fma: {p.fma}"]
    if p.fixed_point is not None:
        parts.append(f"fixed point: {p.fixed_point} bits in blocks of {p.block}")
    if p.inner is not None:
        parts.append(f"two-level: runs of {p.promote} in {p.inner.label}")
    print(f"{p.label}: " + "; ".join(parts))
    return EXIT_OK
