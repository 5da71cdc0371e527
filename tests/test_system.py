import os
import oxillama
from oxillama import _core


def test_system_info_keys():
    info = oxillama.system_info()
    assert isinstance(info["cpu_features"], list)
    assert all(isinstance(f, str) for f in info["cpu_features"])
    assert isinstance(info["kernels"], dict) and info["kernels"]
    assert isinstance(info["openmp"], bool)
    assert isinstance(info["n_threads"], int) and info["n_threads"] >= 1
    assert info["active_tier"] in info["usable_tiers"]
    assert "scalar" in info["usable_tiers"]


def test_kernel_tiers_are_usable():
    info = oxillama.system_info()
    for qtype, tier in info["kernels"].items():
        assert tier in info["usable_tiers"], (qtype, tier)


def test_disable_cpu_features_forces_scalar(python_runner):
    env = dict(os.environ, OXILLAMA_DISABLE_CPU_FEATURES="avx512,avx2,neon")
    out = python_runner("import oxillama; print(oxillama.system_info()['active_tier'])", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "scalar"


def test_active_tier_is_highest_usable():
    # with nothing disabled, the active tier is the last usable one
    if os.environ.get("OXILLAMA_DISABLE_CPU_FEATURES"):
        return
    assert _core.active_tier() == _core.usable_tiers()[-1]
