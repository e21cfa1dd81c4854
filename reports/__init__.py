"""reports: the coverage runner, result records, HTML reports, the gate and the CLI.

``load(path) -> pandas.DataFrame``: a results file (roundoff-coverage/1), one row per
measured route (reports/results.py).
``reproduce(results, row) -> dict``: the inputs of a row's worst case, regenerated from the
seed (reports/regenerate.py), for inputs too large to store in the file.
"""


def load(path):
    """The results file at ``path`` as a pandas DataFrame (see reports.results.load)."""
    from .results import load as _load
    return _load(path)


def reproduce(results, row):
    """The worst case of ``row`` regenerated (see reports.regenerate.reproduce)."""
    from .regenerate import reproduce as _reproduce
    return _reproduce(results, row)


__all__ = ["load", "reproduce"]
