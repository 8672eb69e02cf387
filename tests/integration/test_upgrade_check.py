"""The upgrade rehearsal for real (issue 26.2): an onnxruntime 1.22.1 engine (the orientation classifier, fp32, CPU,
built, gated and published by the real onnxruntime 1.22.1, first on PYTHONPATH as in test_drift_gate.py) is the
deployed stack; `upgrade-check --to ort1.31` rehearses the move to the onnxruntime the project pins.

Shown: the engine is listed as stopping to load with onnxruntime's own reason, and the list equals what the
onnxruntime runtime's `can_run` says for the new release; the rebuild set's cell and build key are those `plan`
computes for the manifest declaring 1.31; the prediction rests on the one recorded build; `--build` builds and
gates it for real (the drift gate compares it with the 1.22 engine: outputs on the five pictures and p50) and
publishes nothing; `--build --publish` publishes it, after which `plan` of the 1.31 manifest is up to date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import plugins
from orchestrator.app.judge import descriptor
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint

from .conftest import orchestrate, run_json
from .test_drift_gate import OLD, OLD_CELL, _manifest, old_onnxruntime  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration

NEW_CELL = OLD_CELL.replace("ort1.22", "ort1.31")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, pictures, old_onnxruntime):  # noqa: F811
    """The 1.22.1 engine built, gated and published; the manifest that deployed it still declares 1.22."""
    root = tmp_path_factory.mktemp("upgrade")
    registry = root / "registry"
    old = _manifest(root / "old", pictures, "1.22", registry)
    for verb in ("build", "gate", "publish"):
        orchestrate(verb, str(old), cache=root / "old-cache", env_extra={"PYTHONPATH": str(old_onnxruntime)})
    new = _manifest(root / "new", pictures, "1.31", registry)
    return root, registry, old, new


def _records(root: Path, registry: Path) -> list[dict]:
    listing, _ = run_json("ls", "--registry", str(registry), cache=root / "ls")
    return listing["artifacts"] if isinstance(listing, dict) else listing


def test_the_rehearsal_lists_the_engine_with_the_runtimes_own_answer(deployed):
    root, registry, old, new = deployed
    data, proc = run_json("upgrade-check", str(old), "--to", "ort1.31", cache=root / "check")
    assert proc.returncode == 0  # engines that stop loading are a finding, not an error (see --detailed-exitcode)
    (engine,) = data["engines"]
    assert engine["address"] == OLD_CELL and engine["source"] == "published" and engine["status"] == "stops"
    assert engine["builder"] == {"name": "onnxruntime", "version": OLD}
    # the onnxruntime runtime's own can_run, asked here directly for the new release, says the same
    record, _ = run_json("show", OLD_CELL, "--registry", str(registry), cache=root / "ls")
    runtime = plugins.runtime("onnxruntime")
    fp = RunnerFingerprint(os="linux", arch="x86_64").with_runtime(
        "onnxruntime", InstalledRuntime("1.31", ("CPUExecutionProvider",)))
    said = runtime.can_run(descriptor(record), fp)
    assert not said.ok and engine["gpus"][0]["new"] == {"loads": False, "reason": said.reason}
    assert engine["gpus"][0]["old"]["loads"] is True  # on the release that built it, it loads
    assert "major.minor must match" in engine["reason"]
    # the file's own check (an ONNX file carries no runtime version: onnxruntime's verify_engine reads nothing more)
    assert data["summary"]["stops"] == 1 and data["summary"]["breaking"] is True
    code = orchestrate("upgrade-check", str(old), "--to", "ort1.31", "--detailed-exitcode", cache=root / "check",
                       check=False).returncode
    assert code == 2
    same, proc = run_json("upgrade-check", str(old), "--to", "ort1.22.1", "--detailed-exitcode", cache=root / "check")
    assert proc.returncode == 0 and same["summary"]["keeps"] == 1 and same["rebuild"] == []


def test_the_rebuild_set_is_what_plan_computes_for_the_new_stack(deployed):
    root, registry, old, new = deployed
    data, _ = run_json("upgrade-check", str(old), "--to", "ort1.31", cache=root / "check")
    (rebuild,) = data["rebuild"]
    plan, _ = run_json("plan", str(new), cache=root / "plan")
    (cell,) = plan["cells"]
    assert (rebuild["address"], rebuild["build_key"], rebuild["status"]) == (NEW_CELL, cell["build_key"], "build")
    assert rebuild["replaces"] == OLD_CELL
    # predicted from the one recorded build of the same cell (another onnxruntime version)
    record, _ = run_json("show", OLD_CELL, "--registry", str(registry), cache=root / "ls")
    assert rebuild["predicted_build"] == {"seconds": round(record["timings"]["build_seconds"], 3), "records": 1,
                                          "basis": "same cell"}
    assert data["summary"]["predicted_from_records"] == 1


def test_build_rebuilds_and_gates_with_the_drift_gate_and_publishes_nothing(deployed):
    root, registry, old, new = deployed
    before = json.dumps(_records(root, registry), sort_keys=True)
    page = root / "rehearsal.html"
    data, proc = run_json("upgrade-check", str(old), "--to", "ort1.31", "--build", "--report", str(page),
                          cache=root / "rehearsal", timeout=1800)
    assert proc.returncode == 0, proc.stderr
    rehearsal = data["rehearsal"]
    assert rehearsal["cells"] == [NEW_CELL] and rehearsal["not_built"] == {} and rehearsal["published"] is None
    (summary,) = rehearsal["report"]["summary"]
    assert summary["address"] == NEW_CELL and summary["status"] == "passed"
    drift = summary["drift"]
    assert drift["baseline"] == OLD_CELL and drift["builder_version"] == OLD
    assert drift["compared"] == 5 and drift["worst_cosine"] > 0.9999  # two CPU builds of one model agree
    assert drift["baseline_p50_ms"] > 0 and drift["p50_ms"] > 0 and drift["change_pct"] is not None
    assert 'id="drift"' in page.read_text()
    assert json.dumps(_records(root, registry), sort_keys=True) == before  # nothing published
    text = orchestrate("upgrade-check", str(old), "--to", "ort1.31", "--build", "--report", str(page),
                       cache=root / "rehearsal").stdout
    assert f"vs {OLD}" in text and "nothing was published" in text
    # `orchestrate report --upgrade-to` shows the same rows from the cache dir the rehearsal built in
    shown, _ = run_json("report", str(old), "--upgrade-to", "ort1.31", "--out", str(root / "r.html"),
                        cache=root / "rehearsal")
    (row,) = shown["summary"]
    assert row["address"] == NEW_CELL and row["drift"]["baseline"] == OLD_CELL and row["drift"]["compared"] == 5


def test_build_publish_publishes_the_key_plan_expects(deployed):
    root, registry, old, new = deployed
    data, proc = run_json("upgrade-check", str(old), "--to", "ort1.31", "--build", "--publish",
                          "--report", str(root / "p.html"), cache=root / "rehearsal", timeout=1800)
    assert proc.returncode == 0, proc.stderr
    (published,) = data["rehearsal"]["published"]["published"]
    assert published["address"] == NEW_CELL
    plan, _ = run_json("plan", str(new), cache=root / "plan")
    assert [c["status"] for c in plan["cells"]] == ["up-to-date"]
