"""Model sources at validate: url schemes, pins, where a url source is written; Git LFS pointers in place of a
model; the digest a url source is keyed by (its pin, nothing fetched); ``lfs_tracked`` on a real git repository."""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess

import pytest

from orchestrator.app import sources
from orchestrator.core.model import SourceModel
from orchestrator.digests import DigestCache
from orchestrator.errors import BuildError, ManifestError
from orchestrator.manifest.convert import source_url_basename, source_url_problem

SHA = "ab" * 32

MANIFEST = """\
manifest_version: 1
models:
  - name: det
    version: "1"
    source:
      SOURCE
    inputs: {x: {shape: [1, 3, 8, 8]}}
targets:
  - {name: rtx, builder: tensorrt-rtx, builder_version: "1.7.1.116", compute_capabilities: ["8.9"]}
"""


def _with_source(source: str) -> str:
    return MANIFEST.replace("SOURCE", source)


@pytest.mark.parametrize("url", [
    "https://models.example/det.onnx",
    "https://models.example/v2/det.onnx?download=1",
    "s3://bucket/models/det.onnx",
    "gs://bucket/det.onnx",
    "hf://acme/det/det.onnx",
    "hf://acme/det@v1.0/onnx/det.onnx",
    "http://127.0.0.1:8000/det.onnx",
    "http://localhost/det.onnx",
    "http://[::1]:8000/det.onnx",
])
def test_supported_urls_pass(url):
    assert source_url_problem(url) is None


@pytest.mark.parametrize("url, message", [
    ("http://models.example/det.onnx", "plain http is refused for model downloads: http://models.example/det.onnx"),
    ("ftp://models.example/det.onnx", "unsupported url scheme 'ftp://' for a model source: ftp://models.example/det.onnx"),
    ("file:///models/det.onnx", "unsupported url scheme 'file://' for a model source: file:///models/det.onnx"),
    ("models/det.onnx", "the model url has no scheme: models/det.onnx"),
    ("https://models.example/", "the model url names no file: https://models.example/"),
    ("s3://bucket", "the model url names no file: s3://bucket"),
    ("hf://acme/det.onnx", "an hf:// url is hf://owner/repo/path/in/repo.onnx, got hf://acme/det.onnx"),
    ("https://user:secret@models.example/det.onnx",
     "the model url carries credentials: https://***@models.example"),
])
def test_refused_urls_say_why(url, message):
    problem = source_url_problem(url)
    assert problem is not None and problem[0] == message


def test_the_scheme_hint_lists_every_supported_scheme():
    _, hint = source_url_problem("ftp://a/b.onnx")
    for scheme in ("https://", "s3://", "gs://", "hf://", "http://"):
        assert scheme in hint


def test_basename_is_the_urls_file_name_when_plain():
    assert source_url_basename("https://h/a/det.onnx?x=1") == "det.onnx"
    assert source_url_basename("hf://o/r@main/onnx/model_q4.onnx") == "model_q4.onnx"
    assert source_url_basename("https://h/a/d%20e.onnx") == "model.onnx"  # not a plain name: a fixed one
    assert source_url_basename("https://h/a/..") == "model.onnx"


def test_validate_refuses_plain_http_naming_the_url_line(load):
    text = _with_source(f"url: http://models.example/det.onnx\n      sha256: {SHA}")
    with pytest.raises(ManifestError) as e:
        load(text)
    (p,) = e.value.problems
    assert (p.line, p.path) == (6, "models[0].source.url")
    assert p.message == "plain http is refused for model downloads: http://models.example/det.onnx"
    assert "https://" in p.hint


def test_validate_refuses_an_unsupported_scheme_with_the_schemes_in_the_hint(load):
    with pytest.raises(ManifestError) as e:
        load(_with_source(f"{{url: ftp://models.example/det.onnx, sha256: {SHA}}}"))
    (p,) = e.value.problems
    assert p.line == 6 and "'ftp://'" in p.message and "s3://bucket/key.onnx" in p.hint


def test_validate_refuses_a_url_without_a_pin(load):
    with pytest.raises(ManifestError) as e:
        load(_with_source("{url: https://models.example/det.onnx}"))
    (p,) = e.value.problems
    assert (p.path, p.message) == ("models[0].source.url", "a model fetched from a url needs its sha256")


def test_a_url_source_is_not_looked_for_on_disk_and_knows_its_line(load):
    manifest = load(_with_source(f"url: https://models.example/det.onnx\n      sha256: {SHA}"))
    source = manifest.models[0].source
    assert (source.url, source.sha256, source.path) == ("https://models.example/det.onnx", SHA, "")
    assert source.where.endswith("manifests/m.yaml:6:7")


def test_a_path_source_knows_its_line_too(load):
    manifest = load(_with_source("{path: ../models/tiny.onnx}"))
    assert manifest.models[0].source.where.endswith("manifests/m.yaml:6:7")


