"""What a results file records of its operators, so that reports are functions of the file.

At run time ``record(names)`` takes from the operator table what the HTML report and the
gate need to render a coverage run's rows: each operator's family and place in the spec's
order, its notes and its certificates (kind, route, inputs, statement, evidence, bound),
and the families' order.  ``results.document`` writes it as the document's ``operators``
object.  ``Table(doc)`` reads it back; a file written before it was recorded (such as an
old baseline) falls back to the table of the installed version, the one place a report
reads the registry, and says so (``Table.recorded``).
"""

from __future__ import annotations


def record(names) -> dict:
    """The ``operators`` object of a results file for the operators ``names``."""
    # start-up time: a results file is read (reports.load) without the operator table.
    from roundoff_coverage import routes
    order = {n: i for i, n in enumerate(routes.names())}
    entries = {}
    for name in names:
        decl = routes.declaration(name)
        entries[name] = {
            "family": decl.family, "order": order[name], "notes": list(decl.notes),
            "certificates": [{"kind": c.kind, "route": getattr(c, "route", None),
                              "inputs": None if c.inputs is None else list(c.inputs),
                              "statement": c.statement, "evidence": list(c.evidence),
                              "bound": c.bound} for c in routes.certificates(name)]}
    return {"families": list(routes.registry.FAMILIES), "entries": entries}


class Table:
    """The operators of a results document (``doc["operators"]``), or of the installed
    operator table for a document that has none."""

    def __init__(self, doc):
        got = doc.get("operators") if isinstance(doc, dict) else None
        self.recorded = isinstance(got, dict) and isinstance(got.get("entries"), dict)
        if self.recorded:
            fams = got.get("families")
            self.families = [f for f in fams if isinstance(f, str)] \
                if isinstance(fams, list) else []
            self.entries = {k: v for k, v in got["entries"].items() if isinstance(v, dict)}
        else:
            self.families, self.entries = None, {}

    def _installed(self, name):
        try:
            return record([name])["entries"][name]
        except Exception:                                    # noqa: BLE001 (unknown op)
            return None

    def entry(self, name) -> dict | None:
        """The operator's record: family, order, notes, certificates (None: unknown)."""
        if self.recorded:
            return self.entries.get(name)
        if name not in self.entries:
            self.entries[name] = self._installed(name)
        return self.entries[name]

    def family(self, name) -> str | None:
        e = self.entry(name)
        return e.get("family") if e and isinstance(e.get("family"), str) else None

    def order(self, name) -> int | None:
        e = self.entry(name)
        v = e.get("order") if e else None
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def family_order(self) -> list:
        if self.families is None:
            from roundoff_coverage import routes    # start-up time (record)
            self.families = list(routes.registry.FAMILIES)
        return self.families
