"""The statistics of a measurement, merged from its chunk summaries as they arrive.

``measure`` cuts its inputs into chunks (engine/measure.py ``run_chunk``); each chunk's
summary holds counts, histograms, the sum of |error|, extremes, the exact worst case among
the inputs it resolved, and the candidates for the largest error.  A ``Tally`` folds those
summaries one by one, in any order, to the same result:

- counts and histograms are integers; the sum of |error| is kept exactly (a Fraction of the
  chunks' binary64 sums) and rounded once when read, so the mean does not depend on the
  order in which the workers finished;
- a tie for the worst case goes to the lowest chunk, a tie among candidates to the lowest
  chunk and position;
- candidates that can no longer hold the maximum (their upper bound is below the largest
  lower bound seen) are dropped as soon as that is known, and at most ``CANDIDATES_KEPT``
  are kept: dropping one that could still hold it makes the maximum inexact, exactly as a
  chunk's own dropped candidates do (``exact``).

So the memory of a measurement does not grow with its number of chunks.  Chunk summaries
are also what the checkpoint stores, one line each; ``compact`` writes the 1/1024-ulp
histogram sparsely there (a few dozen of its 4097 bins are non-zero).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from roundoff_coverage.numerics import metrics, screen

CANDIDATES_KEPT = 256


def compact(summ: dict) -> dict:
    """``summ`` with its ``fine`` histogram as [[bin, count], ...] of the non-zero bins."""
    if "fine" not in summ:
        return summ
    fine = summ["fine"]
    out = {k: v for k, v in summ.items() if k != "fine"}
    out["fine_sparse"] = [[i, int(c)] for i, c in enumerate(fine) if c]
    return out


def _fine(summ: dict) -> np.ndarray:
    fine = np.zeros(screen.FINE_BINS + 1, dtype=np.int64)
    if "fine_sparse" in summ:
        for i, c in summ["fine_sparse"]:
            fine[i] += c
    else:
        fine += np.asarray(summ["fine"], dtype=np.int64)
    return fine


class Tally:
    """The merged statistics of the chunks added so far (see the module docstring)."""

    def __init__(self):
        self.chunks = 0
        self.n = self.measured = self.nan = self.not_cr = self.resolved = 0
        self.sum_abs = Fraction(0)
        self.sum_inf = 0.0                # inf or NaN once a chunk's sum is not finite
        self.counts = np.zeros(len(metrics.CLASSES), dtype=np.int64)
        self.hist = np.zeros(len(metrics.HIST_EDGES), dtype=np.int64)
        self.fine = np.zeros(screen.FINE_BINS + 1, dtype=np.int64)
        self.min, self.max, self.max_rel = math.inf, -math.inf, 0.0
        self.lower = -math.inf            # the largest lower bound of an |error|
        self.dropped = -math.inf          # the largest upper bound of a dropped candidate
        self.worst, self._worst_chunk = None, -1
        self.cands = []                   # (-upper, chunk, position, candidate)
        self.failed = {}                  # chunk -> one-line message

    def add(self, j: int, summ: dict) -> None:
        """Fold the summary of chunk ``j`` (or ``{"error": message}`` for a failed chunk)."""
        self.chunks += 1
        if "error" in summ:
            self.failed[j] = summ["error"]
            return
        for k in ("n", "measured", "nan", "not_cr", "resolved"):
            setattr(self, k, getattr(self, k) + int(summ.get(k, 0)))
        if math.isfinite(summ["sum_abs"]):
            self.sum_abs += Fraction(summ["sum_abs"])
        else:
            self.sum_inf += summ["sum_abs"]
        self.counts += np.asarray(summ["counts"], dtype=np.int64)
        self.hist += np.asarray(summ["hist"], dtype=np.int64)
        self.fine += _fine(summ)
        if summ["measured"]:
            self.min, self.max = min(self.min, summ["min"]), max(self.max, summ["max"])
        self.max_rel = max(self.max_rel, summ["max_rel"])
        if summ["dropped"] is not None:
            self.dropped = max(self.dropped, summ["dropped"])
        w = summ["worst"]
        if w is not None and (self.worst is None or abs(w["ulp"]) > abs(self.worst["ulp"]) or
                              (abs(w["ulp"]) == abs(self.worst["ulp"])
                               and j < self._worst_chunk)):
            self.worst, self._worst_chunk = w, j
        self.lower = max(self.lower, summ["lower"])
        self.cands += [(-c[-1], j, i, c) for i, c in enumerate(summ["cands"])]
        self._prune()

    def _prune(self):
        keep = sorted(c for c in self.cands if -c[0] >= self.lower)
        for c in keep[CANDIDATES_KEPT:]:
            self.dropped = max(self.dropped, -c[0])
        self.cands = keep[:CANDIDATES_KEPT]

    def candidates(self) -> list:
        """The candidates that may hold the largest error, largest upper bound first."""
        return [c[-1] for c in sorted(self.cands) if -c[0] >= self.lower]

    @property
    def exact(self) -> bool:
        """Whether every input that may hold the largest error was kept to be resolved."""
        return self.dropped < self.lower

    @property
    def mean(self) -> float | None:
        if not self.measured:
            return None
        return float(self.sum_abs / self.measured) + self.sum_inf

    def p99(self, cap: float | None = None) -> float | None:
        """The 99th percentile of |error| to the histograms' resolution (the upper edge of
        its 1/1024-ulp step below 4 ulps, else of its binade), at most ``cap`` (the exact
        maximum: a percentile never exceeds the maximum)."""
        if not self.measured:
            return None
        rank = math.ceil(0.99 * self.measured)
        k = int(np.searchsorted(np.cumsum(self.fine), rank))
        if k < screen.FINE_BINS:
            p = (k + 1) / screen.FINE_STEP
        else:
            k = int(np.searchsorted(np.cumsum(self.hist), rank))
            edges = metrics.HIST_EDGES
            p = float(edges[k + 1]) if k + 1 < len(edges) else math.inf
        return p if cap is None else min(p, cap)
