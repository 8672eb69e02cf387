"""digests: the stat-keyed cache, external-data coverage, and the single-pass search for the external-data mark."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from orchestrator import digests
from orchestrator.digests import _EXTERNAL_MARK, DigestCache, external_data_files, hash_file


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _bump_mtime(path: Path, seconds: int = 10) -> None:
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 1_000_000_000))


def _external_model(folder: Path) -> Path:
    """A tiny ONNX model whose initializer lives in weights.bin next to it."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), name="w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
              size_threshold=0)
    return path


def test_second_digest_of_an_unchanged_file_does_not_read_it(tmp_path):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"plain model bytes")
    cache = DigestCache.open(None)
    assert cache.model_digest(str(f)) == _sha(b"plain model bytes")
    assert cache.rehashed == 1
    assert cache.model_digest(str(f)) == _sha(b"plain model bytes")
    assert cache.rehashed == 1


def test_cache_file_round_trip_means_no_reread_in_a_new_process(tmp_path):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"x" * 1000)
    cache_path = tmp_path / "cache" / "digests.json"
    first = DigestCache.open(cache_path)
    d = first.model_digest(str(f))
    first.save()
    assert not first.dirty and cache_path.exists()
    again = DigestCache.open(cache_path)
    assert again.model_digest(str(f)) == d
    assert again.rehashed == 0
    again.save()  # nothing changed: nothing written
    assert not list(cache_path.parent.glob("*.tmp*"))


def test_touching_mtime_rehashes(tmp_path):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"same bytes")
    cache = DigestCache.open(None)
    d1 = cache.model_digest(str(f))
    _bump_mtime(f)
    assert cache.model_digest(str(f)) == d1
    assert cache.rehashed == 2


def test_changed_bytes_of_the_same_size_change_the_digest(tmp_path):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"aaaa")
    cache = DigestCache.open(None)
    d1 = cache.model_digest(str(f))
    f.write_bytes(b"bbbb")
    _bump_mtime(f)
    assert cache.model_digest(str(f)) == _sha(b"bbbb") != d1


def test_corrupt_cache_file_is_only_a_slower_plan(tmp_path):
    cache_path = tmp_path / "digests.json"
    cache_path.write_text("{not json")
    assert DigestCache.open(cache_path).entries == {}


def test_external_data_model_digest_covers_the_weights_file(tmp_path):
    model = _external_model(tmp_path)
    weights = tmp_path / "weights.bin"
    assert external_data_files(str(model)) == [str(weights)]
    cache = DigestCache.open(None)
    d1 = cache.model_digest(str(model))
    assert d1 != _sha(model.read_bytes())  # not just the graph file
    assert cache.rehashed == 2  # model + weights
    assert cache.model_digest(str(model)) == d1 and cache.rehashed == 2

    data = bytearray(weights.read_bytes())
    data[5] ^= 0xFF  # same size, different weights
    weights.write_bytes(bytes(data))
    _bump_mtime(weights)
    d2 = cache.model_digest(str(model))
    assert d2 != d1
    assert cache.rehashed == 3  # only the weights file was read again


def test_external_data_is_covered_even_after_the_model_was_hashed_as_plain_data(tmp_path):
    model = _external_model(tmp_path)
    cache = DigestCache.open(None)
    plain = cache.data_digest(str(model))  # e.g. the same path used as parity data first
    assert plain == _sha(model.read_bytes())
    assert cache.model_digest(str(model)) != plain
    assert cache.model_digest(str(model)) == DigestCache.open(None).model_digest(str(model))


def test_data_digest_of_a_folder_covers_names_and_bytes(tmp_path):
    d = tmp_path / "calib"
    (d / "sub").mkdir(parents=True)
    (d / "a.npy").write_bytes(b"1")
    (d / "sub" / "b.npy").write_bytes(b"2")
    cache = DigestCache.open(None)
    first = cache.data_digest(str(d))
    assert cache.data_digest(str(d)) == first and cache.rehashed == 2
    (d / "sub" / "b.npy").rename(d / "sub" / "c.npy")
    renamed = cache.data_digest(str(d))
    assert renamed != first
    (d / "a.npy").write_bytes(b"3")
    _bump_mtime(d / "a.npy")
    assert cache.data_digest(str(d)) not in (first, renamed)


