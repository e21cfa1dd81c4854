"""``roundoff-coverage ops [NAME] [--certs NAME]``: the operator table, one operator in
detail, or the certificates of one operator."""

from __future__ import annotations

from roundoff_coverage import routes
from roundoff_coverage.kernels import table
from roundoff_coverage.routes.vocabulary import VOCABULARY

from .common import EXIT_OK, UsageError, text_table


def add(sub, shared):
    p = sub.add_parser("ops", help="list the operator table, or show one operator",
                       description="Without NAME: every registered operator with its family, "
                                   "the capability its rule needs, its ports at the default "
                                   "attributes, whether a CUDA kernel serves it (computed "
                                   "from the kernel table), its certificate kinds and its "
                                   "bound propagations (computed from the arms of "
                                   "routes.bounds: checker, IBP, CROWN; enclosure where an "
                                   "enclosure certificate is registered).  With NAME: that "
                                   "operator in detail.  With --certs NAME: its certificates "
                                   "and the checks that back them.")
    p.add_argument("name", nargs="?", metavar="NAME", help="an operator name (spec spelling)")
    p.add_argument("--certs", metavar="NAME", help="list the certificates of operator NAME")
    p.set_defaults(handler=cmd_ops)


def _operator(name):
    """The declaration of ``name``; UsageError (with close matches) for an unknown one."""
    try:
        return routes.declaration(name)
    except routes.RouteError as exc:
        raise UsageError(str(exc)) from None


def cmd_ops(args) -> int:
    """``ops [NAME] [--certs NAME]``: the operator table, one operator, or its certificates."""
    if args.certs is not None:
        decl = _operator(args.certs)
        certs = routes.certificates(decl.name)
        print(f"{decl.name}: " + ("no certificates" if not certs else f"{len(certs)} "
                                  f"certificate{'s' if len(certs) > 1 else ''}"))
        for c in certs:
            # The route a certificate concerns: gradient (the pullback), tangent (the forward
            # mode) or forward (the forward map), then the inputs it concerns.
            print(f"  {c.kind} ({c.route}){c.where}: {c.statement}")
            for test in c.evidence:
                print(f"    evidence: {test}")
        return EXIT_OK
    if args.name is not None:
        print("\n".join(_op_detail(_operator(args.name))))
        return EXIT_OK
    rows = []
    computed = _computed()
    for name in routes.names():
        o = routes.op(name)
        kinds = sorted({c.kind for c in routes.certificates(name)})
        row = computed.get(name)
        rows.append([name, o.family, _need(o), _ports(o.input_names, o.inputs),
                     _ports(o.output_names, o.outputs), row.cuda_entry if row else "-",
                     ",".join(kinds) or "none", _bounds_cell(row)])
    print(text_table(("name", "family", "needs", "inputs", "outputs", "cuda", "certificates",
                      "bounds"), rows))
    print(f"\n{len(rows)} of the spec's {len(VOCABULARY)} operators are registered; ports at "
          f"the default attributes; cuda: a kernel at every attribute, at some, or none "
          f"(computed from the kernel table); bounds: the propagations with an arm "
          f"(checker, IBP, CROWN) and enclosure certificates (computed from routes.bounds)")
    return EXIT_OK


def _computed() -> dict:
    """{operator: its row of the vocabulary computed from the code} (kernels.table.vocabulary:
    the CUDA column from the kernel table, the Bounds column from routes.bounds's arms)."""
    return {r.operator: r for r in table.vocabulary()}


def _bounds_cell(row) -> str:
    """The Bounds cell as one word (``checker,IBP,CROWN;enclosure``, ``IBP``, ``none``)."""
    if row is None:
        return "-"
    return row.bound_propagations.replace(", ", ",").replace("; ", ";")


def _need(o) -> str:
    need = o.need
    dependent = callable(o.decl.needs)
    return (need or "-") + (" (at these attributes)" if dependent else "")


def _ports(names, ports) -> str:
    return ",".join(f"{n}:{p}" for n, p in zip(names, ports)) or "-"


def _op_detail(decl) -> list[str]:
    """Lines describing one operator at its default attributes."""
    o = routes.op(decl.name)
    row = _computed().get(decl.name)
    lines = [f"{decl.name}: family {decl.family}; rule needs {_need(o)}; cuda "
             f"{row.cuda_entry if row else '-'}; bounds {_bounds_cell(row)}", "attributes:"]
    lines += [f"  {at.name}: {at.wire}, default {at.to_field(at.default)[1]!r}"
              + (f" ({at.doc})" if at.doc else "") for at in decl.attributes] or ["  none"]
    lines += ["ports at the default attributes:",
              f"  inputs:  {_ports(o.input_names, o.inputs)}",
              f"  outputs: {_ports(o.output_names, o.outputs)}", "notes:"]
    lines += [f"  - {note}" for note in decl.notes] or ["  none"]
    kinds = [c.kind for c in routes.certificates(decl.name)]
    lines.append("certificates: " + (", ".join(kinds) if kinds else "none")
                 + f" (roundoff-coverage ops --certs {decl.name})")
    return lines
