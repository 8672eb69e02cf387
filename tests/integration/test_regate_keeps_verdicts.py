"""A parity-only change re-runs parity, not the benchmark (issue 23, point 23): on a re-gate, each gate whose own
settings (and runtime) did not move keeps the verdict published with the engine; the new record carries it as it
was. Real CPU engines through the CLI."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import _model, run

pytestmark = pytest.mark.integration

CELL = "tiny/fp32/default@cpu+ort1.31"
MANIFEST = """\
manifest_version: 1
project: regate
models:
  - name: tiny
    version: "1.0.0"
    source: {path: tiny.onnx}
    inputs:
      x:
        shape: [N, 3, 32, 32]
        profiles:
          default: {min: [1, 3, 32, 32], opt: [2, 3, 32, 32], max: [4, 3, 32, 32]}
    precisions: [fp32]
    gate:
      parity: {data: {samples: 1, seed: 0}, tolerances: {fp32: {atol: ATOL, rtol: 0.001}}}
      benchmark: {warmup: 1, iterations: 20, blocks: 2, block_gap_s: 0}
targets:
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {build: [ubuntu-latest]}}
registry: {store: local, path: artifacts}
"""


def _records(root) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "artifacts" / "meta").glob("*.json"))]


def test_a_parity_only_change_keeps_the_published_benchmark_verdict(tmp_path):
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(MANIFEST.replace("ATOL", "0.0001"))
    for verb in ("build", "gate", "publish"):
        proc = run(verb, "m.yaml", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    (first,) = _records(tmp_path)

    (tmp_path / "m.yaml").write_text(MANIFEST.replace("ATOL", "0.0002"))
    plan = json.loads(run("plan", "m.yaml", "--json", cwd=tmp_path).stdout)
    (cell,) = plan["cells"]
    assert cell["status"] == "regate" and all("parity" in change for change in cell["changes"]), cell
    for verb in ("build", "gate"):
        proc = run(verb, "m.yaml", "--json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    nodes = {n["node"]: n for n in json.loads(proc.stdout)["nodes"]}
    assert nodes[f"gate:parity:{CELL}"]["status"] == "done" and not nodes[f"gate:parity:{CELL}"]["data"].get("kept")
    bench = nodes[f"gate:benchmark:{CELL}"]
    assert bench["status"] == "done" and bench["data"].get("kept") is True, bench  # not timed again
    proc = run("publish", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    second = next(r for r in _records(tmp_path) if r["record_key"] != first["record_key"])
    assert second["build_key"] == first["build_key"] and second["engine"] == first["engine"]
    # the benchmark verdict is the published one, timings and all; parity was judged again, under the new atol
    assert second["gates"]["benchmark"] == first["gates"]["benchmark"]
    tolerance = second["gates"]["parity"]["profiles"]["default"]["cases"][0]["outputs"][0]["tolerance"]
    assert tolerance["atol"] == 0.0002