def test_a_git_lfs_pointer_in_place_of_the_model_is_refused(load, repo_root):
    pointer = repo_root / "models" / "lfs-pointer.onnx"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\n"
                       "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
                       "size 12345\n")
    with pytest.raises(ManifestError) as e:
        load(_with_source("{path: ../models/lfs-pointer.onnx, sha256: " + SHA + "}"))
    (p,) = e.value.problems  # the pointer, not a sha256 mismatch
    assert (p.line, p.path) == (6, "models[0].source.path")
    assert p.message == f"model file is a Git LFS pointer, not the model: {pointer}"
    assert p.hint == "run `git lfs pull` (CI: actions/checkout with lfs: true)"


def test_the_digest_cache_refuses_to_key_an_lfs_pointer(tmp_path):
    pointer = tmp_path / "m.onnx"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    with pytest.raises(BuildError, match="is a Git LFS pointer, not the model"):
        DigestCache.open(None).model_digest(str(pointer), name="det")


def test_a_url_source_is_keyed_by_its_pin_as_hashing_the_file_would_key_it(repo_root, digests, tmp_path):
    model_file = repo_root / "models" / "tiny.onnx"
    source = SourceModel(path="", sha256=digests["tiny.onnx"], url="https://models.example/tiny.onnx")
    assert sources.pinned_digest(source) == DigestCache.open(None).model_digest(str(model_file))
    assert sources.content_path(source, tmp_path) == \
        tmp_path / "models" / "sha256" / digests["tiny.onnx"] / "tiny.onnx"


def test_fetching_with_a_missing_filesystem_package_names_the_extra(tmp_path):
    pytest.importorskip("fsspec")
    try:
        import s3fs  # noqa: F401
        pytest.skip("s3fs is installed: this would reach the network")
    except ImportError:
        pass
    source = SourceModel(path="", sha256=SHA, url="s3://bucket/det.onnx", where="manifests/m.yaml:6:7")
    with pytest.raises(BuildError) as e:
        sources.fetch_model(source, tmp_path, name="det")
    assert e.value.message.startswith("manifests/m.yaml:6:7: models[det].source: fetching s3://bucket/det.onnx "
                                      "needs a package that is not installed")
    assert e.value.hint == "pip install 'trt-orchestrator[s3]'"
    assert not (tmp_path / "models" / "sha256" / SHA).exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_lfs_tracked_reads_gits_filter_attribute(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitattributes").write_text("*.onnx filter=lfs diff=lfs merge=lfs -text\n")
    (tmp_path / "models").mkdir()
    for name in ("a.onnx", "b.txt"):
        (tmp_path / "models" / name).write_bytes(b"x")
    assert sources.lfs_tracked(["models/a.onnx", "models/b.txt"], tmp_path) == ["models/a.onnx"]
    absolute = str(tmp_path / "models" / "a.onnx")
    assert sources.lfs_tracked([absolute, "/elsewhere/c.onnx"], tmp_path) == [absolute]


def test_lfs_tracked_outside_a_repository_is_empty(tmp_path):
    (tmp_path / "a.onnx").write_bytes(b"x")
    assert sources.lfs_tracked(["a.onnx"], tmp_path) == []
    assert sources.lfs_tracked([], tmp_path) == []


def test_a_digest_of_the_pin_equals_sha256_of_the_bytes(repo_root):
    data = (repo_root / "models" / "tiny.onnx").read_bytes()
    pin = hashlib.sha256(data).hexdigest()
    assert sources.pinned_digest(SourceModel(path="", sha256=pin, url="https://h/t.onnx")) == "sha256:" + pin


def test_localize_sets_url_paths_only(load, tmp_path):
    manifest = load(_with_source(f"{{url: https://models.example/det.onnx, sha256: {SHA}}}"))
    (located,) = sources.localize([manifest], tmp_path)
    assert located.models[0].source.path == str(tmp_path / "models" / "sha256" / SHA / "det.onnx")
    plain = load(_with_source("{path: ../models/tiny.onnx}"))
    assert sources.localize([plain], tmp_path)[0] is plain



def test_progress_off_a_terminal_is_a_line_at_the_start_and_one_when_verified():
    out = io.StringIO()
    show = sources.terminal_progress(out)
    url = "https://models.example/det.onnx"
    mib = 1024 * 1024
    for event in (sources.FetchEvent(url, "start", "det", mib, 4 * mib),
                  sources.FetchEvent(url, "progress", "det", 2 * mib, 4 * mib),
                  sources.FetchEvent(url, "done", "det", 4 * mib, 4 * mib),
                  sources.FetchEvent(url, "cached", "det", 4 * mib, 4 * mib)):
        show(event)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"model det: fetching {url} (4.0 MiB, resuming at 1.0 MiB)"
    assert re.fullmatch(r"model det: fetched 4\.0 MiB in \d+\.\d s, sha256 verified", lines[1])
    assert len(lines) == 2
