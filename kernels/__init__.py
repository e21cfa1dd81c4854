"""kernels: numba kernels keyed by operator, their contracts, device selection."""
