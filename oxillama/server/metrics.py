"""Prometheus metrics with vLLM's names under our prefix, so existing vLLM dashboards fit.

Declared once here, per app (an own CollectorRegistry, so two apps in one process do not clash):
- histograms, observed from each finished request's stats (the scheduler calls `observe_request` on
  its thread through `Scheduler.add_listener`; prometheus_client is thread-safe):
  oxillama:time_to_first_token_seconds, oxillama:inter_token_latency_seconds,
  oxillama:e2e_request_latency_seconds, oxillama:request_queue_time_seconds;
- oxillama:api_requests_total{api}: generation requests by API family (the route counts it);
- oxillama:lora_requests_total{lora_name}: requests that asked for each LoRA adapter (`--lora NAME=PATH`),
  counted when the request's adapters are resolved (vLLM only has a gauge of running adapters);
- counters and gauges, read from `Scheduler.metrics()` at scrape time (the scheduler counts; we only
  publish): oxillama:prompt_tokens_total, oxillama:generation_tokens_total,
  oxillama:request_success_total{finished_reason}, oxillama:prefix_cache_hits_total,
  oxillama:num_preemptions_total,
  oxillama:num_requests_running, oxillama:num_requests_waiting, oxillama:kv_cache_usage_perc, for models
  with recurrent layers oxillama:recurrent_state_usage_perc and oxillama:recurrent_state_bytes, and with
  the prompt cache (--cache-ram) oxillama:prompt_cache_{hits,misses,hit_tokens,evictions}_total and
  oxillama:prompt_cache_bytes / prompt_cache_max_bytes.
"""
from __future__ import annotations

import logging

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger("oxillama")

PREFIX = "oxillama:"
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0,
                    7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
_TOKEN_LATENCY_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
                          0.5, 0.75, 1.0, 2.5, 5.0)


