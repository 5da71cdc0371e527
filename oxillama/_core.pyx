# cython: language_level=3
"""oxillama's native core: the kernel tables, quant kernels, row ops and the fused forward pass.

One extension module so that every part shares one dispatch table; each area lives in its own
include file (`_quant.pxi`, `_forward.pxi`). Public APIs are the pure-Python modules on top.
"""
import os

import numpy as np

from oxillama._csrc cimport *

oxl_dispatch_init(os.environ.get("OXILLAMA_DISABLE_CPU_FEATURES", "").encode())

include "_dispatch.pxi"
include "_quant.pxi"
include "_ops.pxi"
include "_forward.pxi"
include "_selftest.pxi"
