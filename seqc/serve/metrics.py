"""The server's Prometheus metrics (`GET /metrics`, the text exposition format).

Why a registry per app rather than the process-wide default: two servers in one process (the
tests build several) keep their own counts, and `/metrics` shows only seqc's series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "seqc_requests", "Requests answered", ["model", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "seqc_request_seconds",
            "Time from a request's arrival to its answer",
            ["model", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "seqc_queue_wait_seconds",
            "Time a source waited for its batch",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "seqc_batch_size",
            "Sources per model call",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.model_calls = Counter(
            "seqc_model_calls", "Batches run through a model", ["model"], registry=r
        )
        self.in_flight = Gauge("seqc_in_flight", "Requests being answered", ["model"], registry=r)
        self.queue_depth = Gauge(
            "seqc_queue_depth", "Sources waiting for a batch", ["model", "queue"], registry=r
        )
