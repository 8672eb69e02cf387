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

**Blocks.** The benchmark gate times a series in several blocks spread out in time (``gates.run``), because one
series can be off as a whole: on the lent H100/H200 one engine's p50 moved by up to 76 % between two runs a few
minutes apart. :func:`block_latency_stats` summarises such a series: p50, p95, p99 and the mean are the
**medians over the blocks** of each block's own value (one disturbed block out of five moves none of them);
``count``, ``min``, ``max`` and ``stdev`` are over all samples; throughput is ``batch / median block mean``.
:func:`spread_pct` is the relative range of the blocks' p50s, ``(max - min) / median`` in percent, the number the
gate compares with its noise threshold. One block gives exactly :func:`latency_stats`.
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
    blocks: int = 1  # > 1: p50/p95/p99/mean are medians over this many blocks (block_latency_stats)
    block_p50_ms: tuple[float, ...] = ()  # each block's own p50, in timing order (empty for one block)
    spread_pct: float = 0.0  # (max - min) / median of block_p50_ms, in percent; 0 for one block

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
            "blocks": self.blocks,
            "block_p50_ms": list(self.block_p50_ms),
            "spread_pct": self.spread_pct,
        }

    @classmethod
    def from_json(cls, data: dict) -> LatencyStats:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if "block_p50_ms" in values:
            values["block_p50_ms"] = tuple(values["block_p50_ms"])
        return cls(**values)


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


def spread_pct(values: Sequence[float]) -> float:
    """Relative range ``(max - min) / median`` in percent; 0 for fewer than two values (or a zero median)."""
    data = np.asarray(values, dtype=np.float64).ravel()
    if data.size < 2:
        return 0.0
    median = float(np.median(data))
    return float((data.max() - data.min()) / median * 100.0) if median > 0 else 0.0


def block_latency_stats(blocks: Sequence[Sequence[float]], *, batch: int = 1,
                        method: PercentileMethod = "linear") -> LatencyStats:
    """Summarise a series timed in ``blocks`` (each a sequence of per-iteration ms): medians over the blocks of
    each block's p50/p95/p99/mean; count, min, max and stdev over every sample; see the module docstring."""
    per_block = [latency_stats(b, batch=batch, method=method) for b in blocks if len(b)]
    if not per_block:
        raise ValueError("no latency samples")
    if len(per_block) == 1:
        return per_block[0]
    pooled = latency_stats([x for b in blocks for x in b], batch=batch, method=method)

    def median(values: Sequence[float]) -> float:
        return float(np.median(np.asarray(values, dtype=np.float64)))

    mean = median([b.mean_ms for b in per_block])
    per_s = 1000.0 / mean if mean > 0 else math.inf
    p50s = tuple(b.p50_ms for b in per_block)
    return LatencyStats(
        count=pooled.count,
        p50_ms=median(p50s),
        p95_ms=median([b.p95_ms for b in per_block]),
        p99_ms=median([b.p99_ms for b in per_block]),
        mean_ms=mean,
        stdev_ms=pooled.stdev_ms,
        min_ms=pooled.min_ms,
        max_ms=pooled.max_ms,
        batch=batch,
        throughput_per_s=batch * per_s,
        batches_per_s=per_s,
        percentile_method=method,
        blocks=len(per_block),
        block_p50_ms=p50s,
        spread_pct=spread_pct(p50s),
    )
