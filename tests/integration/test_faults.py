"""Fault injection with the real CLI (hardening issue, "a fault test in CI"): ``orchestrate build`` and
``orchestrate publish`` (local store and a real OCI registry) are SIGKILLed at random points, and after every
kill:

* nothing partial, invisible or wrong: every node dir in the cache is complete (its result and files intact;
  an engine's bytes are the digest its result records; a transform's ONNX loads), no temp file is in place of a
  result; every artifact the store lists has the engine bytes its metadata names, and they are the bytes built
  for that cell under that build key; every record the local store holds is listed (none invisible);
* no process of the killed command is left running (its workers and what they started die with it);
* a rerun completes (exit 0), after which the plan (the ``plan`` verb, asked in this process) has every cell up
  to date and the store lists exactly the cells, each with its built engine; the cache's temporary area is
  empty again.

Kill delays are drawn with a fixed seed, stratified over three spans: the command's whole run (start-up
included), its nodes' run (from the first node's start) and, for publish, the store's own writes (from the
first bytes reaching the store: between blobs, record and index, or between the manifest PUTs). Each test
prints where its kills landed (``-s``). A tiny CPU-only manifest (onnxruntime builder, fp32 and an fp16
transform) keeps each trial around two seconds. The crash *between writing a record and the index* is forced
deterministically in tests/integration/test_local_store.py::
test_a_crash_between_record_and_index_never_hides_the_artifact (not repeated here).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import RegistryServer, registry  # noqa: F401
except ImportError:
    from registry_server import RegistryServer, registry  # noqa: F401

from orchestrator import plugins
from orchestrator.core.model import RegistryConfig
from orchestrator.run.workspace import read_result
from tests.conftest import make_tiny_model
from tests.run.procs import kill_all, survivors, with_env

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

REPO = Path(__file__).resolve().parents[2]
SEED = 20261121
BUILD_TRIALS, LOCAL_PUBLISH_TRIALS, OCI_PUBLISH_TRIALS = 7, 7, 7  # >= 20 kills per run in all
GONE_WITHIN_S = 5.0
ORT_FAMILY = ".".join(metadata.version("onnxruntime").split(".")[:2])
CELLS = (f"tiny/fp32/default@cpu+ort{ORT_FAMILY}", f"tiny/fp16/default@cpu+ort{ORT_FAMILY}")
TEMP_NAMES = (".tmp", ".incoming.", ".new")

MANIFEST = """\
manifest_version: 1
project: faults
defaults:
  precisions:
    - fp32
    - {{name: fp16, via: transform}}
  gate:
    allow_ungated_publish: true
models:
  - name: tiny
    version: "1.0.0"
    source: {{path: tiny.onnx}}
    inputs:
      x:
        shape: [N, 3, H, W]
        profiles:
          default: {{min: [1, 3, 8, 8], opt: [2, 3, 16, 16], max: [4, 3, 32, 32]}}
targets:
  - name: cpu
    builder: onnxruntime
    builder_version: "{ort}"
    device: cpu
registry: {registry}
"""


# ---- running and killing the CLI -------------------------------------------------------------------------------

@dataclass
class Kill:
    """One trial's kill: when, and what was left running right after (must be nothing)."""

    delay: float  # from the start, or from when the trial's trigger held
    mode: str  # "start", "work" (the first node started) or "store" (the first bytes reached the store)
    exit_code: int | None  # the command ended by itself before the kill landed
    left_running: list = field(default_factory=list)


