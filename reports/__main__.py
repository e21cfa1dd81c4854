"""``python -m roundoff_coverage.reports``: the roundoff-coverage command line."""

import sys

from .cli import main

sys.exit(main())
