"""Numba CUDA kernels for minipaged's paged attention and cache operations.

They take the same arguments and return the same results as the pure-PyTorch reference in
:mod:`minipaged.attention`, over the same block tables, slot mappings and cache layout, so any
difference between the two paths is a kernel bug. Runs on a GPU, or on the CPU under Numba's
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
"""
