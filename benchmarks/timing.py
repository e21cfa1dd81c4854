"""Timing helper shared by the benchmark scripts."""

import time


def best_of(fn, repeat: int) -> float:
    """The fastest of ``repeat`` timed calls of ``fn``, in seconds (the least disturbed by
    other work on a shared machine)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
