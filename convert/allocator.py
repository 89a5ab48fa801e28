"""glibc malloc settings for a conversion: large tensor temporaries reused from the heap, not fetched afresh.

A DPDFD release runs the teacher on thousands of chunks, each allocating and freeing the same large activations. With
glibc's defaults the freed memory goes back to the kernel (trimmed, or unmapped above the mmap threshold) and every
chunk faults its pages in again: measured at 200 000 rows of 28×28 on a wide CNN teacher (2 threads, 2 CPU cores),
2 000 rows/s with 6× the system time, against 3 000 rows/s with the heap kept (benchmarks/RESULTS.md, table 15).
Keeping freed memory costs nothing extra at the peak (the peak is what a release needs at once: ~2 GB at 3 M rows).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("dpconvert")

# mallopt parameters (glibc's malloc.h) and the values a conversion sets, each skipped where the user set its
# MALLOC_*_ environment variable (glibc reads those at start-up: the user's choice wins)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = (
    (M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 2**34),  # never give freed heap memory back mid-run
    (M_TOP_PAD, "MALLOC_TOP_PAD_", 2**30),  # grow the heap in large steps, so large requests fit the free top
    (M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 2**25),  # requests up to 32 MB (glibc's maximum) from the heap
)
_done = False


def keep_freed_memory() -> bool:
    """Apply SETTINGS once per process on glibc; a no-op elsewhere (macOS, musl, Windows). True when applied."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    for param, env, value in SETTINGS:
        if env not in os.environ and not mallopt(param, min(value, 2**31 - 1)):
            log.debug("mallopt(%d) refused %d", param, value)
    _done = True
    return True
