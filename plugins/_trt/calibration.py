"""TensorRT's native int8 calibration caches (pure): which calibrator class computes a method's cache, and what a
cache file's header says about who wrote it.

A cache is text: a header line ``TRT-<NV_TENSORRT_VERSION>-<algorithm>`` (``TRT-8601-EntropyCalibration2``,
``TRT-101303-MinMaxCalibration``) and one ``tensor: <hex scale>`` line per tensor. TensorRT reads a cache only
when the header names its own version and the algorithm of the calibrator reading it; otherwise it logs
"Calibration table does not match calibrator algorithm type" and calibrates again, which a cache-only calibrator
(``get_batch`` returns None) cannot do. So every cache is checked here before a build hands it to TensorRT, and
the mismatch is named instead.

The calibrators exist from 8.6 to 10.x (``IInt8EntropyCalibrator2``, ``IInt8MinMaxCalibrator``, deprecated in 10.1,
removed with ``pyInt8.cpp`` in 11.0: "[DEPRECATED] Deprecated in TensorRT 10.1. Superseded by explicit
quantization" in the 10.x binding docstrings, absent from the 11.x surfaces in tests/conformance/data, and
https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html ).
``percentile`` is not a TensorRT calibrator: it exists only as a Q/DQ calibration method (precision via: transform).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.core.versions import parse_version
from orchestrator.errors import BuildError

# method -> (calibrator class in the bindings, algorithm name in the cache header, CalibrationAlgoType member)
CALIBRATORS: dict[str, tuple[str, str, str]] = {
    "entropy": ("IInt8EntropyCalibrator2", "EntropyCalibration2", "ENTROPY_CALIBRATION_2"),
    "minmax": ("IInt8MinMaxCalibrator", "MinMaxCalibration", "MINMAX_CALIBRATION"),
}
# trtexec's own calibrator (RndInt8Calibrator, samples/common/sampleEngines.cpp) is an IInt8EntropyCalibrator2:
# it reads entropy caches only.
TRTEXEC_METHODS = ("entropy",)
_HEADER = re.compile(r"^TRT-(\d+)-([A-Za-z0-9_]+)\s*$")


def calibrator_for(method: str) -> tuple[str, str, str]:
    """(binding class, header algorithm, CalibrationAlgoType member) for a calibration method."""
    if method == "percentile":
        raise BuildError("percentile is not a TensorRT calibrator: TensorRT calibrates int8 natively with entropy "
                         "(IInt8EntropyCalibrator2) or minmax (IInt8MinMaxCalibrator) only",
                         hint="use calibration_method: entropy or minmax for native int8, or keep percentile with "
                              "precision via: transform (Q/DQ calibration)")
    if method not in CALIBRATORS:
        raise BuildError(f"unknown calibration method {method!r}; TensorRT calibrates with "
                         + " or ".join(sorted(CALIBRATORS)))
    return CALIBRATORS[method]


def version_of_code(code: str) -> str:
    """``NV_TENSORRT_VERSION`` as written in caches and trtexec banners -> major.minor.patch: major*1000 + minor*100
    + patch up to 8.x (``8601``), major*10000 + minor*100 + patch from 10.0 (``101303``)."""
    n = int(code)
    if n >= 10000:
        return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    return f"{n // 1000}.{n // 100 % 10}.{n % 100}"


@dataclass(frozen=True)
class CacheHeader:
    line: str
    version: str  # major.minor.patch of the TensorRT that wrote it
    algorithm: str  # EntropyCalibration2, MinMaxCalibration, ...


def read_header(data: bytes) -> CacheHeader | None:
    """The header of a TensorRT calibration cache, None when the first line is not one."""
    first = data.split(b"\n", 1)[0].decode("ascii", errors="replace").strip()
    m = _HEADER.match(first)
    if not m:
        return None
    return CacheHeader(first, version_of_code(m.group(1)), m.group(2))


def check_cache(data: bytes, version: str, method: str, *, reader: str = "TensorRT") -> CacheHeader:
    """The cache's header when TensorRT ``version`` with the ``method`` calibrator will read it; else BuildError
    saying which version or algorithm wrote it instead."""
    _cls, algorithm, _member = calibrator_for(method)
    header = read_header(data)
    if header is None:
        shown = data[:40].decode("ascii", errors="replace").splitlines()[0] if data else ""
        raise BuildError(f"the calibration cache is not a TensorRT calibration cache (first line {shown!r}; "
                         "expected TRT-<version>-<algorithm>)",
                         hint="recompute it: delete the calibrate node's output and build again")
    have = parse_version(header.version)
    want = parse_version(version)[:3]
    if have != want:
        raise BuildError(f"the calibration cache was written by TensorRT {header.version} ({header.line}); "
                         f"{reader} {version} reads only caches of its own version",
                         hint="recompute the cache with the tensorrt builder of this TensorRT version")
    if header.algorithm != algorithm:
        raise BuildError(f"the calibration cache holds {header.algorithm} scales ({header.line}); calibration "
                         f"method {method!r} reads {algorithm}",
                         hint="recompute the cache with the calibration method this precision names")
    return header
