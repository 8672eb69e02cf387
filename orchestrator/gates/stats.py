"""Latency statistics for the benchmark gate.

Two percentile definitions, because users compare our numbers with trtexec's:

* :func:`percentile_linear` — numpy's default ("linear" interpolation between closest ranks, type 7 of
  Hyndman & Fan). **The benchmark verdict uses this one** (``LatencyStats.percentile_method == "linear"``):
  it is smooth in small samples, so a 100-iteration p99 does not jump between two raw samples.
* :func:`percentile_trtexec` — trtexec's nearest rank without interpolation
  (samples/common/sampleReporting.cpp, identical in 8.6 and 11.1): sort ascending, take
  ``v[max(n - 1 - int((1 - p/100) * n), 0)]``. Use it to line up with a trtexec ``--percentile`` line.

Standard deviation is the sample standard deviation (``ddof=1``; 0 for a single sample).
Throughput is ``batch / mean latency``: samples per second, where ``batch`` is the leading dim of the input
(``BenchmarkGate.min_throughput`` is compared against this number); batches per second are recorded too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

PercentileMethod = Literal["linear", "trtexec"]


def percentile_linear(samples: Sequence[float] | np.ndarray, p: float) -> float:
    """numpy's linear-interpolation percentile of ``samples`` at ``p`` in [0, 100]."""
    data = _checked(samples, p)
    return float(np.percentile(data, p, method="linear"))


def percentile_trtexec(samples: Sequence[float] | np.ndarray, p: float) -> float:
    """trtexec's nearest-rank percentile: sorted ``v[max(n - 1 - int((1 - p/100) * n), 0)]``."""
    data = np.sort(_checked(samples, p))
    n = data.size
    return float(data[max(n - 1 - int((1.0 - p / 100.0) * n), 0)])


def percentile(samples: Sequence[float] | np.ndarray, p: float, method: PercentileMethod = "linear") -> float:
    if method == "linear":
        return percentile_linear(samples, p)
    if method == "trtexec":
        return percentile_trtexec(samples, p)
    raise ValueError(f"unknown percentile method {method!r}; use 'linear' or 'trtexec'")


def _checked(samples: Sequence[float] | np.ndarray, p: float) -> np.ndarray:
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile {p} is outside [0, 100]")
    data = np.asarray(samples, dtype=np.float64).ravel()
    if data.size == 0:
        raise ValueError("no latency samples")
    return data


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one latency series, in milliseconds."""

    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    stdev_ms: float
    min_ms: float
    max_ms: float
    batch: int
    throughput_per_s: float  # samples/s = batch / mean latency
    batches_per_s: float  # 1 / mean latency
    percentile_method: PercentileMethod = "linear"

    def to_json(self) -> dict:
        return {
            "count": self.count,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "mean_ms": self.mean_ms,
            "stdev_ms": self.stdev_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "batch": self.batch,
            "throughput_per_s": self.throughput_per_s,
            "batches_per_s": self.batches_per_s,
            "percentile_method": self.percentile_method,
        }

    @classmethod
    def from_json(cls, data: dict) -> LatencyStats:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def latency_stats(samples_ms: Sequence[float], *, batch: int = 1,
                  method: PercentileMethod = "linear") -> LatencyStats:
    """Summarise one series of per-iteration latencies (ms) for a batch of ``batch`` samples."""
    data = np.asarray(samples_ms, dtype=np.float64).ravel()
    if data.size == 0:
        raise ValueError("no latency samples")
    if not np.all(np.isfinite(data)) or np.any(data < 0):
        raise ValueError("latency samples must be finite and non-negative")
    mean = float(data.mean())
    per_s = 1000.0 / mean if mean > 0 else math.inf
    return LatencyStats(
        count=int(data.size),
        p50_ms=percentile(data, 50, method),
        p95_ms=percentile(data, 95, method),
        p99_ms=percentile(data, 99, method),
        mean_ms=mean,
        stdev_ms=float(data.std(ddof=1)) if data.size > 1 else 0.0,
        min_ms=float(data.min()),
        max_ms=float(data.max()),
        batch=batch,
        throughput_per_s=batch * per_s,
        batches_per_s=per_s,
        percentile_method=method,
    )
