"""Check this CPU's SIMD kernels against the scalar reference: `oxillama selftest` or
`python -m oxillama.selftest`.

What a user on a new CPU runs before trusting it. Every tier this machine can run (see
`oxillama.system_info()`) has each kernel of its table compared with the scalar tier's
(csrc/selftest.c): dequantize and quantize bit for bit; vec_dot, gemm, matvec and matmul within
a relative tolerance of sum |w_i a_i|; row and attention ops elementwise; on random blocks, random
quant bytes, edge lengths and odd row counts. CI runs the same checks on the AVX-512 and ARM tiers
(tests/native/). Takes about a second per tier; exit code 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

from oxillama.errors import InvalidArgumentError

DEFAULT_SEED = 19


@dataclass(frozen=True)
class KernelCheck:
    """One kernel of one tier, compared with the scalar tier's."""
    tier: str       # the table checked
    subject: str    # a quant type name, or "ops"
    kernel: str     # to_float, from_float, vec_dot, gemm, matvec, matmul, or an op name
    owner: str      # tier whose code it is ("scalar": the reference itself, nothing compared)
    cases: int
    failures: int
    worst: float    # largest error / tolerance over the cases (<= 1 passes)
    detail: str     # the first failure

    @property
    def ok(self) -> bool:
        return self.failures == 0


@dataclass
class SelftestReport:
    tiers: list[str]
    active_tier: str
    checks: list[KernelCheck] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[KernelCheck]:
        return [c for c in self.checks if not c.ok]

    @property
    def cases(self) -> int:
        return sum(c.cases for c in self.checks)


def run_selftest(tiers: list[str] | None = None, *, thorough: bool = False, seed: int = DEFAULT_SEED) -> SelftestReport:
    """Check `tiers` (default: every usable tier but scalar) against the scalar tier."""
    from oxillama import _core
    usable = _core.usable_tiers()
    if tiers is None:
        tiers = [t for t in usable if t != "scalar"]
    for t in tiers:
        if t not in usable:
            raise InvalidArgumentError(f"tier {t!r} is not usable on this CPU (usable: {', '.join(usable)})")
    report = SelftestReport(tiers=list(tiers), active_tier=_core.active_tier())
    start = time.perf_counter()
    for t in tiers:
        report.checks += [KernelCheck(t, *row) for row in _core.check_tier(t, thorough, seed)]
    report.seconds = time.perf_counter() - start
    return report


def _kernel_summary(checks: list[KernelCheck]) -> str:
    compared = [f"{c.kernel} {c.owner} ({c.cases})" for c in checks if c.cases]
    same = [c.kernel for c in checks if not c.cases and c.owner != "none"]
    parts = []
    if compared:
        parts.append(", ".join(compared))
    if same:
        parts.append("scalar: " + ", ".join(same))
    return "; ".join(parts)


def format_report(report: SelftestReport) -> str:
    """Per tier, per quant type: which tier's code each kernel is and how many cases were compared."""
    from oxillama import _core
    lines = [f"CPU features: {' '.join(_core.cpu_features()) or 'none detected'}",
             f"usable tiers: {', '.join(_core.usable_tiers())}; active: {report.active_tier}"]
    if not report.tiers:
        lines.append("only the scalar tier runs here: nothing to compare it with")
    for tier in report.tiers:
        checks = [c for c in report.checks if c.tier == tier]
        lines.append(f"\n{tier} against scalar (kernel, tier whose code it is, cases compared):")
        subjects = list(dict.fromkeys(c.subject for c in checks))
        width = max(len(s) for s in subjects)
        for subject in subjects:
            mine = [c for c in checks if c.subject == subject]
            worst = max(c.worst for c in mine)
            status = "ok" if all(c.ok for c in mine) else "MISMATCH"
            lines.append(f"  {subject:<{width}}  {status:<8} worst {worst:5.3f}  {_kernel_summary(mine)}")
        for c in checks:
            if not c.ok:
                lines.append(f"  MISMATCH {c.subject} {c.kernel} ({c.owner} code): {c.failures} of {c.cases} "
                             f"cases; first: {c.detail}")
    n_bad = len(report.failures)
    verdict = "PASS" if report.ok else (f"FAIL: {n_bad} kernel{' differs' if n_bad == 1 else 's differ'} from the "
                                        "scalar tier")
    worst = max((c.worst for c in report.checks), default=0.0)
    lines.append(f"\n{verdict} ({report.cases} comparisons in {report.seconds:.2f} s; largest error "
                 f"{worst:.3f} of its tolerance)")
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tier", action="append", metavar="TIER",
                   help="check only this tier (repeatable; default: every usable tier but scalar)")
    p.add_argument("--thorough", action="store_true", help="more lengths and rounds (a few seconds per tier)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the random data")


def run(args: argparse.Namespace) -> int:
    report = run_selftest(args.tier, thorough=args.thorough, seed=args.seed)
    sys.stdout.write(format_report(report))
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m oxillama.selftest [options]`: the same as `oxillama selftest [options]`."""
    from oxillama.cli import main as cli_main
    return cli_main(["selftest", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
