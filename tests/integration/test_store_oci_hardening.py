"""The oci store under the registry edge faults of the hardening issue (#11), each against real servers and real
processes: a registry that never answers, a web server that is not a registry, a registry without
``/v2/_catalog``, a publisher killed between its manifest PUTs, docker credentials (``DOCKER_CONFIG``, malformed
``auth`` entries) and a missing ``oci`` extra.

Item -> test:
  1 never-answering registry       test_item1_*
  2 404-everywhere web server      test_item2_*
  3 no /v2/_catalog                test_item3_*
  4 killed between manifest PUTs   test_item4_*
  5 docker config                  test_item5_*
  6 missing extra                  test_item6_*
  issue 23: urllib3's Retry under requests: Retry-After, transient statuses, the deadline   test_retry_*
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import (  # noqa: F401
        Blackhole,
        RegistryProxy,
        RegistryServer,
        StaticHttp,
        make_artifact,
        registry,
        require_binary,
    )
except ImportError:
    from registry_server import (  # noqa: F401
        Blackhole,
        RegistryProxy,
        RegistryServer,
        StaticHttp,
        make_artifact,
        registry,
        require_binary,
    )

from orchestrator.core.model import RegistryConfig
from orchestrator.errors import StoreError, StoreUnavailableError
from trt_orchestrator_plugins.stores.oci import OciStore, readable_tag

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def oci(host: str, prefix: str) -> OciStore:
    store = OciStore(RegistryConfig(store="oci", url=f"{host}/{prefix}", insecure=True))
    store.backoff_s = 0.05
    return store


def cli(*args: str, env: dict | None = None, timeout: float = 120, pre: str = "") -> subprocess.CompletedProcess:
    """The real CLI in a fresh interpreter (``pre``: Python run first, e.g. to hide a module)."""
    code = f"{pre}\nimport sys\nfrom orchestrator.cli import main\nsys.argv = ['orchestrate', *sys.argv[1:]]\nmain()\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """exit 1, no traceback, stderr = one ``error:`` line (plus its ``hint:`` line); returns the error line."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: "), proc.stderr
    assert all(line.startswith("  hint: ") for line in lines[1:]), proc.stderr
    return lines[0]


# ---- 1. a registry that accepts connections and never answers --------------------------------------------------

def test_item1_a_registry_that_never_answers_fails_within_the_deadline_through_the_cli(tmp_path):
    with Blackhole() as hole:
        started = time.monotonic()
        try:
            proc = cli("ls", "--registry", f"oci://{hole.host}/engines",
                       env={"ORCHESTRATE_REGISTRY_TIMEOUT": "2"}, timeout=45)
        except subprocess.TimeoutExpired:
            pytest.fail("`orchestrate ls` against a registry that never answers was still waiting after 45 s "
                        "(deadline 2 s)")
        took = time.monotonic() - started
        assert hole.accepted >= 1
    line = one_line_error(proc)
    assert hole.host in line and "2 s" in line, line
    assert "ORCHESTRATE_REGISTRY_TIMEOUT" in proc.stderr
    assert took < 20, took


def test_item1_publish_to_a_registry_that_never_answers_is_bounded_in_process(tmp_path, monkeypatch):
    files = make_artifact(tmp_path / "b", size=64 * 1024)
    monkeypatch.setenv("ORCHESTRATE_REGISTRY_TIMEOUT", "1.5")
    with Blackhole() as hole:
        store = oci(hole.host, "engines")
        outcome: dict = {}

        def publish():
            try:
                store.put(files)
            except BaseException as e:  # noqa: BLE001 - reported below
                outcome["error"] = e

        started = time.monotonic()
        worker = threading.Thread(target=publish, daemon=True)
        worker.start()
        worker.join(30)
        took = time.monotonic() - started
        assert not worker.is_alive(), "put() against a registry that never answers did not return within 30 s"
    error = outcome.get("error")
    assert isinstance(error, StoreUnavailableError), repr(error)
    assert hole.host in str(error) and "1.5 s" in str(error), str(error)
    assert took < 10, took


@pytest.mark.parametrize("hang", ["PUT /v2/stall/", "GET /v2/stall/ocr-det/blobs/"])
def test_item1_a_registry_that_stops_answering_mid_operation_is_bounded(hang, registry, tmp_path, monkeypatch):
    files = make_artifact(tmp_path / "b", size=64 * 1024)
    stored = oci(registry.host, "stall").put(files) if hang.startswith("GET") else None
    monkeypatch.setenv("ORCHESTRATE_REGISTRY_TIMEOUT", "2")
    with RegistryProxy(registry.host, refuse=(), hang=(hang,)) as proxy:
        store = oci(proxy.host, "stall")
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError) as exc:
            if stored is None:
                store.put(make_artifact(tmp_path / "c", size=64 * 1024, seed=7, salt="stall"))
            else:
                store.get(stored.digest, tmp_path / "out.plan")
        took = time.monotonic() - started
    assert proxy.host in str(exc.value) and "deadline" in str(exc.value), str(exc.value)
    assert took < 15, took
    assert not (tmp_path / "out.plan").exists()


