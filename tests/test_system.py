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


def test_active_tier_is_highest_usable(python_runner):
    # with nothing disabled (a fresh process without OXILLAMA_DISABLE_CPU_FEATURES), the active tier is
    # the last usable one
    env = {k: v for k, v in os.environ.items() if k != "OXILLAMA_DISABLE_CPU_FEATURES"}
    out = python_runner("from oxillama import _core; print(_core.active_tier(), _core.usable_tiers()[-1])", env=env)
    assert out.returncode == 0, out.stderr
    active, highest = out.stdout.split()
    assert active == highest


def test_more_threads_than_cpus_are_clamped_with_one_warning(monkeypatch, caplog):
    from oxillama import _system
    cpus = _system.logical_cpus()
    monkeypatch.delenv(_system.OVERSUBSCRIBE_ENV, raising=False)
    monkeypatch.setattr(_system, "_warned_oversubscribe", set())
    with caplog.at_level("WARNING", logger="oxillama"):
        assert _system.resolve_threads(1000) == cpus
        assert _system.resolve_threads(1000) == cpus
    warnings = [r for r in caplog.records if "1000 threads requested" in r.getMessage()]
    assert len(warnings) == 1 and _system.OVERSUBSCRIBE_ENV in warnings[0].getMessage()
    assert _system.resolve_threads(cpus) == cpus and _system.resolve_threads(1) == 1
    monkeypatch.setenv("OXILLAMA_NUM_THREADS", str(cpus + 5))
    assert _system.resolve_threads(None) == cpus


def test_oversubscription_when_asked(monkeypatch):
    from oxillama import _system
    monkeypatch.setenv(_system.OVERSUBSCRIBE_ENV, "1")
    n = _system.logical_cpus() + 3
    assert _system.resolve_threads(n) == n


def test_engine_clamps_threads(smollm2_path, monkeypatch):
    from oxillama import InferenceEngine, _system
    monkeypatch.delenv(_system.OVERSUBSCRIBE_ENV, raising=False)
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=64, n_threads=1000) as e:
        assert e.n_threads == _system.logical_cpus()
        assert len(e.generate("Hi", max_tokens=2, temperature=0).tokens) == 2
