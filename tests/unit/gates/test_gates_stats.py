from __future__ import annotations

import pytest

from orchestrator.gates.stats import latency_stats, percentile_linear, percentile_trtexec

TEN = [10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0]


def test_linear_percentile_interpolates():
    assert percentile_linear(TEN, 50) == 5.5
    assert percentile_linear(TEN, 95) == pytest.approx(9.55)
    assert percentile_linear(TEN, 0) == 1.0 and percentile_linear(TEN, 100) == 10.0


def test_trtexec_nearest_rank():
    # v[max(n-1-int((1-p/100)*n), 0)] on sorted 1..10
    assert percentile_trtexec(TEN, 50) == 5.0  # 9 - int(5.0) = 4
    assert percentile_trtexec(TEN, 75) == 8.0  # 9 - int(2.5) = 7
    # (1 - 0.9) * 10 is 0.9999999999999998 in doubles, so int() gives 0: the formula, evaluated as written
    assert percentile_trtexec(TEN, 90) == 10.0
    assert percentile_trtexec(TEN, 95) == 10.0  # 9 - int(0.5) = 9
    assert percentile_trtexec(TEN, 99) == 10.0
    assert percentile_trtexec(TEN, 0) == 1.0  # max(9 - 10, 0)
    assert percentile_trtexec([3.0], 95) == 3.0


def test_latency_stats():
    s = latency_stats(TEN, batch=4)
    assert (s.count, s.p50_ms, s.mean_ms, s.min_ms, s.max_ms) == (10, 5.5, 5.5, 1.0, 10.0)
    assert s.stdev_ms == pytest.approx(3.0276503540974917)
    assert s.throughput_per_s == pytest.approx(4 * 1000 / 5.5) and s.batches_per_s == pytest.approx(1000 / 5.5)
    assert s.percentile_method == "linear"
    assert latency_stats(TEN, method="trtexec").p95_ms == 10.0
    assert latency_stats([2.0]).stdev_ms == 0.0


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [-1.0]])
def test_bad_samples_are_refused(bad):
    with pytest.raises(ValueError):
        latency_stats(bad)
