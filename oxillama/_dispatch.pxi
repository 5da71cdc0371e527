# Dispatch introspection: tiers, CPU features, which kernel runs for each type.

def cpu_features():
    """Names of the CPU features detected (CPUID + OS support)."""
    cdef uint32_t f = oxl_cpu_features()
    out = []
    for bit in range(32):
        if f & (1u << bit):
            name = oxl_cpu_feature_name(bit)
            if name != NULL:
                out.append(name.decode())
    return out


def tier_names():
    return [oxl_tier_name(t).decode() for t in range(OXL_TIER_COUNT)]


def tier_index(tier):
    """Tier name (or index) -> index; ValueError for an unknown name."""
    if isinstance(tier, int):
        if 0 <= tier < OXL_TIER_COUNT:
            return tier
        raise ValueError(f"tier index {tier} out of range")
    names = tier_names()
    if tier not in names:
        raise ValueError(f"unknown tier {tier!r}; known tiers: {', '.join(names)}")
    return names.index(tier)


def usable_tiers():
    """Tiers that are compiled in and that this CPU can run, lowest first."""
    return [oxl_tier_name(t).decode() for t in range(OXL_TIER_COUNT) if oxl_tier_table(t) != NULL]


def compiled_tiers():
    return [oxl_tier_name(t).decode() for t in range(OXL_TIER_COUNT) if oxl_tier_compiled(t)]


def active_tier():
    return oxl_tier_name(oxl_active_tier()).decode()


def kernel_tiers():
    """Quant type name -> tier whose vec_dot is in use."""
    cdef const oxl_kernel_table *k = oxl_kernels()
    out = {}
    for t in range(OXL_TYPE_COUNT):
        if k.type[t].name != NULL and k.type[t].vec_dot != NULL and k.type[t].tier != NULL:
            out[k.type[t].name.decode()] = k.type[t].tier.decode()
    return out


def repacked_layouts(tier=None):
    """Quant type name -> the tier's repacked weight layout for it (ForwardPlan(repack=True) uses the active
    tier's); types without one are left out."""
    cdef const oxl_kernel_table *k = _table(tier)
    out = {}
    for t in range(OXL_TYPE_COUNT):
        if k.type[t].name != NULL and k.type[t].repacked.name != NULL:
            out[k.type[t].name.decode()] = k.type[t].repacked.name.decode()
    return out


def type_table():
    """type id -> (name, block size, type size, is_quantized, vec_dot type id, has_dequantize, has_quantize, has_vec_dot)."""
    cdef const oxl_type_traits *tr
    out = {}
    for t in range(OXL_TYPE_COUNT):
        tr = oxl_type_info(t)
        if tr == NULL:
            continue
        out[t] = (tr.name.decode(), tr.blck_size, tr.type_size, bool(tr.is_quantized), tr.vec_dot_type,
                  tr.to_float != NULL, tr.from_float_ref != NULL, tr.vec_dot != NULL)
    return out


def openmp_enabled():
    return bool(OXL_HAVE_OPENMP)


cdef extern from *:
    int OXL_HAVE_OPENMP


cdef const oxl_kernel_table *_table(tier) except NULL:
    """The kernel table for a tier name/index, or the active one for None."""
    cdef const oxl_kernel_table *k
    if tier is None:
        return oxl_kernels()
    k = oxl_tier_table(tier_index(tier))
    if k == NULL:
        raise ValueError(f"tier {tier!r} is not usable on this CPU (usable: {', '.join(usable_tiers())})")
    return k