# --- the external-data mark, searched in the chunks being hashed --------------------------------------------------

@pytest.fixture(params=["inline", "threaded"])
def small_chunks(monkeypatch, request):
    """16-byte chunks; the threaded variant hashes each chunk in a second thread while the mark is searched."""
    monkeypatch.setattr(digests, "CHUNK", 16)
    monkeypatch.setattr(digests, "_PARALLEL_MIN", 1 if request.param == "threaded" else 1 << 40)
    return 16


def test_large_file_digest_and_mark_with_real_chunks(tmp_path):
    f = tmp_path / "big"
    data = os.urandom(digests.CHUNK) + b"\x00" * (digests.CHUNK - 3) + _EXTERNAL_MARK + os.urandom(12345)
    f.write_bytes(data)  # the mark straddles the first seam of full-size (threaded) chunks
    assert hash_file(str(f), scan_external=True) == (_sha(data), True)
    assert hash_file(str(f)) == (_sha(data), False)


def test_hash_file_digest_is_independent_of_chunking(tmp_path, small_chunks):
    f = tmp_path / "f"
    data = os.urandom(16 * 7 + 5)
    f.write_bytes(data)
    assert hash_file(str(f)) == (_sha(data), False)


@pytest.mark.parametrize("size", [0, 1, 9, 15, 16, 17, 40])
def test_a_file_smaller_than_a_chunk_is_read_whole_through_its_own_sized_buffer(tmp_path, small_chunks, size):
    f = tmp_path / "f"
    data = os.urandom(max(size - len(_EXTERNAL_MARK), 0)) + _EXTERNAL_MARK[: size]
    f.write_bytes(data)
    assert hash_file(str(f), scan_external=True) == (_sha(data), size >= len(_EXTERNAL_MARK))


def test_a_small_file_is_not_read_through_a_chunk_sized_buffer(tmp_path, monkeypatch):
    """Zeroing an 8 MiB buffer cost 86 of the 100 us of hashing a manifest (issue 24, registry row)."""
    f = tmp_path / "manifest.yaml"
    data = os.urandom(300)
    f.write_bytes(data)
    sizes: list[int] = []

    def sized(n: int) -> bytearray:
        sizes.append(n)
        return bytearray(n)

    monkeypatch.setattr(digests, "bytearray", sized, raising=False)  # the module's name, ahead of the builtin
    assert hash_file(str(f)) == (_sha(data), False)
    assert sizes and max(sizes) <= len(data) + 1


def test_a_file_that_grew_after_its_size_was_read_is_hashed_to_its_end(tmp_path, monkeypatch):
    f = tmp_path / "f"
    data = os.urandom(5000)
    f.write_bytes(data)
    real = os.fstat

    def stale(fd):  # what fstat said before the writer appended the last 4,000 bytes
        st = real(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 1000,
                               st.st_atime, st.st_mtime, st.st_ctime))

    monkeypatch.setattr(digests.os, "fstat", stale)
    assert hash_file(str(f)) == (_sha(data), False)


@pytest.mark.parametrize("offset", range(0, 40))
def test_mark_is_found_at_every_offset_including_across_a_chunk_seam(tmp_path, small_chunks, offset):
    f = tmp_path / "f"
    data = b"\x00" * offset + _EXTERNAL_MARK + b"\x00" * 20
    f.write_bytes(data)
    assert hash_file(str(f), scan_external=True) == (_sha(data), True)


def test_a_partial_mark_at_the_end_is_not_a_mark(tmp_path, small_chunks):
    f = tmp_path / "f"
    f.write_bytes(b"\x01" * 11 + _EXTERNAL_MARK[:5])  # 16 bytes: one chunk ending in half a mark
    assert hash_file(str(f), scan_external=True)[1] is False


