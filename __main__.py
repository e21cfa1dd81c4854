"""``python -m roundoff_coverage``: the roundoff-coverage command line."""

import sys

from roundoff_coverage.reports.cli import main

sys.exit(main())
