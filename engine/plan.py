"""What every run kind shares: the selection protocol its plan is made from, and the one
outcome type a run returns.

A selection (runner.Selection for the coverage run, model_run.ModelSelection,
bound.BoundSelection, measure.Measurement, quantizers.QuantizerMeasurement) says what a run
covers; the results file's meta records it through this protocol (results.document): the
seed, the canonical command line, the description, and the words for its reference.  A
selection that can be resumed from a checkpoint also has a ``fingerprint`` (Resumable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["Selection", "Resumable", "Outcome"]


@runtime_checkable
class Selection(Protocol):
    """What a run covers, as the results file's meta records it."""

    seed: int
    reference_text: str           # how the exact values were obtained (meta.reference)

    def command(self) -> str:
        """The canonical command line (options that do not change the results left out)."""

    def describe(self) -> dict:
        """The selection as meta.selection records it."""


@runtime_checkable
class Resumable(Selection, Protocol):
    """A selection whose run checkpoints its units."""

    def fingerprint(self) -> str:
        """A hash of everything that decides the rows: a checkpoint must match it."""


@dataclass
class Outcome:
    """What a run did, whatever its kind.  ``total`` units planned (tasks, configurations,
    chunks), ``ran`` run now, ``resumed`` taken from a checkpoint; ``interrupted`` when it
    stopped early (Ctrl-C, SIGTERM) and wrote no results file.  ``rows``: the results'
    rows; ``wall`` seconds; ``out`` the results file.  ``phases``: seconds per phase summed
    over workers, ``peak_kib`` the largest resident set of a worker (the coverage run);
    ``summaries`` per unit (model runs: each configuration's summary); ``missing``: the
    units an interrupted run did not finish (their keys)."""

    rows: list = field(default_factory=list)
    total: int = 0
    ran: int = 0
    resumed: int = 0
    wall: float = 0.0
    interrupted: bool = False
    out: str = ""
    phases: dict = field(default_factory=dict)
    peak_kib: int = 0
    summaries: dict = field(default_factory=dict)
    missing: tuple = ()

    @property
    def row(self) -> dict | None:
        """The row of a run that measures one subject (``measure``, a quantizer); None
        when it wrote none (interrupted).  ValueError on a run of several rows."""
        if len(self.rows) > 1:
            raise ValueError(f"this run has {len(self.rows)} rows: read outcome.rows")
        return self.rows[0] if self.rows else None
