"""Imported before numpy: its BLAS (OpenBLAS) to one thread.

OpenBLAS spins a thread per core in every matrix product; on a shared machine those threads
fight the other processes and the local embedding model (memory_sql.demo.embeddings_server)
runs many times slower (25x measured at load average 15 on 2 cores)."""

from __future__ import annotations

import os

for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")
