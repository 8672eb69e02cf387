"""Benchmark noise (issue 11) with real onnxruntime CPU sessions: the series is timed in blocks spread out in
time and gated on their medians, so one slow spell of the machine no longer decides pass or fail; when the
blocks disagree past the spread limit the verdict is ``noisy``.

A slow spell is made real, not faked: in the disturbed blocks the wrapped session times the same engine on a
64x larger batch (genuinely slower runs, timed by the runtime plugin's own clock)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from orchestrator.contracts.runtime import RuntimeOptions, Timing  # noqa: E402
from orchestrator.core.artifact import EngineDescriptor, EngineTarget  # noqa: E402
from orchestrator.core.model import BenchmarkGate  # noqa: E402
from orchestrator.gates.run import BlockSchedule, run_benchmark  # noqa: E402
from trt_orchestrator_plugins.runtimes.onnxruntime import runtime  # noqa: E402

pytestmark = pytest.mark.integration

ENGINE = EngineDescriptor(address="tiny/fp32/default@cpu+ort1.31", precision="fp32", builder="onnxruntime",
                          builder_version="1.31.1", runtime="onnxruntime", target=EngineTarget("cpu", device="cpu"))
FEEDS = {"opt": {"x": np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)}}
HEAVY = {"x": np.random.default_rng(1).random((128, 3, 32, 32), dtype=np.float32)}


class SlowSpells:
    """The real onnxruntime session; its benchmark calls numbered in ``slow`` run during a "slow spell"."""

    def __init__(self, session, slow: set[int]):
        self.session, self.slow, self.calls = session, slow, 0
        self.input_names, self.output_names = session.input_names, session.output_names

    def run(self, inputs):
        return self.session.run(inputs)

    def benchmark(self, inputs, **kw) -> Timing:
        call, self.calls = self.calls, self.calls + 1
        return self.session.benchmark(HEAVY if call in self.slow else inputs, **kw)

    def close(self):
        self.session.close()


@pytest.fixture
def session(tiny_onnx):
    s = runtime.load(Path(tiny_onnx("blocks")), ENGINE, RuntimeOptions())
    yield s
    s.close()


def _limit(session) -> float:
    """A p95 bound well above this engine's calm end-to-end p95 and well below its slow-spell p95."""
    calm = np.percentile(session.benchmark(FEEDS["opt"], warmup=3, iterations=40, time_budget_s=None)
                         .end_to_end_ms, 95)
    slow = np.percentile(session.benchmark(HEAVY, warmup=3, iterations=10, time_budget_s=None).end_to_end_ms, 50)
    assert slow > 6 * calm, (calm, slow)  # the spell really is slow on this machine
    return float(np.sqrt(calm * slow))  # geometric middle: >= 2.4x from either


SETTINGS = dict(warmup=2, iterations=50)


def test_a_slow_spell_during_the_benchmark_does_not_fail_the_gate(session):
    # Before: one 200-iteration series; a slow spell over it failed (or passed) the gate on noise alone.
    limit = _limit(session)
    verdict = run_benchmark(SlowSpells(session, slow={0}), FEEDS, BenchmarkGate(**SETTINGS, max_p95_ms=limit))
    assert verdict.status == "passed", (verdict.reasons, verdict.noisy)
    e2e = verdict.shape("opt").end_to_end
    assert e2e.blocks == 5 and e2e.p95_ms < limit
    assert e2e.spread_pct > 100 and e2e.block_p50_ms[0] == max(e2e.block_p50_ms)  # and it is reported
    assert any("1 of 5 blocks disagree with the verdict, 1 allowed: it stands" in n for n in verdict.notes)


def test_blocks_that_disagree_make_a_noisy_verdict_not_a_pass_or_fail(session):
    limit = _limit(session)
    verdict = run_benchmark(SlowSpells(session, slow={1, 3}), FEEDS, BenchmarkGate(**SETTINGS, max_p95_ms=limit))
    assert verdict.status == "noisy" and verdict.reasons == ()
    # the two slow-spell blocks fail the bound; on a loaded machine one calm block may too (seen in a CI run with
    # other jobs on both cores: "3 of 5 blocks fail it, 2 pass") — either way the blocks disagree: noisy
    assert re.match(r"opt: max_p95_ms: (2 of 5 blocks fail it, 3 pass|3 of 5 blocks fail it, 2 pass); "
                    r"the blocks' p50 spread", verdict.noisy[0]), verdict.noisy[0]
    assert verdict.to_json()["status"] == "noisy"


def test_a_really_slow_engine_still_fails(session):
    limit = _limit(session)
    verdict = run_benchmark(SlowSpells(session, slow={0, 1, 2, 3, 4}), FEEDS,
                            BenchmarkGate(**SETTINGS, max_p95_ms=limit), schedule=BlockSchedule(gap_s=0.05))
    assert verdict.status == "failed" and verdict.noisy == ()
    assert verdict.reasons[0].startswith("opt: end-to-end p95 ")


def test_default_schedule_on_a_real_session(session):
    verdict = run_benchmark(session, FEEDS, BenchmarkGate(warmup=2, iterations=100))
    opt = verdict.shape("opt")
    assert verdict.thresholds["blocks"] == 5 and verdict.thresholds["iterations_per_block"] == 20
    for stats in (opt.compute, opt.end_to_end):
        assert stats.blocks == 5 and stats.count == 100 and len(stats.block_p50_ms) == 5
        assert 0 < stats.min_ms <= stats.p50_ms <= stats.p95_ms <= stats.max_ms
        assert stats.spread_pct >= 0
    assert len(opt.compute_samples_ms) == len(opt.end_to_end_samples_ms) == 100
