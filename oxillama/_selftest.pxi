# Kernel self-check (csrc/selftest.c): a tier's kernels against the scalar tier's.

cdef void _collect_check(void *ctx, const oxl_check_result *r) noexcept with gil:
    (<list>ctx).append((r.subject.decode(), r.kernel.decode(), r.owner.decode(), r.cases, r.failures, r.worst,
                        r.detail.decode(errors="replace")))


def check_tier(tier, bint thorough=False, uint64_t seed=19):
    """Every kernel of `tier` against the scalar tier: a list of (subject, kernel, owner tier, cases,
    failures, worst error/tolerance, first failure) per kernel; subject is a type name or "ops"."""
    cdef int t = tier_index(tier)
    cdef list out = []
    if oxl_tier_table(t) == NULL:
        raise ValueError(f"tier {tier!r} is not usable on this CPU (usable: {', '.join(usable_tiers())})")
    with nogil:
        oxl_check_tier(t, thorough, seed, _collect_check, <void *>out)
    return out