def test_item1_a_bad_deadline_value_is_a_clear_error(monkeypatch, registry):
    monkeypatch.setenv("ORCHESTRATE_REGISTRY_TIMEOUT", "soon")
    with pytest.raises(StoreError, match="ORCHESTRATE_REGISTRY_TIMEOUT"):
        oci(registry.host, "engines").index()


# ---- 2. a web server answering 404 (or HTML) everywhere is not an empty registry -----------------------------

@pytest.mark.parametrize("status", [404, 200])
def test_item2_a_web_server_is_refused_as_not_an_oci_registry(status, tmp_path):
    with StaticHttp(status) as web:
        for args in (("ls",), ("pull", "ocr-det", "-o", str(tmp_path / "e.plan")), ("show", "ocr-det/fp16/x@y")):
            proc = cli(*args, "--registry", f"oci://{web.host}/engines", timeout=60)
            line = one_line_error(proc)
            assert web.host in line and "not an OCI registry" in line, line
            assert "GET /v2/" in line, line
        with pytest.raises(StoreError, match="not an OCI registry"):
            oci(web.host, "engines").put(make_artifact(tmp_path / "b", size=4096))
        assert not (tmp_path / "e.plan").exists()


def test_item2_a_real_registry_passes_the_api_check(registry, tmp_path):
    store = oci(registry.host, "apicheck")
    assert store.records() == []  # an empty, real registry: nothing published, no error


# ---- 3. no /v2/_catalog (GHCR, Docker Hub) ---------------------------------------------------------------------