class ServerMetrics:
    """The server's metrics registry; `render()` is the body of GET /metrics."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str):
        self.registry = CollectorRegistry(auto_describe=True)
        self.schedulers: dict = {}       # model name -> its running Scheduler
        self._retired: dict = {}         # model name -> counters of its unloaded schedulers, summed
        labels = ["model_name"]
        self.model_name = model_name     # the default model
        self.time_to_first_token = Histogram(
            PREFIX + "time_to_first_token_seconds", "Time from arrival to the first generated token.", labels,
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.inter_token_latency = Histogram(
            PREFIX + "inter_token_latency_seconds", "Time between two generated tokens of a request.", labels,
            buckets=_TOKEN_LATENCY_BUCKETS, registry=self.registry)
        self.e2e_request_latency = Histogram(
            PREFIX + "e2e_request_latency_seconds", "Time from arrival to the last token of a request.", labels,
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.request_queue_time = Histogram(
            PREFIX + "request_queue_time_seconds", "Time a request waited before its prompt was run.", labels,
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        for hist in self._histograms():
            hist.labels(model_name)      # the default model's series exist from the start
        self.lora_requests = Counter(
            PREFIX + "lora_requests", "Requests that asked for a LoRA adapter, by the adapter's served name.",
            ["model_name", "lora_name"], registry=self.registry)
        self.api_requests = Counter(
            PREFIX + "api_requests", "Generation requests by API family (chat, completions, responses, messages).",
            ["model_name", "api"], registry=self.registry)
        self.registry.register(_SchedulerCollector(self))

    def _histograms(self):
        return (self.time_to_first_token, self.inter_token_latency, self.e2e_request_latency, self.request_queue_time)

    @property
    def scheduler(self):
        """The default model's scheduler (None while it is not loaded)."""
        return self.schedulers.get(self.model_name)

    def attach(self, scheduler, model_name: str | None = None) -> None:
        """Publish this scheduler's counters (labelled with its model's name) and observe its finished requests."""
        name = self.model_name if model_name is None else model_name
        self.schedulers[name] = scheduler
        scheduler.add_listener(lambda handle: self.observe_request(handle, name))

    def detach(self, model_name: str) -> None:
        """The model is being unloaded: its counters so far stay in /metrics (counters never go back)."""
        scheduler = self.schedulers.pop(model_name, None)
        if scheduler is None:
            return
        old, m = self._retired.setdefault(model_name, {}), scheduler.metrics()
        for key, value in m.items():
            if key.endswith("_total"):
                if isinstance(value, dict):
                    merged = old.setdefault(key, {})
                    for k, v in value.items():
                        merged[k] = merged.get(k, 0) + v
                else:
                    old[key] = old.get(key, 0) + value

    def observe_request(self, handle, model_name: str | None = None) -> None:
        """Called by the scheduler (on its thread) when a request finishes."""
        name = self.model_name if model_name is None else model_name
        try:
            s = handle.stats
            for hist, key in ((self.request_queue_time, "queue_time"),
                              (self.time_to_first_token, "time_to_first_token"),
                              (self.e2e_request_latency, "e2e_latency")):
                value = s.get(key)
                if value is not None:
                    hist.labels(name).observe(value)
            itl = self.inter_token_latency.labels(name)
            for dt in s.get("inter_token_latencies") or ():
                itl.observe(dt)
        except Exception:       # a metrics bug must not take the scheduler's thread down
            log.exception("could not record the metrics of request %s", getattr(handle, "id", "?"))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SchedulerCollector:
    """Counters and gauges from a `Scheduler.metrics()` snapshot, taken at each scrape."""

    def __init__(self, owner: ServerMetrics):
        self.owner = owner

    def describe(self):
        return []       # names are known only at collect time; the registry must not call collect early

    def collect(self):
        owner = self.owner
        snapshots = {name: sched.metrics() for name, sched in list(owner.schedulers.items())}
        for name, old in owner._retired.items():
            m = snapshots.setdefault(name, {})
            for key, value in old.items():
                if isinstance(value, dict):
                    merged = dict(m.get(key) or {})
                    for k, v in value.items():
                        merged[k] = merged.get(k, 0) + v
                    m[key] = merged
                else:
                    m[key] = m.get(key, 0) + value
        if not snapshots:
            snapshots = {owner.model_name: {}}

        def family(kind, metric, doc, key, only_if=None):
            fam = kind(PREFIX + metric, doc, labels=["model_name"])
            for name, m in snapshots.items():
                if only_if is None or only_if in m:
                    fam.add_metric([name], float(m.get(key, 0)))
            return fam

        def counter(metric, doc, key, only_if=None):
            return family(CounterMetricFamily, metric, doc, key, only_if)

        def gauge(metric, doc, key, only_if=None):
            return family(GaugeMetricFamily, metric, doc, key, only_if)

        yield counter("prompt_tokens", "Prompt tokens processed (prefix-cache hits included).",
                      "prompt_tokens_total")
        yield counter("generation_tokens", "Tokens generated.", "generation_tokens_total")
        yield counter("prefix_cache_hits", "Prompt tokens served from cached prefixes.", "prefix_cache_hits_total")
        yield counter("num_preemptions", "Requests preempted (their KV pages taken back) to free KV pages.",
                      "num_preemptions_total")
        success = CounterMetricFamily(PREFIX + "request_success", "Finished requests by finish reason.",
                                      labels=["model_name", "finished_reason"])
        for name, m in snapshots.items():
            for reason, count in sorted((m.get("request_success_total") or {}).items()):
                success.add_metric([name, str(reason)], float(count))
        yield success
        yield gauge("num_requests_running", "Requests in the running batch.", "num_requests_running")
        yield gauge("num_requests_waiting", "Requests waiting to be scheduled.", "num_requests_waiting")
        yield gauge("kv_cache_usage_perc", "Fraction of KV cache pages in use (1 = full).", "kv_cache_usage_perc")
        if any("recurrent_state_usage_perc" in m for m in snapshots.values()):   # models with recurrent layers
            on = "recurrent_state_usage_perc"
            yield gauge("recurrent_state_usage_perc", "Fraction of recurrent-state slots in use (1 = full).",
                        "recurrent_state_usage_perc", on)
            yield gauge("recurrent_state_bytes", "Bytes of recurrent state held by live sequences.",
                        "recurrent_state_bytes", on)
        if any("prompt_cache_max_bytes" in m for m in snapshots.values()):       # --cache-ram (not 0)
            on = "prompt_cache_max_bytes"
            yield counter("prompt_cache_hits", "Requests whose prompt started from K/V kept in the prompt cache.",
                          "prompt_cache_hits_total", on)
            yield counter("prompt_cache_misses", "Requests the prompt cache had nothing for.",
                          "prompt_cache_misses_total", on)
            yield counter("prompt_cache_hit_tokens", "Prompt tokens copied from the prompt cache instead of run.",
                          "prompt_cache_hit_tokens_total", on)
            yield counter("prompt_cache_evictions", "Prompt cache entries dropped (least recently used) for room.",
                          "prompt_cache_evictions_total", on)
            yield gauge("prompt_cache_bytes", "Bytes of K/V held by the prompt cache.", "prompt_cache_bytes", on)
            yield gauge("prompt_cache_max_bytes", "The prompt cache's budget (--cache-ram).", "prompt_cache_max_bytes",
                        on)
        loaded = GaugeMetricFamily(PREFIX + "model_loaded", "1 while the model is loaded (oxillama serve -m, "
                                   "--max-loaded).", labels=["model_name"])
        for name in snapshots:
            loaded.add_metric([name], 1.0 if name in owner.schedulers else 0.0)
        yield loaded
