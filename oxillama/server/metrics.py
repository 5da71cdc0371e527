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
  oxillama:num_requests_running, oxillama:num_requests_waiting, oxillama:kv_cache_usage_perc, and for models
  with recurrent layers oxillama:recurrent_state_usage_perc and oxillama:recurrent_state_bytes.
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
        self.scheduler = None
        labels = ["model_name"]
        self.model_name = model_name
        self.time_to_first_token = Histogram(
            PREFIX + "time_to_first_token_seconds", "Time from arrival to the first generated token.", labels,
            buckets=_LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.inter_token_latency = Histogram(
            PREFIX + "inter_token_latency_seconds", "Time between two generated tokens of a request.", labels,
            buckets=_TOKEN_LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.e2e_request_latency = Histogram(
            PREFIX + "e2e_request_latency_seconds", "Time from arrival to the last token of a request.", labels,
            buckets=_LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.request_queue_time = Histogram(
            PREFIX + "request_queue_time_seconds", "Time a request waited before its prompt was run.", labels,
            buckets=_LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.lora_requests = Counter(
            PREFIX + "lora_requests", "Requests that asked for a LoRA adapter, by the adapter's served name.",
            ["model_name", "lora_name"], registry=self.registry)
        self.api_requests = Counter(
            PREFIX + "api_requests", "Generation requests by API family (chat, completions, responses, messages).",
            ["model_name", "api"], registry=self.registry)
        self.registry.register(_SchedulerCollector(self))

    def attach(self, scheduler) -> None:
        """Publish this scheduler's counters and observe its finished requests."""
        self.scheduler = scheduler
        scheduler.add_listener(self.observe_request)

    def observe_request(self, handle) -> None:
        """Called by the scheduler (on its thread) when a request finishes."""
        try:
            s = handle.stats
            for hist, key in ((self.request_queue_time, "queue_time"),
                              (self.time_to_first_token, "time_to_first_token"),
                              (self.e2e_request_latency, "e2e_latency")):
                value = s.get(key)
                if value is not None:
                    hist.observe(value)
            for dt in s.get("inter_token_latencies") or ():
                self.inter_token_latency.observe(dt)
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
        sched = self.owner.scheduler
        m = sched.metrics() if sched is not None else {}
        name = self.owner.model_name

        def counter(metric, doc, key):
            fam = CounterMetricFamily(PREFIX + metric, doc, labels=["model_name"])
            fam.add_metric([name], float(m.get(key, 0)))
            return fam

        def gauge(metric, doc, key):
            fam = GaugeMetricFamily(PREFIX + metric, doc, labels=["model_name"])
            fam.add_metric([name], float(m.get(key, 0)))
            return fam

        yield counter("prompt_tokens", "Prompt tokens processed (prefix-cache hits included).",
                      "prompt_tokens_total")
        yield counter("generation_tokens", "Tokens generated.", "generation_tokens_total")
        yield counter("prefix_cache_hits", "Prompt tokens served from cached prefixes.", "prefix_cache_hits_total")
        yield counter("num_preemptions", "Requests preempted (their KV pages taken back) to free KV pages.",
                      "num_preemptions_total")
        success = CounterMetricFamily(PREFIX + "request_success", "Finished requests by finish reason.",
                                      labels=["model_name", "finished_reason"])
        for reason, count in sorted((m.get("request_success_total") or {}).items()):
            success.add_metric([name, str(reason)], float(count))
        yield success
        yield gauge("num_requests_running", "Requests in the running batch.", "num_requests_running")
        yield gauge("num_requests_waiting", "Requests waiting to be scheduled.", "num_requests_waiting")
        yield gauge("kv_cache_usage_perc", "Fraction of KV cache pages in use (1 = full).", "kv_cache_usage_perc")
        if "recurrent_state_usage_perc" in m:   # models with recurrent layers
            yield gauge("recurrent_state_usage_perc", "Fraction of recurrent-state slots in use (1 = full).",
                        "recurrent_state_usage_perc")
            yield gauge("recurrent_state_bytes", "Bytes of recurrent state held by live sequences.",
                        "recurrent_state_bytes")
