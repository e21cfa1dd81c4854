"""reports: the coverage runner, result records, HTML reports, the gate and the CLI."""
