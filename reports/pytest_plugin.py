"""The pytest plugin of roundoff-coverage (entry point ``pytest11: roundoff_coverage``).

It provides one fixture, ``assert_ulp_close``: the function reports.testing.assert_ulp_close
(a test asks for it by name instead of importing it)::

    def test_my_exp(assert_ulp_close):
        x = formats.round_to(np.linspace(-4, 4, 101), "bfloat16")
        assert_ulp_close(my_bf16_exp(x), [mpmath.exp(v) for v in x], "bfloat16", max_ulp=1)

pytest imports this module in every session of an environment where the package is
installed, so it imports nothing heavy itself: numpy, numba and the numerics stack load
only when a test requests the fixture.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def assert_ulp_close():
    """reports.testing.assert_ulp_close(actual, exact, fmt, max_ulp=0.5, msg=None)."""
    # start-up time: pytest loads this plugin in every session; numerics (numba) only here.
    from roundoff_coverage.reports.testing import assert_ulp_close as check
    return check
