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
