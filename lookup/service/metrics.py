"""The service's counters and histograms, written in the Prometheus text format (``GET /metrics``)."""

from __future__ import annotations

import collections
import math
from typing import Any

from lookup.answer.lru import LRU
from lookup.service.pool import Pool

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SLACK_BUCKETS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # an answer's slack estimate


class Metrics:
    """Counters and a latency histogram, written in the Prometheus text format."""

    def __init__(self) -> None:
        self.requests: collections.Counter[tuple[str, int, str]] = collections.Counter()
        self.latency: dict[str, list[int]] = {}
        self.latency_sum: collections.Counter[str] = collections.Counter()
        self.server_errors = 0  # requests answered 500: an unexpected exception in the server
        self.slack: dict[str, list[int]] = {}  # table-route eps answers' slack, by refined or not
        self.slack_sum: collections.Counter[str] = collections.Counter()

    def observe(self, endpoint: str, status: int, source: str, seconds: float) -> None:
        self.requests[endpoint, status, source] += 1
        _count(self.latency.setdefault(source, [0] * (len(BUCKETS) + 1)), BUCKETS, seconds)
        self.latency_sum[source] += seconds

    def answered(self, body: dict[str, Any]) -> None:
        """An eps answer of the table's route: its slack estimate (unknown: +Inf) in the histogram
        of refined or unrefined answers (``"refined": false``)."""
        label = "unrefined" if body.get("refined") is False else "refined"
        slack = body.get("slack")
        slack = math.inf if slack is None or not math.isfinite(slack) else max(slack, 0.0)
        _count(self.slack.setdefault(label, [0] * (len(SLACK_BUCKETS) + 1)), SLACK_BUCKETS, slack)
        self.slack_sum[label] += slack if math.isfinite(slack) else 0.0

    def text(self, pools: dict[str, Pool], sliced: LRU) -> str:
        lines = ["# HELP lookup_requests_total HTTP requests by endpoint, status and source of the answer.",
                 "# TYPE lookup_requests_total counter"]
        for (endpoint, status, source), count in sorted(self.requests.items()):
            lines.append(f'lookup_requests_total{{endpoint="{endpoint}",status="{status}",source="{source}"}} {count}')
        lines += _histogram("lookup_request_seconds", "Time to answer a request, by source of the answer.", "source",
                            BUCKETS, self.latency, self.latency_sum)
        lines += _histogram("lookup_answer_slack", "Slack estimate of eps answers from the table's route (refined: "
                            "within max_slack, from a slice or a refinement; unrefined: the table's while its "
                            "refinement runs).", "refined", SLACK_BUCKETS, self.slack, self.slack_sum)
        counts = {label: sum(c) for label, c in self.slack.items()}
        fraction = counts.get("refined", 0) / max(1, sum(counts.values()))
        live, refining, background = pools["live"], pools["refine"], pools["slice"]
        gauges = [("lookup_refined_fraction", "Share of the table route's eps answers that were refined.", "gauge",
                   fraction),
                  ("lookup_live_queue", "Live tasks admitted (running or waiting).", "gauge", live.admitted["answer"]),
                  ("lookup_live_queue_limit", "Live tasks admitted at most.", "gauge", live.queue),
                  ("lookup_refine_queue", "Refinements admitted (running or waiting).", "gauge",
                   refining.admitted["background"]),
                  ("lookup_refine_queue_limit", "Refinements admitted at most.", "gauge", refining.background),
                  ("lookup_refine_timeouts_total", "Refinements ended past their time limit.", "counter",
                   refining.counts["timeouts"]),
                  ("lookup_refine_cache_hits_total", "Refinements answered from the cache (asked before).",
                   "counter", refining.cache.hits),
                  ("lookup_background_tasks", "eps0 slices admitted.", "gauge", background.admitted["background"]),
                  ("lookup_background_timeouts_total", "eps0 slices ended past their time limit.",
                   "counter", background.counts["timeouts"]),
                  ("lookup_live_workers", "Worker processes of the live pool.", "gauge", live.workers),
                  ("lookup_live_cache_entries", "Live answers in the LRU cache.", "gauge", len(live.cache)),
                  ("lookup_live_cache_hits_total", "Live answers served from the cache.", "counter",
                   live.cache.hits),
                  ("lookup_live_timeouts_total", "Tasks ended (their worker alone replaced) past their time limit.",
                   "counter", live.counts["timeouts"]),
                  ("lookup_live_worker_deaths_total", "Tasks whose worker died (memory limit, crash).", "counter",
                   live.counts["deaths"]),
                  ("lookup_slices", "eps0 slices kept.", "gauge", len(sliced)),
                  ("lookup_slice_hits_total", "Answers read from an eps0 slice.", "counter", sliced.hits),
                  ("lookup_server_errors_total", "Requests answered 500: an unexpected exception in the server "
                   "(logged with the request and its traceback).", "counter", self.server_errors)]
        for name, help_text, kind, value in gauges:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(lines) + "\n"


def _count(counts: list[int], buckets: tuple[float, ...], value: float) -> None:
    """One observation in a histogram's non-cumulative counts (the last: above every bucket)."""
    counts[next((i for i, bound in enumerate(buckets) if value <= bound), len(buckets))] += 1


def _histogram(name: str, help_text: str, label: str, buckets: tuple[float, ...], counts: dict[str, list[int]],
               sums: collections.Counter[str]) -> list[str]:
    """A Prometheus histogram of ``counts`` (one series per label value)."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for value, series in sorted(counts.items()):
        total = 0
        for bound, count in zip([*map(repr, buckets), "+Inf"], series, strict=True):
            total += count
            lines.append(f'{name}_bucket{{{label}="{value}",le="{bound}"}} {total}')
        lines.append(f'{name}_sum{{{label}="{value}"}} {sums[value]!r}')
        lines.append(f'{name}_count{{{label}="{value}"}} {total}')
    return lines


__all__ = ["BUCKETS", "SLACK_BUCKETS", "Metrics"]
