"""How tensors and arrays cross threads and processes: shared memory and pinning.

Pure functions and resource owners only; the threads that drive them live in `engine/`.
"""
