"""reports: functions of results files: loading, summaries, HTML reports, the gate, the CLI.

``load(path) -> pandas.DataFrame``: a results file (roundoff-coverage/1), one row per
measured route (engine/results.py).
``reproduce(results, row) -> dict``: the inputs of a row's worst case, regenerated from the
seed (reports/regenerate.py), for inputs too large to store in the file.
``assert_ulp_close(actual, exact, fmt, max_ulp=0.5)``: a test assertion on ulp errors in any
format (reports/testing.py; also the fixture of the pytest plugin reports/pytest_plugin.py).
"""


def load(path):
    """The results file at ``path`` as a pandas DataFrame (see engine.results.load)."""
    from ..engine.results import load as _load  # start-up time: the pytest plugin loads reports
    return _load(path)


def reproduce(results, row):
    """The worst case of ``row`` regenerated (see reports.regenerate.reproduce)."""
    from .regenerate import reproduce as _reproduce  # start-up time: regenerate loads numba
    return _reproduce(results, row)


def __getattr__(name):
    if name == "assert_ulp_close":
        # assert_ulp_close loads numerics (numba) on first use, not when reports is imported.
        from .testing import assert_ulp_close  # start-up time
        return assert_ulp_close
    raise AttributeError(f"module 'reports' has no attribute {name!r}")


__all__ = ["load", "reproduce", "assert_ulp_close"]