def test_stale_buffer_bytes_of_a_short_last_read_are_not_searched(tmp_path, small_chunks):
    # chunk 1 ends with the mark's first half and its bytes 1..4 happen to be the mark's second half minus its
    # first byte; a 1-byte last read must not glue the old buffer onto the seam.
    half = len(_EXTERNAL_MARK) // 2
    first, second = _EXTERNAL_MARK[:half], _EXTERNAL_MARK[half:]
    chunk1 = b"?" + second[1:] + b"." * (16 - 1 - len(second[1:]) - len(first)) + first
    assert len(chunk1) == 16 and _EXTERNAL_MARK not in chunk1
    data = chunk1 + second[:1]
    assert _EXTERNAL_MARK not in data
    f = tmp_path / "f"
    f.write_bytes(data)
    assert hash_file(str(f), scan_external=True) == (_sha(data), False)


def test_real_external_model_has_the_mark_and_an_embedded_one_not(tmp_path):
    import onnx

    model = _external_model(tmp_path)
    assert hash_file(str(model), scan_external=True)[1] is True
    embedded = tmp_path / "embedded.onnx"
    onnx.save(onnx.load(str(model)), str(embedded))
    assert hash_file(str(embedded), scan_external=True)[1] is False
    cache = DigestCache.open(None)
    assert cache.model_digest(str(embedded)) == _sha(embedded.read_bytes())


# --- external data that is missing, not a regular file, or smaller than declared (hardening item 3) ----------------
# Every case must end in one located error (the model, the tensor, the file, how to fix it), never a traceback and
# never a hang: a FIFO or /dev/zero read "to the end" blocks or never ends. The hang cases run in a child process
# under a deadline so a regression fails the test instead of stalling the suite.

import json
import subprocess
import sys

from orchestrator.errors import BuildError

REPO = Path(__file__).resolve().parents[2]
HANG_DEADLINE_S = 20


def _retarget(model: Path, location: str, **fields: str) -> None:
    """Point the model's one external tensor at ``location`` (and set offset/length), weights left as they are."""
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    entries = m.graph.initializer[0].external_data
    values = {e.key: e.value for e in entries}
    values.update(location=location, **fields)
    del entries[:]
    for key, value in values.items():
        entries.add(key=key, value=value)
    onnx.save(m, str(model))


def _digest_in_child(model: Path) -> subprocess.CompletedProcess:
    """model_digest in a fresh process, bounded: a hang is a TimeoutExpired, not a stuck suite."""
    code = ("import sys, json\n"
            "from orchestrator.digests import DigestCache\n"
            "from orchestrator.errors import OrchestratorError\n"
            "try:\n"
            "    print(json.dumps({'digest': DigestCache.open(None).model_digest(sys.argv[1])}))\n"
            "except OrchestratorError as e:\n"
            "    print(json.dumps({'error': str(e), 'type': type(e).__name__}))\n")
    return subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True,
                          timeout=HANG_DEADLINE_S, cwd=REPO)