def _command(folder: Path, verb: str, manifest: str, cache: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator", verb, str(folder / manifest), "--cache-dir", str(cache)] + \
        (["-j", "2"] if verb == "build" else [])


def _run(folder: Path, verb: str, manifest: str, cache: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(_command(folder, verb, manifest, cache) + ["--json"], capture_output=True, text=True,
                          cwd=folder, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def _timed_run(folder: Path, verb: str, manifest: str, cache: Path) -> float:
    t0 = time.monotonic()
    proc = _run(folder, verb, manifest, cache)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return time.monotonic() - t0


def _work_started(cache: Path) -> Callable[[], bool]:
    """A node of this command is running: its temporary dir exists (the executor makes one per started node)."""
    tmp = cache / "tmp"

    def started() -> bool:
        try:
            return any(not e.name.endswith(".owner") and not e.name.startswith(".") for e in tmp.iterdir())
        except FileNotFoundError:
            return False

    return started


def _store_touched(config: RegistryConfig, server: RegistryServer | None) -> Callable[[], bool]:
    """The first bytes of a publish reached the store: its blob folder exists (local), or an upload to the
    trial's repositories began (OCI). A kill soon after lands inside ``put``: between blobs, record and index,
    or between the manifest PUTs."""
    if server is None:
        blobs = Path(str(config.path)) / "blobs"
        return blobs.exists
    repos = server.storage / "docker/registry/v2/repositories" / str(config.url).split("/", 1)[1]
    return repos.exists


def _kill_after(folder: Path, verb: str, manifest: str, cache: Path, delay: float, mode: str,
                trigger: Callable[[], bool] | None) -> Kill:
    """SIGKILL the command ``delay`` s after it starts, or after ``trigger`` first holds (polled every 2 ms)."""
    marker = f"TRT_ORCHESTRATOR_FAULT_TRIAL={uuid.uuid4().hex}"
    name, value = marker.split("=", 1)
    proc = subprocess.Popen(_command(folder, verb, manifest, cache), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=folder,
                            env={**os.environ, "PYTHONPATH": str(REPO), name: value})
    if trigger is not None:
        deadline = time.monotonic() + 60
        while proc.poll() is None and not trigger() and time.monotonic() < deadline:
            time.sleep(0.002)
    try:
        proc.wait(timeout=delay)
        ended = proc.returncode
    except subprocess.TimeoutExpired:
        ended = None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = survivors(with_env(marker), GONE_WITHIN_S)  # every descendant carries the marker
    kill_all(left)
    return Kill(delay, mode, ended, left)


# ---- what must hold after every kill ---------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def check_cache(cache: Path) -> dict[str, int]:
    """Every node dir in place is complete and right; returns how many of each kind are done."""
    done: dict[str, int] = {}
    nodes = cache / "nodes"
    for kind_dir in sorted(nodes.iterdir()) if nodes.exists() else []:
        for node_dir in kind_dir.iterdir():
            result = read_result(node_dir)
            assert result is not None, f"a node dir without a complete result is in place: {node_dir}"
            for path in node_dir.rglob("*"):
                assert not any(t in path.name for t in TEMP_NAMES), f"a temp file in a result: {path}"
            data = result["data"]
            if kind_dir.name == "build":
                engine = node_dir / data["engine"]
                assert _sha256(engine) == data["engine_digest"], f"engine bytes differ from its result: {engine}"
                assert engine.stat().st_size == data["engine_size"]
            if kind_dir.name == "transform":
                import onnx

                onnx.checker.check_model(onnx.load(str(node_dir / "model.onnx")))
            done[kind_dir.name] = done.get(kind_dir.name, 0) + 1
    return done


def built_engines(cache: Path) -> dict[str, tuple[str, str, Path]]:
    """address -> (build key, engine digest, engine path) of the builds in a cache."""
    out = {}
    for node_dir in (cache / "nodes" / "build").iterdir():
        result = read_result(node_dir)
        assert result is not None
        out[result["node"].split(":", 1)[1]] = (result["key"], result["data"]["engine_digest"],
                                               node_dir / result["data"]["engine"])
    return out


def check_store(config: RegistryConfig, engines: dict[str, tuple[str, str, Path]], scratch: Path) -> int:
    """Every artifact the store lists is whole and right; returns how many it lists."""
    store = plugins.open_store(config)
    records = store.records()
    for rec in records:
        meta = rec.metadata
        address = meta["address"]
        assert address in engines, f"an artifact for a cell that was never built: {address}"
        key, digest, engine = engines[address]
        assert meta["build_key"] == key, f"{address}: published under build key {meta['build_key']}, built as {key}"
        assert rec.digest == meta["engine"]["digest"] == digest, f"{address}: the wrong engine is published"
        out = scratch / f"pulled-{uuid.uuid4().hex}"
        store.get(rec.digest, out)  # the store verifies the bytes against the digest while writing
        assert out.read_bytes() == engine.read_bytes(), f"{address}: the pulled bytes are not the built engine"
        out.unlink()
    addresses = [r.metadata["address"] for r in records]
    assert len(addresses) == len(set(addresses)), f"one cell published twice: {addresses}"
    if config.store == "local":
        root = Path(str(config.path))
        recorded = {p.stem for p in (root / "meta").glob("*.json")} if (root / "meta").exists() else set()
        assert recorded == {r.metadata.get("record_key") or r.metadata["build_key"] for r in records}, \
            "a record the store does not list"
        for blob in (root / "blobs" / "sha256").iterdir() if (root / "blobs" / "sha256").exists() else []:
            if not any(t in blob.name for t in TEMP_NAMES):  # under its final name: whole
                assert _sha256(blob) == f"sha256:{blob.name}", f"a partial blob under its final name: {blob}"
    return len(records)


def oci_landing(server: RegistryServer, config: RegistryConfig) -> tuple[int, int]:
    """What a killed OCI publish got into the registry: (blobs linked, manifests), for the trial's repositories."""
    prefix = str(config.url).split("/", 1)[1]
    repos = server.storage / "docker/registry/v2/repositories" / prefix
    return (len(list(repos.glob("*/_layers/sha256/*/link"))),
            len(list(repos.glob("*/_manifests/revisions/sha256/*/link"))))


def temp_leftovers(config: RegistryConfig) -> int:
    """Temp files a killed publish left in a local store (never referenced; counted, reported)."""
    blobs = Path(str(config.path)) / "blobs" / "sha256"
    return len([b for b in blobs.iterdir() if any(t in b.name for t in TEMP_NAMES)]) if blobs.exists() else 0


def check_rerun(folder: Path, verb: str, manifest: str, cache: Path) -> dict:
    proc = _run(folder, verb, manifest, cache)
    assert proc.returncode == 0, f"the rerun of {verb} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    summary = json.loads(proc.stdout)
    assert summary["ok"], summary
    leftovers = [p for p in (cache / "tmp").iterdir()] if (cache / "tmp").exists() else []
    assert leftovers == [], f"temporary files outlived the rerun: {leftovers}"
    return summary


def check_plan_up_to_date(folder: Path, manifest: str, cache: Path) -> None:
    """What `orchestrate plan` would say (the same verb, in this process: a CLI start per trial costs ~0.6 s)."""
    from orchestrator.app import pipeline
    from orchestrator.app.project import load_project

    the_plan = pipeline.plan(load_project([folder / manifest], cache_dir=cache))
    status = {e.address: e.status for e in the_plan.entries}
    assert status == {c: "up-to-date" for c in CELLS}, f"not every cell is visible as published: {status}"


# ---- the project -----------------------------------------------------------------------------------------------

@dataclass
class Project:
    folder: Path
    cache: Path  # a finished build, published from by the publish trials
    engines: dict[str, tuple[str, str, Path]]
    build_seconds: float
    rng: random.Random


def write_manifest(folder: Path, name: str, registry_yaml: str) -> str:
    (folder / name).write_text(MANIFEST.format(ort=ORT_FAMILY, registry=registry_yaml))
    return name


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    folder = tmp_path_factory.mktemp("faults")
    make_tiny_model(folder / "tiny.onnx")
    write_manifest(folder, "m.yaml", "{store: local, path: artifacts}")
    cache = folder / "cache"
    seconds = _timed_run(folder, "build", "m.yaml", cache)
    check_cache(cache)
    return Project(folder, cache, built_engines(cache), seconds, random.Random(SEED))


# Kills after a publish's first bytes reached the store land within this much of them: about the time the store
# takes to write both artifacts here (local: ~40 ms; OCI: blob uploads and two manifest PUTs each, ~0.3 s).
STORE_WINDOW_S = {"local": 0.04, "oci": 0.3}


def _delays(rng: random.Random, baseline: float, modes: list[str], store_window: float = 0.0
            ) -> list[tuple[float, str]]:
    """(delay, mode) per trial, spread over each mode's span (stratified: one draw per equal slice), shuffled:
    "start" over the command's whole run (start-up included), "work" over its nodes' run, "store" over the
    first ``store_window`` s of the store's writes."""
    out = []
    for mode in dict.fromkeys(modes):
        n = modes.count(mode)
        span = {"start": baseline * 1.1, "work": baseline * 0.6, "store": store_window}[mode]
        out += [(round(span * (i + rng.random()) / n, 3), mode) for i in range(n)]
    rng.shuffle(out)
    return out


def _report(what: str, kills: list[Kill], states: list, seconds: float) -> None:
    ended = sum(k.exit_code is not None for k in kills)
    landed = ", ".join(f"{k.mode}+{k.delay:.3f}s:{state}" for k, state in zip(kills, states))
    print(f"\n[faults] {what}: {len(kills)} trials in {seconds:.1f} s; {ended} ended before the kill; "
          f"kill (mode+delay:state) {landed}")


# ---- the trials ------------------------------------------------------------------------------------------------

def test_sigkill_during_build(project):
    t0 = time.monotonic()
    kills, states = [], []
    modes = ["start", "work"] * (BUILD_TRIALS // 2) + ["work"] * (BUILD_TRIALS % 2)
    for trial, (delay, mode) in enumerate(_delays(project.rng, project.build_seconds, modes)):
        cache = project.folder / f"build-{trial}"
        kill = _kill_after(project.folder, "build", "m.yaml", cache, delay, mode,
                           _work_started(cache) if mode == "work" else None)
        kills.append(kill)
        assert not kill.left_running, f"trial {trial}: still running after the kill: {kill.left_running}"
        done = check_cache(cache)
        states.append(sum(done.values()))
        summary = check_rerun(project.folder, "build", "m.yaml", cache)
        assert {n["status"] for n in summary["nodes"]} <= {"done", "cached"}
        assert check_cache(cache) == {"prepare": 1, "transform": 1, "build": 2}
        assert set(built_engines(cache)) == set(CELLS)
    _report("build", kills, states, time.monotonic() - t0)
    assert any(0 < s < 4 for s in states), f"no kill landed in the middle of a build: {states}"


def _publish_trials(project: Project, what: str, registries: list[str], baseline: float,
                    server: RegistryServer | None = None) -> None:
    t0 = time.monotonic()
    kills, states = [], []
    n = len(registries)
    modes = ["start"] * (n // 4) + ["work"] * (n // 4) + ["store"] * (n - 2 * (n // 4))
    delays = _delays(project.rng, baseline, modes, STORE_WINDOW_S[what])
    for trial, (registry_yaml, (delay, mode)) in enumerate(zip(registries, delays)):
        manifest = write_manifest(project.folder, f"{what}-{trial}.yaml", registry_yaml)
        config = _config(project.folder, registry_yaml)
        trigger = {"start": None, "work": _work_started(project.cache),
                   "store": _store_touched(config, server)}[mode]
        kill = _kill_after(project.folder, "publish", manifest, project.cache, delay, mode, trigger)
        kills.append(kill)
        assert not kill.left_running, f"trial {trial}: still running after the kill: {kill.left_running}"
        check_cache(project.cache)
        visible = check_store(config, project.engines, project.folder)
        if server is not None:  # (artifacts listed, blobs linked, manifests) in the registry
            states.append((visible, *oci_landing(server, config)))
        else:  # (artifacts listed, temp blobs left)
            states.append((visible, temp_leftovers(config)))
        check_rerun(project.folder, "publish", manifest, project.cache)
        assert check_store(config, project.engines, project.folder) == len(CELLS)
        check_plan_up_to_date(project.folder, manifest, project.cache)
    _report(what, kills, states, time.monotonic() - t0)
    assert any(k.mode == "store" and k.exit_code is None for k in kills), "no kill landed inside a store's put"


def _config(folder: Path, registry_yaml: str) -> RegistryConfig:
    inner = dict(part.split(": ", 1) for part in registry_yaml.strip("{}").split(", "))
    if inner["store"] == "local":
        return RegistryConfig(store="local", path=str(folder / inner["path"]))
    return RegistryConfig(store="oci", url=inner["url"].strip('"'), insecure=True)


def test_sigkill_during_local_publish(project):
    baseline = _timed_run(project.folder, "publish", write_manifest(project.folder, "local-baseline.yaml",
                                                                     "{store: local, path: store-baseline}"),
                          project.cache)
    registries = [f"{{store: local, path: store-{i}}}" for i in range(LOCAL_PUBLISH_TRIALS)]
    _publish_trials(project, "local", registries, baseline)


def test_sigkill_during_oci_publish(project, registry: RegistryServer):
    base = write_manifest(project.folder, "oci-baseline.yaml",
                          f'{{store: oci, url: "{registry.host}/baseline", insecure: true}}')
    baseline = _timed_run(project.folder, "publish", base, project.cache)
    registries = [f'{{store: oci, url: "{registry.host}/faults{i}", insecure: true}}'
                  for i in range(OCI_PUBLISH_TRIALS)]
    _publish_trials(project, "oci", registries, baseline, registry)
