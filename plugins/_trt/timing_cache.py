"""TensorRT timing caches on disk: one file per (compute capability, TensorRT version) under a cache dir.

A timing cache is only usable by the exact TensorRT version that wrote it ("combine will be skipped and return
false" otherwise, NvInfer.h) and carries the CUDA device properties of the GPU that measured it, so the file name
holds both. Builders on several runners may share the directory; saving follows Polygraphy's pattern
(backend/trt/loader.py): under a file lock, read what is there, combine the new cache into it with
``ignore_mismatch=True``, and replace the file atomically (temp file + fsync + rename), so a reader never sees a
torn cache and no builder's measurements are lost.

This module moves bytes only: the TensorRT-specific combine step is injected by the builder, so the file, lock
and atomic parts are testable without TensorRT.

Pinned builds (``timing_cache: {pin: true}``; ``BuildRequest.timing_cache`` is the published cache of this GPU and
TensorRT version) start from exactly that file, never the shared one, and leave the shared cache untouched: the
build works on a private copy (``PINNED_WORK_FILE`` in its output directory), which is what it reports as
written. Builders report both ends as ``digest``s (``sha256:<hex>``), None where there was no cache.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from orchestrator.atomic import write_bytes_atomic
from orchestrator.errors import BuildError
from trt_orchestrator_plugins import _cuda

LOCK_TIMEOUT_S = 300.0
# a pinned build's private timing cache, in its output directory (never the name the executor copies it to)
PINNED_WORK_FILE = "timing-cache.pinned-build"
_MISS = re.compile(r"timing[ _-]?cache|cache[ _-]?miss", re.IGNORECASE)


def digest(data: bytes) -> str:
    """``sha256:<hex>`` of a timing cache's bytes (the form every digest in the metadata takes)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_of_file(path: Path) -> str | None:
    """The digest of a cache file, None when there is none (or it is empty: TensorRT starts from nothing)."""
    path = Path(path)
    if not path.is_file():
        return None
    data = path.read_bytes()
    return digest(data) if data else None


def miss_lines(lines: list[str]) -> list[str]:
    """The error lines of a failed pinned build that speak of the timing cache (how TensorRT names a miss under
    ERROR_ON_TIMING_CACHE_MISS); empty when the failure was something else."""
    return [line for line in lines if _MISS.search(line)]


def miss_error(version: str, pinned: Path, found: list[str], *, node: str | None, log_tail: str | None,
               flag: str) -> BuildError:
    """The BuildError of a pinned build that failed; it names the miss when TensorRT's errors speak of the cache."""
    where = f"the pinned timing cache {Path(pinned).name}"
    if found:
        message = (f"TensorRT {version} met a tactic missing from {where} ({flag}): {found[0]}")
    else:
        message = (f"TensorRT {version} failed building from {where} ({flag} set; its errors do not name the "
                   "cache, so the miss is not confirmed)")
    return BuildError(message, node=node, log_tail=log_tail,
                      hint="the model, options or GPU changed since the cache was published: build once unpinned "
                           "(timing_cache: true) and publish, then pin again")


def _safe(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z.+-]", "_", text)


def cache_path(cache_dir: Path, compute_capability: str, tensorrt_version: str) -> Path:
    """``<cache_dir>/timing-cache/sm89-trt10.13.3.9.cache``."""
    cc = compute_capability.replace(".", "")
    return Path(cache_dir) / "timing-cache" / f"sm{_safe(cc)}-trt{_safe(tensorrt_version)}.cache"


def lock_for(path: Path) -> FileLock:
    return FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)


def load(path: Path) -> bytes:
    """The cache's bytes, or ``b""`` when there is none yet (``create_timing_cache(b"")`` makes an empty one)."""
    path = Path(path)
    if not path.exists():
        return b""
    with lock_for(path):
        return path.read_bytes()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a partial one."""
    write_bytes_atomic(path, data)


def merge_and_save(path: Path, merge: Callable[[bytes], bytes]) -> bytes:
    """Under the file lock: ``merged = merge(previous_bytes_or_b"")``, then save it atomically; returns it.

    For TensorRT, ``merge`` deserializes the previous bytes into a cache, ``combine``s it into the build's cache
    with ``ignore_mismatch=True`` and returns ``bytes(cache.serialize())`` (builders/tensorrt.py).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with lock_for(path):
        previous = path.read_bytes() if path.exists() else b""
        merged = merge(previous)
        write_atomic(path, merged)
    return merged


def building_gpu_cc() -> str:
    """The building GPU's compute capability (timing caches are per CC)."""
    try:
        return _cuda.device_compute_capability(0)  # the builder uses the current (first visible) device
    except (_cuda.CudaCallError, _cuda.CudaUnavailable) as e:
        raise BuildError(f"cannot read the GPU's compute capability for the timing cache: {e}") from e