def _child_error(model: Path) -> str:
    try:
        proc = _digest_in_child(model)
    except subprocess.TimeoutExpired:
        pytest.fail(f"model_digest hung for {HANG_DEADLINE_S} s", pytrace=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    assert "error" in out, f"accepted: {out}"
    assert out["type"] == "BuildError"
    return out["error"]


def test_missing_external_data_file_is_an_error_naming_model_tensor_and_file(tmp_path):
    model = _external_model(tmp_path)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(BuildError) as e:
        DigestCache.open(None).model_digest(str(model), name="tiny")
    text = str(e.value)
    assert "model tiny" in text and "'w'" in text and str(tmp_path / "weights.bin") in text
    assert "not found" in text and "hint:" in text


def test_a_missing_external_file_after_the_digest_was_cached_is_still_caught(tmp_path):
    model = _external_model(tmp_path)
    cache = DigestCache.open(None)
    cache.model_digest(str(model))
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(BuildError, match="not found"):
        cache.model_digest(str(model))


def test_external_data_in_a_fifo_is_refused_not_read(tmp_path):
    model = _external_model(tmp_path)
    (tmp_path / "weights.bin").unlink()
    os.mkfifo(tmp_path / "weights.bin")  # opening it for reading would block until a writer comes
    text = _child_error(model)
    assert "not a regular file" in text and "FIFO" in text and str(tmp_path / "weights.bin") in text


def test_external_data_symlinked_to_dev_zero_is_refused_not_read(tmp_path):
    model = _external_model(tmp_path)
    (tmp_path / "weights.bin").unlink()
    os.symlink("/dev/zero", tmp_path / "weights.bin")  # endless bytes: hashing it never ends
    text = _child_error(model)
    assert "not a regular file" in text and "character device" in text


def test_an_absolute_external_data_location_is_refused(tmp_path):
    model = _external_model(tmp_path)
    _retarget(model, "/dev/zero")
    text = _child_error(model)
    assert "/dev/zero" in text and "absolute" in text


def test_an_external_data_location_outside_the_model_folder_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    model = _external_model(tmp_path / "m")
    (tmp_path / "m" / "weights.bin").rename(tmp_path / "weights.bin")
    _retarget(model, "../weights.bin")
    with pytest.raises(BuildError, match="outside the model's folder"):
        DigestCache.open(None).model_digest(str(model))


def test_a_truncated_external_data_file_is_refused_with_the_sizes(tmp_path):
    model = _external_model(tmp_path)  # one 8x8 float32 tensor: 256 bytes at offset 0
    weights = tmp_path / "weights.bin"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(BuildError) as e:
        DigestCache.open(None).model_digest(str(model), name="tiny")
    text = str(e.value)
    assert "100 bytes" in text and "256" in text and "'w'" in text


def test_an_offset_past_the_end_of_the_file_is_refused(tmp_path):
    model = _external_model(tmp_path)
    _retarget(model, "weights.bin", offset="4096")
    with pytest.raises(BuildError, match="4352"):  # needs bytes up to 4096 + 256
        DigestCache.open(None).model_digest(str(model))


def test_a_declared_length_that_does_not_fit_the_tensor_is_refused(tmp_path):
    model = _external_model(tmp_path)
    _retarget(model, "weights.bin", length="128")  # an 8x8 float32 tensor is 256 bytes
    with pytest.raises(BuildError, match="declares 128 bytes"):
        DigestCache.open(None).model_digest(str(model))


def test_a_negative_or_non_numeric_offset_is_refused(tmp_path):
    model = _external_model(tmp_path)
    _retarget(model, "weights.bin", offset="-5")
    with pytest.raises(BuildError, match="offset"):
        DigestCache.open(None).model_digest(str(model))
    _retarget(model, "weights.bin", offset="zero")
    with pytest.raises(BuildError, match="offset"):
        DigestCache.open(None).model_digest(str(model))


def test_a_weights_file_truncated_after_the_digest_was_cached_is_caught(tmp_path):
    model = _external_model(tmp_path)
    cache = DigestCache.open(None)
    cache.model_digest(str(model))
    weights = tmp_path / "weights.bin"
    weights.write_bytes(weights.read_bytes()[:10])
    _bump_mtime(weights)
    with pytest.raises(BuildError, match="10 bytes"):
        cache.model_digest(str(model))


def test_a_symlinked_regular_weights_file_is_fine(tmp_path):
    model = _external_model(tmp_path)
    (tmp_path / "store").mkdir()
    (tmp_path / "weights.bin").rename(tmp_path / "store" / "blob")
    os.symlink(tmp_path / "store" / "blob", tmp_path / "weights.bin")  # how model hubs lay files out
    assert DigestCache.open(None).model_digest(str(model)).startswith("sha256:")


def test_an_unparseable_model_that_looks_external_is_an_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xff garbage " + _EXTERNAL_MARK + b" more garbage")
    with pytest.raises(BuildError, match="not a readable ONNX model"):
        DigestCache.open(None).model_digest(str(bad), name="bad")


def test_hash_file_regular_only_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code = ("import sys\nfrom orchestrator.digests import hash_file\n"
            "try:\n    hash_file(sys.argv[1], regular_only=True)\nexcept OSError as e:\n    print(e.strerror)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True,
                          timeout=HANG_DEADLINE_S, cwd=REPO)
    assert "not a regular file" in proc.stdout, proc.stderr


def test_a_data_folder_holding_a_fifo_is_an_error_not_a_hang(tmp_path):
    d = tmp_path / "calib"
    d.mkdir()
    (d / "a.npy").write_bytes(b"1")
    os.mkfifo(d / "b.npy")
    code = ("import sys\nfrom orchestrator.digests import DigestCache\nfrom orchestrator.errors import BuildError\n"
            "try:\n    DigestCache.open(None).data_digest(sys.argv[1])\nexcept BuildError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True,
                          timeout=HANG_DEADLINE_S, cwd=REPO)
    assert "not a regular file" in proc.stdout and "b.npy" in proc.stdout, proc.stderr


@pytest.mark.parametrize("case", ["missing", "fifo", "dev-zero", "truncated"])
def test_plan_on_a_model_with_bad_external_data_says_why_without_traceback(tmp_path, case):
    """The real CLI: `orchestrate plan` exits 1 within the deadline with one located error, no traceback."""
    model = _external_model(tmp_path)
    weights = tmp_path / "weights.bin"
    if case == "missing":
        weights.unlink()
    elif case == "fifo":
        weights.unlink()
        os.mkfifo(weights)
    elif case == "dev-zero":
        _retarget(model, "/dev/zero")
    else:
        weights.write_bytes(weights.read_bytes()[:64])
    (tmp_path / "m.yaml").write_text(
        "manifest_version: 1\nproject: ext\n"
        "models:\n  - name: ext\n    version: '1'\n    source: {path: model.onnx}\n"
        "    precisions: [fp32]\n"
        "    inputs:\n      x: {shape: [1, 8]}\n"
        "targets:\n  - {name: cpu, builder: onnxruntime, builder_version: '1.31', device: cpu}\n"
        "registry: {store: local, path: artifacts}\n")
    try:
        proc = subprocess.run([sys.executable, "-m", "orchestrator", "plan", str(tmp_path / "m.yaml"),
                               "--cache-dir", str(tmp_path / "cache")],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("`orchestrate plan` hung on the external data", pytrace=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the model by its file (app/project.py passes no name to model_digest yet; with `name=` it is "model ext (...)")
    assert f"model {model}" in proc.stderr or "model ext (" in proc.stderr, proc.stderr
    assert ("/dev/zero" if case == "dev-zero" else str(weights)) in proc.stderr, proc.stderr
    assert "hint:" in proc.stderr


def test_hash_file_still_reads_a_pipe_to_its_end_when_asked_to(tmp_path):
    """A manifest given as ``<(cat m.yaml)`` is a pipe: hashing it (the project's manifest digest) must keep
    working, so the regular-file rule is the digest cache's, not every caller's."""
    code = ("import os, sys\nfrom orchestrator.digests import hash_file\n"
            "r, w = os.pipe()\nos.write(w, b'abc')\nos.close(w)\nprint(hash_file(f'/dev/fd/{r}')[0])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_DEADLINE_S,
                          cwd=REPO)
    assert proc.stdout.strip() == _sha(b"abc"), proc.stderr


@pytest.mark.parametrize("text", ["[1, 2]", '{"/x": 3}', "null"])
def test_a_cache_file_of_the_wrong_shape_is_only_a_slower_plan(tmp_path, text):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"bytes")
    cache_path = tmp_path / "digests.json"
    cache_path.write_text(text.replace("/x", str(f)))
    assert DigestCache.open(cache_path).model_digest(str(f)) == _sha(b"bytes")
