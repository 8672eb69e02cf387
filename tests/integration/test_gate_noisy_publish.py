"""A noisy benchmark (issue 11) through the pipeline, with the real onnxruntime engine: the gate node ends
pending with the reasons and its verdict in the run record, nothing is cached, `report` shows the cell
``noisy`` and `publish` refuses it like a pending gate. The noise is made real: in two of the five timing blocks
the engine runs a 64x larger batch (genuinely slower runs, timed by the runtime plugin's own clock)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from orchestrator.app import gating, pipeline  # noqa: E402
from orchestrator.app.matrix import report_cells  # noqa: E402
from orchestrator.app.project import load_project  # noqa: E402
from orchestrator.atomic import write_json_atomic  # noqa: E402
from orchestrator.cli.build_cmds import run_record  # noqa: E402
from orchestrator.contracts.runtime import RuntimeOptions  # noqa: E402
from orchestrator.core.artifact import EngineDescriptor, EngineTarget  # noqa: E402
from trt_orchestrator_plugins.runtimes import onnxruntime as ort_runtime  # noqa: E402

pytestmark = pytest.mark.integration

SLOW_MS = 50.0
ADDRESS = "tiny/fp32/default@cpu+ort1.31"


def manifest(root: Path, model: Path, max_p95_ms: float) -> Path:
    path = root / "noisy.yaml"
    path.write_text(f"""
manifest_version: 1
project: noisy
defaults:
  precisions: [fp32]
  gate:
    parity: {{data: {{samples: 1, seed: 0}}}}
    benchmark: {{warmup: 2, iterations: 50, shapes: [opt], max_p95_ms: {max_p95_ms}}}
models:
  - name: tiny
    version: "1"
    source: {{path: {model}}}
    inputs:
      x:
        shape: [N, 3, H, W]
        profiles:
          default: {{min: [1, 3, 32, 32], opt: [2, 3, 32, 32], max: [4, 3, 32, 32]}}
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}}
registry: {{store: local, path: {root / "artifacts"}}}
""")
    return path


@pytest.fixture
def slow_spells(monkeypatch):
    """Blocks 2 and 4 of every benchmark run during a slow spell: the real session times the real engine, then
    every sample of those blocks is SLOW_MS later (a spell a shared runner really has; made deterministic so the
    verdict does not depend on how loaded this machine is — a 64x batch was not reliably slower under CI load)."""
    real = ort_runtime.OrtSession.benchmark
    calls = {"n": 0}

    def benchmark(self, inputs, **kw):
        calls["n"] += 1
        timing = real(self, inputs, **kw)
        if calls["n"] % 5 in (2, 4):
            timing = replace(timing, compute_ms=tuple(t + SLOW_MS for t in timing.compute_ms),
                             end_to_end_ms=tuple(t + SLOW_MS for t in timing.end_to_end_ms))
        return timing

    monkeypatch.setattr(ort_runtime.OrtSession, "benchmark", benchmark)
    return calls


def _limit(model: Path) -> float:
    """Between a calm run's p95 and a slow spell's: calm p95 + SLOW_MS / 2."""
    engine = EngineDescriptor(address=ADDRESS, precision="fp32", builder="onnxruntime", builder_version="1.31.1",
                              runtime="onnxruntime", target=EngineTarget("cpu", device="cpu"))
    session = ort_runtime.runtime.load(model, engine, RuntimeOptions())
    try:
        x = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
        calm = np.percentile(session.benchmark({"x": x}, warmup=3, iterations=40, time_budget_s=None)
                             .end_to_end_ms, 95)
    finally:
        session.close()
    assert calm < SLOW_MS / 4, f"a calm run's p95 ({calm:.2f} ms) is too close to the spell ({SLOW_MS} ms)"
    return float(calm + SLOW_MS / 2)


def test_a_noisy_benchmark_is_pending_not_cached_and_never_published(tmp_path, tiny_onnx, slow_spells):
    model = Path(tiny_onnx("noisy"))
    path = manifest(tmp_path, model, round(_limit(model), 4))
    project = load_project([str(path)], cache_dir=str(tmp_path / "cache"))
    the_plan = pipeline.plan(project)
    assert pipeline.build(project, the_plan, in_process=True).ok
    summary = gating.gate(project, the_plan, in_process=True)
    write_json_atomic(project.workspace.root / "runs" / "gate-1.json", run_record(summary, project))
    bench = next(r for r in summary.reports if r.node == f"gate:benchmark:{ADDRESS}")
    assert bench.status == "pending" and bench.data["status"] == "noisy", bench
    assert bench.reason.startswith("benchmark noisy: opt: max_p95_ms: 2 of 5 blocks fail it, 3 pass")
    assert bench.data["verdict"]["verdict"]["noisy"] == bench.data["reasons"]
    assert gating.noisy_gates(summary) == [bench.node] and gating.failed_gates(summary) == []
    assert bench.dir is None  # no verdict file, nothing cached: the next gate times it again
    log = Path(bench.log).read_text()
    assert "verdict: noisy" in log and "p50 per block" in log
    (cell,) = report_cells(project)
    assert cell["status"] == "noisy" and cell["note"].startswith("benchmark noisy")
    assert cell["reasons"] == bench.data["reasons"]
    published = pipeline.publish(project, the_plan, in_process=True)
    (pub,) = published.reports
    assert pub.status == "pending" and "gate pending" in pub.reason
    again = gating.gate(project, the_plan, in_process=True)
    assert next(r for r in again.reports if r.node == bench.node).status != "cached"
