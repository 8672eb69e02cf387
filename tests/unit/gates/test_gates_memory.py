"""gates.run.probe_memory and run_soak: the memory gate at the max profile shape and the soak, with scripted
sessions (a runtime that reports device memory, one that runs out of memory, one whose process grows)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.contracts.runtime import Timing
from orchestrator.core.model import BenchmarkGate
from orchestrator.gates.run import probe_memory, resident_bytes, run_soak

FEEDS = {"x": np.zeros((8, 3, 64, 64), dtype=np.float32)}


class Scripted:
    input_names = ("x",)
    output_names = ("y",)
    tf32 = False

    def __init__(self, memory=None, fail=None):
        self.memory, self.fail, self.runs, self.benchmarks = memory, fail, 0, 0

    def run(self, inputs):
        self.runs += 1
        if self.fail is not None and self.runs > 3:
            raise self.fail
        return {"y": np.zeros(1, dtype=np.float32)}

    def benchmark(self, inputs, *, warmup, iterations, time_budget_s):
        self.benchmarks += 1
        if self.fail is not None:
            raise self.fail
        return Timing(compute_ms=(1.0,), device_memory_bytes=self.memory)

    def close(self):
        pass


def test_device_memory_within_and_past_the_bound():
    settings = BenchmarkGate(max_device_memory_mib=100)
    ok = probe_memory(Scripted(memory=60 * 2**20), "max", FEEDS, settings, engine_bytes=5 * 2**20)
    assert ok["status"] == "passed" and ok["device_memory_bytes"] == 60 * 2**20 and ok["engine_bytes"] == 5 * 2**20
    assert ok["input_shapes"] == {"x": [8, 3, 64, 64]}
    over = probe_memory(Scripted(memory=150 * 2**20), "max", FEEDS, settings)
    assert over["status"] == "failed"
    assert over["reasons"] == ["max: device memory 150.0 MiB at input shapes {'x': [8, 3, 64, 64]} > "
                               "max_device_memory_mib 100"]


def test_a_shape_timed_already_is_not_run_again():
    session = Scripted(memory=1)
    out = probe_memory(session, "max", FEEDS, BenchmarkGate(max_device_memory_mib=1), measured=2 * 2**20)
    assert session.benchmarks == 0
    assert out["device_memory_bytes"] == 2 * 2**20 and out["status"] == "failed"


@pytest.mark.parametrize("error", [RuntimeError("CUDA error: out of memory"), MemoryError(),
                                   RuntimeError("[TRT] cudaErrorMemoryAllocation")])
def test_out_of_memory_at_max_shape_fails_naming_the_shape(error):
    out = probe_memory(Scripted(fail=error), "max", FEEDS, BenchmarkGate())  # no bound: an OOM fails anyway
    assert out["status"] == "failed"
    assert out["reasons"][0].startswith("max: the engine ran out of memory at input shapes {'x': [8, 3, 64, 64]}")


def test_other_failure_at_max_shape_fails_as_such():
    out = probe_memory(Scripted(fail=ValueError("bad dims")), "max", FEEDS, BenchmarkGate())
    assert out["reasons"] == ["max: the engine failed at input shapes {'x': [8, 3, 64, 64]}: ValueError: bad dims"]


def test_cpu_runtime_reports_no_device_memory():
    out = probe_memory(Scripted(memory=None), "max", FEEDS, BenchmarkGate(max_device_memory_mib=10))
    assert out["status"] == "passed" and out["device_memory_bytes"] is None
    assert out["notes"] == ["this runtime reports no device memory (a CPU engine): max_device_memory_mib not checked"]


class Clock:
    def __init__(self, step):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def test_soak_fails_on_growth_and_passes_without():
    growing = iter(range(0, 10**12, 2**20))  # one MiB more at every reading
    settings = BenchmarkGate(soak_s=1.0, warmup=2, max_memory_growth_mib=3)
    leak = run_soak(Scripted(), "opt", FEEDS, settings, clock=Clock(0.01), rss=lambda: next(growing))
    assert leak["runs"] > 50 and leak["growth_mib"] == 1.0  # two readings: start (after a tenth) and end
    steady = run_soak(Scripted(), "opt", FEEDS, settings, clock=Clock(0.01), rss=lambda: 500 * 2**20)
    assert steady["status"] == "passed" and steady["growth_mib"] == 0.0

    readings = iter([100 * 2**20, 140 * 2**20])
    grew = run_soak(Scripted(), "opt", FEEDS, settings, clock=Clock(0.01), rss=lambda: next(readings))
    assert grew["status"] == "failed"
    assert grew["reasons"] == [f"soak: resident memory grew 40.0 MiB over {grew['runs']} runs in 1 s > "
                               "max_memory_growth_mib 3"]


def test_soak_engine_failure_and_unreadable_memory():
    settings = BenchmarkGate(soak_s=1.0, warmup=1)
    broken = run_soak(Scripted(fail=RuntimeError("out of memory")), "opt", FEEDS, settings, clock=Clock(0.01),
                      rss=lambda: None)
    assert broken["status"] == "failed" and broken["reasons"][0].startswith("soak: the engine ran out of memory after")
    assert broken["notes"] == ["resident memory is not readable here: growth not checked"]
    assert broken["threshold_mib"] == 32.0  # the default bound


def test_resident_bytes_reads_this_process():
    before = resident_bytes()
    assert before is not None and before > 10 * 2**20
    block = np.ones(64 * 2**20, dtype=np.uint8)  # touched: resident
    assert resident_bytes() - before >= 60 * 2**20
    del block


def test_no_session_is_needed_when_the_timed_max_run_measured_it():
    out = probe_memory(None, "max", FEEDS, BenchmarkGate(max_device_memory_mib=4), measured=3 * 2**20)
    assert out["status"] == "passed" and out["device_memory_bytes"] == 3 * 2**20
