"""The upgrade rehearsal on the published demo (issue 26.2): its real TensorRT-RTX AOT engines and onnxruntime
engines, judged for a move to another TensorRT-RTX release, to the same one, and to another onnxruntime.

The rehearsal's list is checked engine by engine against something it does not compute: each RTX engine's own plan
header (its version bytes, read from the published file) against the new release's rule (an RTX engine runs only
on the RTX release that built it: major.minor.patch), listed and unlisted engines alike; and the onnxruntime
engines against the onnxruntime runtime's `can_run`. No false positive: nothing listed as stopping passes the
header check of the new release, nothing kept fails it. With `--inventory` (the output of `pull --all --json`) the
engines judged are exactly the deployed files, each on the GPUs it was pulled for."""

from __future__ import annotations

import json

import pytest

from orchestrator import plugins
from orchestrator.app.judge import descriptor
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.model import RegistryConfig
from trt_orchestrator_plugins._trt.plan_header import check_header, read_header_file

pytestmark = pytest.mark.integration

NEW_RTX = "1.8.0.1"  # a later TensorRT-RTX release: no engine of the demo was built by it


@pytest.fixture(scope="module")
def published(demo_published, tmp_path_factory):
    """Every published record of the demo, each with its engine file fetched through the store (digest checked)."""
    root = tmp_path_factory.mktemp("upgrade-demo")
    store = plugins.open_store(RegistryConfig(path=str(demo_published.store)))
    files = {}
    for art in store.records():
        dest = root / art.digest.replace(":", "-")
        store.get(art.digest, dest)
        files[art.metadata["address"]] = (art.metadata, dest)
    return demo_published, files


def _rtx_header_says(meta: dict, path, release: str) -> bool:
    """Whether the engine's own header says it runs on RTX ``release``: the header's version is that release's
    major.minor.patch (the RTX runtime's rule)."""
    return check_header(read_header_file(path), "tensorrt-rtx", ".".join(release.split(".")[:3])) is None


def test_a_new_rtx_release_stops_every_rtx_engine_as_their_headers_say(published):
    demo, files = published
    data, proc = demo.run_json("upgrade-check", str(demo.manifest), "--to", f"rtx{NEW_RTX}")
    assert proc.returncode == 0, proc.stderr
    engines = {e["address"]: e for e in data["engines"]}
    assert set(engines) == set(files)  # every published engine of the demo, listed or not, is judged once
    rtx = 0
    for address, (meta, path) in files.items():
        engine = engines[address]
        assert engine["source"] == "published" and engine["digest"] == meta["engine"]["digest"]
        if meta["runtime"] != "tensorrt-rtx":
            assert engine["status"] == "other-runtime"
            continue
        rtx += 1
        old = _rtx_header_says(meta, path, meta["builder"]["version"])
        new = _rtx_header_says(meta, path, NEW_RTX)
        assert old and not new
        assert engine["status"] == "stops", engine
        # judged on each CC it was built for, stopping on every one
        assert [g["gpu"] for g in engine["gpus"]] == ["sm" + c.replace(".", "") for c in
                                                      meta["target"]["compute_capabilities"]]
        assert all(g["old"]["loads"] and not g["new"]["loads"] for g in engine["gpus"])
    assert rtx == 12 and data["summary"]["stops"] == 12
    # the rebuild set: each RTX cell re-targeted at 1.8.0.1, as plan would address it, predicted from the records
    assert {r["replaces"] for r in data["rebuild"]} == {a for a, (m, _) in files.items()
                                                        if m["runtime"] == "tensorrt-rtx"}
    assert all("+rtx1.8" in r["address"] and r["status"] == "build" for r in data["rebuild"])
    assert all(r["predicted_build"]["basis"] == "same cell" and r["predicted_build"]["records"] == 1
               for r in data["rebuild"])
    print(f"demo -> rtx{NEW_RTX}: {data['summary']['text']}")


def test_the_same_rtx_release_keeps_every_engine_as_their_headers_say(published):
    demo, files = published
    release = next(m["builder"]["version"] for m, _ in files.values() if m["runtime"] == "tensorrt-rtx")
    data, proc = demo.run_json("upgrade-check", str(demo.manifest), "--to", f"rtx{release}",
                               "--detailed-exitcode")
    assert proc.returncode == 0
    for engine in data["engines"]:
        meta, path = files[engine["address"]]
        if meta["runtime"] == "tensorrt-rtx":
            assert _rtx_header_says(meta, path, release) and engine["status"] == "keeps"
    assert data["rebuild"] == [] and data["summary"]["breaking"] is False


def test_a_new_onnxruntime_stops_the_cpu_engines_as_the_runtime_says(published):
    demo, files = published
    data, _ = demo.run_json("upgrade-check", str(demo.manifest), "--to", "ort1.32")
    runtime = plugins.runtime("onnxruntime")
    fp = RunnerFingerprint(os="linux", arch="x86_64").with_runtime(
        "onnxruntime", InstalledRuntime("1.32", ("CPUExecutionProvider",)))
    ort = [e for e in data["engines"] if e["runtime"] == "onnxruntime"]
    assert len(ort) == 6
    for engine in ort:
        meta, _ = files[engine["address"]]
        said = runtime.can_run(descriptor(meta), fp)
        assert engine["status"] == "stops" and not said.ok and engine["gpus"][0]["new"]["reason"] == said.reason
    assert {e["status"] for e in data["engines"] if e["runtime"] != "onnxruntime"} == {"other-runtime"}


def test_an_inventory_judges_exactly_what_is_deployed(published, tmp_path):
    demo, files = published
    pulled, _ = demo.run_json("pull", "--all", "--gpus", "sm86,sm89,none", "-o", str(tmp_path / "models"),
                              "--registry", str(demo.store))
    (tmp_path / "inventory.json").write_text(json.dumps(pulled))
    data, proc = demo.run_json("upgrade-check", str(demo.manifest), "--to", f"rtx{NEW_RTX}", "--inventory",
                               str(tmp_path / "inventory.json"))
    assert proc.returncode == 0, proc.stderr
    deployed = {e["digest"]: e for e in pulled["engines"]}
    assert sorted(e["digest"] for e in data["engines"]) == sorted(deployed)
    for engine in data["engines"]:
        entry = deployed[engine["digest"]]
        assert engine["source"] == "deployed" and engine["path"] == entry["path"]
        meta, path = files[engine["address"]]
        if meta["runtime"] == "tensorrt-rtx":
            assert [g["gpu"] for g in engine["gpus"]] == entry["gpus"]  # the GPUs it was pulled for
            assert engine["status"] == ("keeps" if _rtx_header_says(meta, path, NEW_RTX) else "stops")
        else:
            assert engine["status"] == "other-runtime"
