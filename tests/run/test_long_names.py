"""Very long names (hardening item 4): a name that becomes a path part is hashed past a length limit (a readable
prefix plus a digest), so any valid model or target name builds. Reproduced first: a 300-character model name
failed every node with ``OSError: [Errno 36] File name too long`` on its log file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.core.graph import Node
from orchestrator.core.resolve import topological_order
from orchestrator.run import workspace
from orchestrator.run.executor import Executor, StepOutcome, StepTask
from orchestrator.run.workspace import Workspace, read_result

REPO = Path(__file__).resolve().parents[2]
MODEL = "m" + "x" * 299  # 300 characters: a valid manifest name ([a-z0-9][a-z0-9._-]*)
TARGET = "t" + "y" * 299
NAME_MAX = 255


def step_write(task: StepTask) -> StepOutcome:
    with open(task.log_path, "a") as log:
        log.write(f"ran {task.node.id}\n")
    (task.out_dir / "out.bin").write_bytes(task.node.id.encode())
    return StepOutcome(files=("out.bin",), data={"node": task.node.id})


def _nodes() -> dict[str, Node]:
    address = f"{MODEL}/fp32/default@cpu-{TARGET}+ort1.31"
    other = f"{MODEL}/fp16/default@cpu-{TARGET}+ort1.31"  # the same 300-character prefix, another cell
    nodes = [Node(f"prepare:{MODEL}@1.0.0", "prepare", (), "k" * 300, model=MODEL),
             Node(f"build:{address}", "build", (f"prepare:{MODEL}@1.0.0",), "b" * 64, address=address, model=MODEL),
             Node(f"build:{other}", "build", (f"prepare:{MODEL}@1.0.0",), "c" * 64, address=other, model=MODEL)]
    return {n.id: n for n in nodes}


def _parts_fit(path: Path) -> bool:
    return all(len(part.encode()) <= NAME_MAX for part in path.parts)


@pytest.mark.parametrize("in_process", [True, False])
def test_a_300_character_model_and_target_name_builds_through_the_executor(tmp_path, in_process):
    nodes = _nodes()
    ws = Workspace(tmp_path / "ws")
    ex = Executor(ws, {"prepare": step_write, "build": step_write}, lambda node: (None, None), jobs=2,
                  in_process=in_process)
    summary = ex.run(nodes, topological_order(nodes), set(nodes))
    assert summary.ok, summary.to_json()
    assert {r.status for r in summary.reports} == {"done"}
    logs = {r.node: Path(str(r.log)) for r in summary.reports}
    assert len(set(logs.values())) == 3  # distinct logs for ids that share a long prefix
    for node_id, log in logs.items():
        assert _parts_fit(log), log
        assert log.read_text() == f"ran {node_id}\n"
        assert log.name.startswith(ws.log_path(nodes[node_id]).name[:40])
        assert log.name.startswith(node_id.split(":")[0] + "_mxxx")  # a readable prefix is kept
    for node in nodes.values():
        final = ws.node_dir(node)
        assert _parts_fit(final) and read_result(final) is not None
    again = ex.run(nodes, topological_order(nodes), set(nodes))
    assert {r.status for r in again.reports} == {"cached"}


def test_safe_path_part_keeps_short_names_and_hashes_long_ones():
    safe_path_part = workspace.safe_path_part
    assert safe_path_part("build:tiny/fp32/default@cpu+ort1.31") == "build_tiny_fp32_default@cpu+ort1.31"
    long_a, long_b = "a" * 400 + "1", "a" * 400 + "2"
    part_a, part_b = safe_path_part(long_a), safe_path_part(long_b)
    assert part_a != part_b and part_a.startswith("a" * 60)
    assert len(part_a.encode()) <= 120 and len(part_b.encode()) <= 120
    assert safe_path_part(long_a) == part_a  # stable: the same name finds the same file again
    assert len(safe_path_part("é" * 200).encode()) <= 120  # bytes, not characters, are what the filesystem counts


def test_the_real_cli_builds_with_the_longest_names_a_manifest_allows(tmp_path):
    """The manifest caps names (63-character model, 63-character profile set and version); every path the
    build writes for them fits. (A 300-character name is refused by `validate`, with its line.)"""
    from tests.app.test_pipeline import MANIFEST
    from tests.conftest import make_tiny_model

    model, profile, version = "m" * 63, "p" * 63, "1" + "0" * 62
    text = (MANIFEST.replace("name: tiny", f"name: {model}").replace("name: cpu", "name: " + "t" * 63)
            .replace("          default: {min", f"          {profile}: {{min")
            .replace('version: "1.0.0"', f'version: "{version}"'))
    assert text.count(profile) == 1 and text.count(version) == 1
    make_tiny_model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "build", str(tmp_path / "m.yaml"), "--json",
                           "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ok"] and set(summary["counts"]) == {"done"}, summary["counts"]
    assert max(len(n["node"]) for n in summary["nodes"]) > 140
    for node in summary["nodes"]:
        assert _parts_fit(Path(node["log"])) and Path(node["log"]).exists()
        assert _parts_fit(Path(node["dir"]))
    for path in (tmp_path / "cache").rglob("*"):
        assert _parts_fit(path), path
