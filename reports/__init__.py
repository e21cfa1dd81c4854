"""reports: the coverage runner, result records, HTML reports, the gate and the CLI.

``load(path) -> pandas.DataFrame``: a results file (roundoff-coverage/1), one row per
measured route (reports/results.py).
"""


def load(path):
    """The results file at ``path`` as a pandas DataFrame (see reports.results.load)."""
    from .results import load as _load
    return _load(path)


__all__ = ["load"]
