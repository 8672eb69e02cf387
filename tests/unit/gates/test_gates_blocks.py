"""Benchmark noise (issue 11): a series timed in blocks spread out in time, gated on the medians over the blocks,
its spread reported, and a verdict the noise decides marked ``noisy`` (neither passed nor failed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orchestrator.contracts.runtime import Timing
from orchestrator.core.model import BenchmarkGate
from orchestrator.gates.run import (
    DEFAULT_BLOCK_GAP_S,
    DEFAULT_BLOCKS,
    DEFAULT_MAX_SPREAD_PCT,
    MIN_BLOCK_ITERATIONS,
    BlockSchedule,
    allowed_dissent,
    run_benchmark,
)
from orchestrator.gates.stats import block_latency_stats, latency_stats, spread_pct
from orchestrator.gates.verdict import BenchmarkVerdict


def test_spread_is_the_relative_range_of_the_values():
    assert spread_pct([1.0, 1.1, 1.2, 0.9, 1.0]) == pytest.approx(30.0)
    assert spread_pct([2.0]) == 0.0 and spread_pct([]) == 0.0


def test_block_stats_are_medians_over_blocks():
    calm = [1.0, 1.0, 1.1, 1.0, 0.9]
    blocks = [calm, calm, [5.0] * 5, calm, calm]  # one disturbed block
    s = block_latency_stats(blocks, batch=2)
    assert s.blocks == 5 and s.count == 25
    assert s.p50_ms == 1.0 and s.mean_ms == pytest.approx(1.0)  # the disturbed block moves neither
    assert s.max_ms == 5.0 and s.min_ms == 0.9  # extremes over all samples
    assert s.block_p50_ms == (1.0, 1.0, 5.0, 1.0, 1.0) and s.spread_pct == pytest.approx(400.0)
    assert s.throughput_per_s == pytest.approx(2000.0)
    pooled = latency_stats([x for b in blocks for x in b], batch=2)
    assert pooled.mean_ms == pytest.approx(1.8)  # what a single series would have said
    assert block_latency_stats([calm]) == latency_stats(calm)  # one block: the plain statistics
    assert type(s).from_json(json.loads(json.dumps(s.to_json()))) == s


def test_schedule_defaults_and_iterations_per_block():
    schedule = BlockSchedule.of(BenchmarkGate())
    assert (schedule.blocks, schedule.gap_s, schedule.max_spread_pct) == (
        DEFAULT_BLOCKS, DEFAULT_BLOCK_GAP_S, DEFAULT_MAX_SPREAD_PCT) == (5, 0.2, 10.0)
    assert schedule.iterations_per_block(100) == 20 and schedule.iterations_per_block(21) == 5
    assert schedule.iterations_per_block(3) == MIN_BLOCK_ITERATIONS
    assert BlockSchedule(blocks=1).iterations_per_block(3) == 3
    assert schedule.budget_per_block(1.0) == 0.2 and schedule.budget_per_block(None) is None


class Scripted:
    """A session whose n-th ``benchmark`` call returns the n-th scripted series (compute = end-to-end)."""

    input_names = ("x",)
    output_names = ("y",)

    def __init__(self, series):
        self.series = list(series)
        self.calls = []

    def benchmark(self, inputs, *, warmup, iterations, time_budget_s):
        self.calls.append((tuple(inputs["x"].shape), warmup, iterations, time_budget_s))
        values = tuple(self.series[len(self.calls) - 1])
        return Timing(compute_ms=values, end_to_end_ms=values)


FEEDS = {"opt": {"x": np.zeros((4, 3), np.float32)}}
NO_GAP = BlockSchedule(gap_s=0.0)


def bench(series, feeds=FEEDS, schedule=NO_GAP, **settings) -> tuple[BenchmarkVerdict, Scripted]:
    session = Scripted(series)
    return run_benchmark(session, feeds, BenchmarkGate(warmup=2, iterations=20, **settings),
                         schedule=schedule), session


CALM = [1.0, 1.0, 1.02, 0.98, 1.0]
SLOW = [3.0, 3.0, 3.1, 2.9, 3.0]


def test_one_slow_block_does_not_decide_the_verdict():
    verdict, session = bench([CALM, CALM, SLOW, CALM, CALM], max_p95_ms=2.0)
    assert verdict.status == "passed" and verdict.reasons == () and verdict.noisy == ()
    opt = verdict.shape("opt")
    assert opt.end_to_end.p50_ms == 1.0 and opt.end_to_end.spread_pct == pytest.approx(200.0)
    assert len(opt.end_to_end_samples_ms) == 25 and opt.end_to_end.blocks == 5
    assert session.calls == [((4, 3), 2, 5, None)] * 5  # 20 iterations over 5 blocks (at least 5 each)
    # the spread is reported even though the verdict stands
    assert verdict.notes == ("opt: the blocks' p50 spread 200.0% exceeds max_spread_pct 10% (1 of 5 blocks "
                             "disagree with the verdict, 1 allowed: it stands)",)
    assert verdict.thresholds["aggregation"] == "median_of_blocks" and verdict.thresholds["blocks"] == 5


def test_blocks_that_disagree_past_the_spread_limit_make_the_verdict_noisy():
    verdict, _ = bench([CALM, SLOW, CALM, SLOW, CALM], max_p95_ms=2.0)
    assert verdict.status == "noisy" and not verdict.passed and verdict.reasons == ()
    (why,) = verdict.noisy
    assert why == ("opt: max_p95_ms: 2 of 5 blocks fail it, 3 pass; the blocks' p50 spread 200.0% > "
                   "max_spread_pct 10% (p50 per block: 1.000, 3.000, 1.000, 3.000, 1.000 ms)")
    data = json.loads(json.dumps(verdict.to_json()))
    assert data["status"] == "noisy" and data["noisy"] == [why]
    assert BenchmarkVerdict.from_json(data).status == "noisy"


def test_a_verdict_every_block_agrees_on_stands_whatever_the_spread():
    fails, _ = bench([SLOW, [9.0] * 5, SLOW, SLOW, SLOW], max_p95_ms=2.0)
    assert fails.status == "failed" and fails.reasons == ("opt: end-to-end p95 3.080 ms > max_p95_ms 2 ms",)
    assert fails.noisy == () and fails.notes == (
        "opt: the blocks' p50 spread 200.0% exceeds max_spread_pct 10% (0 of 5 blocks disagree with the verdict, "
        "1 allowed: it stands)",)
    passes, _ = bench([CALM, SLOW, CALM, SLOW, CALM], max_p95_ms=5.0)
    assert passes.status == "passed"


def test_two_blocks_of_five_disagreeing_is_noisy_one_is_outvoted():
    assert [allowed_dissent(n) for n in (1, 3, 5, 9, 10)] == [0, 0, 1, 1, 2]
    assert bench([SLOW, CALM, CALM, CALM, CALM], max_p95_ms=2.0)[0].status == "passed"
    assert bench([SLOW, CALM, CALM, CALM, SLOW], max_p95_ms=2.0)[0].status == "noisy"
    assert bench([SLOW, SLOW, SLOW, CALM, SLOW], max_p95_ms=2.0)[0].status == "failed"


def test_small_spread_keeps_pass_or_fail_even_when_blocks_straddle_the_threshold():
    a, b = [1.0] * 5, [1.05] * 5  # 5 % spread: under the 10 % limit
    verdict, _ = bench([a, b, a, b, b], max_p95_ms=1.02)
    assert verdict.status == "failed" and verdict.noisy == ()  # the median (1.05) fails


def test_no_threshold_means_nothing_to_judge_but_the_spread_is_noted():
    verdict, _ = bench([CALM, SLOW, CALM, SLOW, CALM])
    assert verdict.status == "passed"
    assert verdict.notes == ("opt: the blocks' p50 spread 200.0% exceeds max_spread_pct 10% (no threshold "
                             "applies to it)",)


def test_regression_and_throughput_are_judged_per_block_too():
    base, _ = bench([CALM] * 5)
    verdict, _ = bench([CALM, SLOW, CALM, SLOW, CALM], max_regression_pct=20)
    assert verdict.status == "passed"  # no baseline: the regression bound has nothing to compare with
    session = Scripted([CALM, SLOW, CALM, SLOW, CALM])
    noisy = run_benchmark(session, FEEDS, BenchmarkGate(iterations=20, max_regression_pct=20,
                                                        min_throughput=3000.0), base.to_json(), schedule=NO_GAP)
    assert noisy.status == "noisy" and [n.split(": ")[1] for n in noisy.noisy] == ["min_throughput",
                                                                                    "max_regression_pct"]


def test_blocks_go_round_robin_over_the_shapes_with_a_pause_between_rounds():
    feeds = {"opt": {"x": np.zeros((4, 3), np.float32)}, "max": {"x": np.zeros((8, 3), np.float32)}}
    pauses = []
    session = Scripted([CALM] * 6)
    verdict = run_benchmark(session, feeds, BenchmarkGate(iterations=10, time_budget_s=0.6),
                            schedule=BlockSchedule(blocks=3, gap_s=0.25), sleep=pauses.append)
    assert [c[0][0] for c in session.calls] == [4, 8, 4, 8, 4, 8]
    assert pauses == [0.25, 0.25]
    assert [c[3] for c in session.calls] == [pytest.approx(0.2)] * 6  # the time budget is split too
    assert [s.label for s in verdict.shapes] == ["opt", "max"] and verdict.shape("max").compute.blocks == 3


def test_an_engine_that_fails_in_a_later_block_fails_the_gate():
    class FailsLater(Scripted):
        def benchmark(self, inputs, **kw):
            if len(self.calls) == 2:
                raise RuntimeError("CUDA error: an illegal memory access")
            return super().benchmark(inputs, **kw)

    verdict = run_benchmark(FailsLater([CALM] * 5), FEEDS, BenchmarkGate(iterations=10), schedule=NO_GAP)
    assert verdict.status == "failed"
    assert verdict.reasons == ("opt: engine failed while benchmarking: RuntimeError: CUDA error: an illegal "
                               "memory access",)


TAILED = [1.0, 1.0, 1.0, 1.0, 5.0]  # every block: four calm runs and one stall
JITTERY = [0.5, 1.5, 0.5, 1.5, 1.0]


@pytest.mark.parametrize("series, settings, reason", [
    ([CALM] * 5, {"max_p99_p50_ratio": 1.5, "max_cv_pct": 5.0}, None),
    ([TAILED] * 5, {"max_p99_p50_ratio": 1.5}, "opt: end-to-end p99/p50 4.84 (p99 4.840 ms, p50 1.000 ms) > "
                                               "max_p99_p50_ratio 1.5"),
    ([JITTERY] * 5, {"max_cv_pct": 20.0}, "opt: end-to-end latency varies 45.6% (stdev 0.456 ms / mean 1.000 ms) "
                                          "> max_cv_pct 20%"),
    ([TAILED] * 5, {"max_p95_ms": 10.0}, None),  # the same stalls pass a latency budget alone
])
def test_stability_thresholds_judge_the_tail_and_the_variation(series, settings, reason):
    """Latency spread (issue 15): p99/p50 and the coefficient of variation of the gated shape's timed runs."""
    verdict, _ = bench(series, **settings)
    assert verdict.reasons == ((reason,) if reason else ()), verdict.reasons
    assert verdict.status == ("failed" if reason else "passed")
    for name in ("max_p99_p50_ratio", "max_cv_pct"):
        assert verdict.thresholds[name] == settings.get(name)
