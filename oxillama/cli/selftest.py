"""`oxillama selftest`: this CPU's SIMD kernels against the scalar reference (oxillama/selftest.py)."""
from __future__ import annotations

from oxillama import selftest


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("selftest", help="check this CPU's SIMD kernels against the scalar reference",
                              description="Run every kernel of each SIMD tier this CPU supports against the "
                                          "scalar reference and print, per quant type, which tier's code "
                                          "runs and what was compared. Exit code 1 on a mismatch.")
    selftest.add_arguments(p)
    p.set_defaults(func=selftest.run)