def test_item3_listing_works_without_the_catalog(registry, tmp_path):
    with RegistryProxy(registry.host, refuse=("/v2/_catalog",)) as proxy:
        writer = oci(proxy.host, "nocat")
        det = writer.put(make_artifact(tmp_path / "a", model="det", size=4096))
        rec = writer.put(make_artifact(tmp_path / "b", model="rec", size=4096))
        rec2 = writer.put(make_artifact(tmp_path / "c", model="rec", version="2.0.0", size=4096))
        before = len(proxy.asked("/v2/_catalog"))
        reader = oci(proxy.host, "nocat")  # a fresh client: nothing cached
        assert {a.digest for a in reader.records()} == {det.digest, rec.digest, rec2.digest}
        assert {a.digest for a in reader.records("rec")} == {rec.digest, rec2.digest}
        assert {e.digest for e in reader.index().entries()} == {det.digest, rec.digest, rec2.digest}
        out = tmp_path / "det.plan"
        reader.get(det.digest, out)
        assert out.read_bytes() == Path(make_artifact(tmp_path / "a", model="det", size=4096).engine).read_bytes()
        assert len(proxy.asked("/v2/_catalog")) == before  # reading never needed the catalog
        proc = cli("ls", "--registry", f"oci://{proxy.host}/nocat", "--json", timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert len(json.loads(proc.stdout)["artifacts"]) == 3


def test_item3_repositories_published_before_the_listing_index_stay_visible(registry, tmp_path):
    # An older client published without the listing index: found through the catalog while the index is missing,
    # and carried into the index by the first publish that creates it.
    old = oci(registry.host, "legacy")
    old._ensure_listed = lambda repo: None  # what an older client did: no listing entry
    legacy = old.put(make_artifact(tmp_path / "a", model="old-model", size=4096))
    assert [a.digest for a in oci(registry.host, "legacy").records()] == [legacy.digest]  # catalog fallback
    new = oci(registry.host, "legacy").put(make_artifact(tmp_path / "b", model="new-model", size=4096))
    with RegistryProxy(registry.host, refuse=("/v2/_catalog",)) as proxy:
        assert {a.digest for a in oci(proxy.host, "legacy").records()} == {legacy.digest, new.digest}


_PUBLISH_ONE_MODEL = """
import sys
from pathlib import Path
sys.path[:0] = [sys.argv[4]]
from registry_server import make_artifact
from orchestrator.core.model import RegistryConfig
from trt_orchestrator_plugins.stores.oci import OciStore
store = OciStore(RegistryConfig(store="oci", url=sys.argv[1], insecure=True))
for v in ("1.0.0", "1.1.0"):
    store.put(make_artifact(Path(sys.argv[2]) / v, model=sys.argv[3], version=v, size=16 * 1024))
"""


def test_item3_concurrent_publishers_of_new_models_all_land_in_the_listing(registry, tmp_path):
    models = [f"m{i}" for i in range(8)]
    with RegistryProxy(registry.host, refuse=("/v2/_catalog",)) as proxy:
        url = f"{proxy.host}/race"
        procs = [subprocess.Popen([sys.executable, "-c", _PUBLISH_ONE_MODEL, url, str(tmp_path / m), m, str(HERE)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for m in models]
        outs = [(p.wait(timeout=300), p.stdout.read().decode()) for p in procs]
        assert all(rc == 0 for rc, _ in outs), [o for rc, o in outs if rc]
        found = oci(proxy.host, "race").records()
        assert sorted({a.metadata["model"]["name"] for a in found}) == models
        assert len(found) == 16


# ---- 4. a publisher killed between its two manifest PUTs -----------------------------------------------------

_DIE_BETWEEN_PUTS = """
import os, sys
from pathlib import Path
sys.path[:0] = [sys.argv[4]]
from registry_server import make_artifact
from orchestrator.core.model import RegistryConfig
from trt_orchestrator_plugins.stores import oci

mode = sys.argv[3]
real = oci.OciStore._put_manifest
calls = []

def hooked(self, repo, ref, raw):
    if not repo.endswith("/ocr-det"):  # not the artifact's own repository
        return real(self, repo, ref, raw)
    calls.append(ref)
    if mode == "skip-readable" and not ref.startswith("bk-"):
        return None  # the state an older publisher left: bk- tag written, readable tag never
    if mode == "die-before-second" and len(calls) == 2:
        os._exit(137)
    real(self, repo, ref, raw)
    if mode == "die-after-first" and len(calls) == 1:
        os._exit(137)

oci.OciStore._put_manifest = hooked
store = oci.OciStore(oci.RegistryConfig(store="oci", url=sys.argv[1], insecure=True))
store.put(make_artifact(Path(sys.argv[2]), precision="fp32", size=64 * 1024))
"""


@pytest.mark.parametrize("mode", ["die-after-first", "die-before-second", "skip-readable"])
def test_item4_a_rerun_completes_a_publish_killed_between_its_manifest_puts(mode, registry, tmp_path):
    prefix = f"kill-{mode}"
    url = f"{registry.host}/{prefix}"
    proc = subprocess.run([sys.executable, "-c", _DIE_BETWEEN_PUTS, url, str(tmp_path / "b"), mode, str(HERE)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == (0 if mode == "skip-readable" else 137), proc.stderr
    files = make_artifact(tmp_path / "b", precision="fp32", size=64 * 1024)
    repo = f"{prefix}/ocr-det"
    # whatever a reader sees meanwhile is complete: every listed artifact can be pulled
    for art in oci(registry.host, prefix).records():
        oci(registry.host, prefix).get(art.digest, tmp_path / "meanwhile.plan")
    stored = oci(registry.host, prefix).put(files)  # the rerun
    store = oci(registry.host, prefix)
    by_key = store._get_manifest(repo, "bk-" + files.metadata["record_key"])
    readable = store._get_manifest(repo, readable_tag(files.metadata))
    assert by_key is not None, "the build-key tag is missing after the rerun"
    assert readable is not None, "the readable tag is missing after the rerun"
    assert readable[0] == by_key[0]
    assert [a.digest for a in store.records("ocr-det")] == [stored.digest]
    out = tmp_path / "out.plan"
    store.get(stored.digest, out)
    assert out.read_bytes() == files.engine.read_bytes()


# ---- 5. docker credentials: DOCKER_CONFIG, malformed entries -------------------------------------------------

@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory):
    require_binary()
    server = RegistryServer(tmp_path_factory.mktemp("auth-registry"), users={"alice": "s3cret"}).start()
    try:
        yield server
    finally:
        server.stop()


def _docker_config(directory: Path, host: str, auth) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return path


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_item5_credentials_come_from_DOCKER_CONFIG(auth_registry, tmp_path, monkeypatch):
    monkeypatch.delenv("ORCHESTRATE_REGISTRY_USERNAME", raising=False)
    monkeypatch.delenv("ORCHESTRATE_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.docker/config.json
    _docker_config(tmp_path / "dockercfg", auth_registry.host, _b64("alice:s3cret"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "dockercfg"))
    store = oci(auth_registry.host, "withauth")
    stored = store.put(make_artifact(tmp_path / "b", size=4096))
    assert [a.digest for a in oci(auth_registry.host, "withauth").records()] == [stored.digest]
    # without it: refused, saying how to log in
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty"))
    with pytest.raises(StoreError, match="refused"):
        oci(auth_registry.host, "withauth").records()


@pytest.mark.parametrize("auth", ["!!not base64!!", _b64("no-colon-here"), 42, "////"])
@pytest.mark.parametrize("where", ["DOCKER_CONFIG", "HOME"])
def test_item5_a_malformed_auth_entry_is_a_located_error(auth, where, auth_registry, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    cfg_dir = tmp_path / "dockercfg" if where == "DOCKER_CONFIG" else home / ".docker"
    path = _docker_config(cfg_dir, auth_registry.host, auth)
    env = {"HOME": str(home), "ORCHESTRATE_REGISTRY_USERNAME": "", "ORCHESTRATE_REGISTRY_PASSWORD": ""}
    if where == "DOCKER_CONFIG":
        env["DOCKER_CONFIG"] = str(cfg_dir)
    else:
        env["DOCKER_CONFIG"] = ""
    proc = cli("ls", "--registry", f"oci://{auth_registry.host}/withauth", env=env, timeout=60)
    line = one_line_error(proc)
    assert str(path) in line and auth_registry.host in line, line
    assert "docker login" in proc.stderr


def test_item5_a_docker_config_that_is_not_json_is_a_located_error(auth_registry, tmp_path):
    (tmp_path / "dockercfg").mkdir()
    path = tmp_path / "dockercfg" / "config.json"
    path.write_text('{"auths": {')
    proc = cli("ls", "--registry", f"oci://{auth_registry.host}/withauth", timeout=60,
               env={"HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path / "dockercfg"),
                    "ORCHESTRATE_REGISTRY_USERNAME": "", "ORCHESTRATE_REGISTRY_PASSWORD": ""})
    line = one_line_error(proc)
    assert str(path) in line and "JSON" in line, line


# ---- 6. the oci store without its extra ----------------------------------------------------------------------

def _hide(*modules: str) -> str:
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)


def test_item6_without_the_oci_extra_the_cli_prints_a_one_line_install_hint(registry):
    proc = cli("ls", "--registry", f"oci://{registry.host}/engines", pre=_hide("requests", "oras"), timeout=60)
    one_line_error(proc)
    assert "pip install 'trt-orchestrator[oci]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr


_ROUND_TRIP = """
import sys
from pathlib import Path
sys.path[:0] = [sys.argv[3]]
from registry_server import make_artifact
from orchestrator.core.model import RegistryConfig
from trt_orchestrator_plugins.stores.oci import OciStore
files = make_artifact(Path(sys.argv[2]), size=64 * 1024)
store = OciStore(RegistryConfig(store="oci", url=sys.argv[1], insecure=True))
stored = store.put(files)
out = Path(sys.argv[2]) / "out.plan"
OciStore(RegistryConfig(store="oci", url=sys.argv[1], insecure=True)).get(stored.digest, out)
assert out.read_bytes() == files.engine.read_bytes()
assert [a.digest for a in store.records()] == [stored.digest]
assert "oras" not in [m for m, v in sys.modules.items() if v is not None]
print("ok")
"""


def test_item6_the_store_needs_no_oras(auth_registry, tmp_path):
    _docker_config(tmp_path / "dockercfg", auth_registry.host, _b64("alice:s3cret"))
    proc = subprocess.run([sys.executable, "-c", _hide("oras") + _ROUND_TRIP, f"{auth_registry.host}/nooras",
                           str(tmp_path / "b"), str(HERE)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DOCKER_CONFIG": str(tmp_path / "dockercfg"), "HOME": str(tmp_path),
                               "ORCHESTRATE_REGISTRY_USERNAME": "", "ORCHESTRATE_REGISTRY_PASSWORD": ""})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


# ---- issue 23 (Also): the transport is urllib3's Retry under requests -------------------------------------------

def test_retry_after_is_honoured(registry):
    with RegistryProxy(registry.host, refuse=(), throttle=2, retry_after="1") as proxy:
        assert oci(proxy.host, "throttled").records() == []  # answered in the end
        asked = proxy.asked("/v2/")
        times = proxy.times[:3]
    assert len(asked) == 3  # two 429s, then the answer
    assert all(later - earlier >= 1.0 for earlier, later in zip(times, times[1:])), times  # as Retry-After said


def test_retry_of_transient_statuses_with_backoff(registry):
    with RegistryProxy(registry.host, refuse=(), throttle=2, throttle_status=503) as proxy:
        assert oci(proxy.host, "flaky").records() == []
        assert len(proxy.asked("/v2/")) == 3


def test_retry_after_past_the_deadline_ends_the_operation_at_once(registry, monkeypatch):
    monkeypatch.setenv("ORCHESTRATE_REGISTRY_TIMEOUT", "3")
    with RegistryProxy(registry.host, refuse=(), throttle=100, retry_after="30") as proxy:
        with pytest.raises(StoreUnavailableError) as exc:
            oci(proxy.host, "throttled").records()
        assert len(proxy.asked("/v2/")) == 1  # not slept on, not asked again
    assert "asked to retry after 30 s, past the deadline" in str(exc.value)
    assert "within the 3 s deadline" in str(exc.value)
