"""engine: the one measurement engine, between the kernels and the reports.

Every run kind (the coverage run, model runs, ``bound``, ``measure`` and its quantizer
scheme) plans units of work over the same pieces: samples (samples.py), the reference
(evaluate.py, model.py, bound.py), the implementations under measurement
(implementations/: one registry of emulated, native, cuda, torch, torch_compile, each
family a module found by discovery), the row builder
(measuring.py, rows.py), orchestration (orchestrate.py, executors.py: checkpoint, resume,
local processes, Dask) and the results file (results.py).  ``reports`` reads what the
engine writes: summaries, HTML pages, the gate, the command line.
"""
