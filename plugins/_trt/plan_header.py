"""What the first bytes of a TensorRT / TensorRT-RTX plan say (pure): the second line of defence at ``pull``.

Documented layout (what trtexec ``--getPlanVersionOnly`` reads: ``printPlanVersion`` in
https://github.com/NVIDIA/TensorRT/blob/v11.1/samples/common/sampleEngines.cpp):

- uint32[0]: magic. TensorRT writes ``0x74727466``, i.e. the bytes ``b"ftrt"`` on (little-endian) disk;
  TensorRT-RTX writes ``b"vtrt"`` (read from real RTX 1.7.1 plans built here).
- uint32[1]: serialization version (trtexec handles only 0).
- bytes 24..27: the builder's major, minor, patch, build, one byte each, in that order.

The byte order of 24..27 was checked on a real TensorRT-RTX 1.7.1.116 plan built on this machine
(tests/unit/test_trt_plan_header.py): bytes 24..27 are ``01 07 01 74`` = 1.7.1.116 (byte 23 is padding: a window
one byte to the left reads "00 01 07 01"). One byte per field means a build number
above 255 is stored modulo 256; comparisons below do the same. Nothing else in the header is documented.

Measured, not documented (``measured_layout``): on TensorRT-RTX 1.7.1.116 plans built on this machine
(``tests/integration/identify_corpus.py`` builds them: several models, 1 to 4 compute capabilities, stripped and
not), bytes 16..23 are the plan's total size (uint64, little-endian) and, after a second ``vtrt`` at 28..31, bytes
32..39 a bit set of the compute capabilities the engine was built for (bit 0 SM75, 1 SM80, 2 SM86, 3 SM89, 4
SM120, 5 SM121; e.g. SM89+SM120 = 0x18). These are read only for the RTX releases where they were measured
(``MEASURED_RTX``) and only when every other bit is clear; for any other release, and for TensorRT proper (whose
plans cannot be built here), the plan size and compute capabilities stay unknown. Whether a plan was stripped of
its weights is not visible in the first 64 bytes (stripped and full plans of one model differ only in sizes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.core.versions import parse_version

HEADER_BYTES = 64  # what to read from the file; RTX reports Runtime.engine_header_size == 64
MAGIC_TENSORRT = b"ftrt"
MAGIC_RTX = b"vtrt"
_VERSION_SLICE = slice(24, 28)

Flavour = Literal["tensorrt", "tensorrt-rtx", "unknown"]


@dataclass(frozen=True)
class PlanHeader:
    flavour: Flavour
    magic: bytes
    serialization_version: int | None
    version: tuple[int, int, int, int] | None  # (major, minor, patch, build & 0xFF)

    def to_json(self) -> dict[str, object]:
        return {"magic": self.magic.decode("ascii", errors="replace"), "flavour": self.flavour,
                "serialization_version": self.serialization_version, "version": self.version_text}

    @property
    def version_text(self) -> str | None:
        return ".".join(str(p) for p in self.version) if self.version else None


def read_header(first_bytes: bytes) -> PlanHeader:
    """Parse the first bytes of a plan (at least 28; pass ``HEADER_BYTES``). Never raises on junk."""
    data = bytes(first_bytes)
    magic = data[:4]
    flavour: Flavour = {MAGIC_TENSORRT: "tensorrt", MAGIC_RTX: "tensorrt-rtx"}.get(magic, "unknown")
    serialization = struct.unpack_from("<I", data, 4)[0] if len(data) >= 8 else None
    version = tuple(data[_VERSION_SLICE]) if len(data) >= 28 and flavour != "unknown" else None
    return PlanHeader(flavour, magic, serialization, version)  # type: ignore[arg-type]


def read_header_file(path: str | Path) -> PlanHeader:
    with open(path, "rb") as f:
        return read_header(f.read(HEADER_BYTES))


_LABEL = {"tensorrt": "TensorRT", "tensorrt-rtx": "TensorRT-RTX"}

# TensorRT-RTX (major, minor) releases whose layout beyond the documented bytes was measured here (see the module
# docstring); the bit order of the compute-capability set, as measured on 1.7.1
MEASURED_RTX = ((1, 7),)
_RTX_CC_BITS = ("7.5", "8.0", "8.6", "8.9", "12.0", "12.1")
_SIZE_SLICE = slice(16, 24)
_SECOND_MAGIC = slice(28, 32)
_CC_SLICE = slice(32, 40)


@dataclass(frozen=True)
class MeasuredLayout:
    """What the measured (undocumented) header fields say; None: not measured for this plan's release."""

    plan_size: int | None
    compute_capabilities: tuple[str, ...] | None
    why_unknown: str | None  # why the fields are not read, when they are not


def measured_layout(header: PlanHeader, first_bytes: bytes) -> MeasuredLayout:
    """The plan size and compute capabilities of a TensorRT-RTX plan of a release measured here (``MEASURED_RTX``),
    else unknown with the reason. Never raises."""
    data = bytes(first_bytes)
    if header.flavour != "tensorrt-rtx":
        return MeasuredLayout(None, None, "not documented for TensorRT plans, and none can be built here to "
                                          "measure (TensorRT proper is not installable on these machines)")
    if header.version is None or header.version[:2] not in MEASURED_RTX:
        return MeasuredLayout(None, None, f"the layout beyond the documented bytes was measured on TensorRT-RTX "
                                          f"{', '.join('.'.join(map(str, v)) for v in MEASURED_RTX)} plans only, "
                                          f"this one is {header.version_text or 'of no readable version'}")
    if len(data) < _CC_SLICE.stop or data[_SECOND_MAGIC] != MAGIC_RTX:
        return MeasuredLayout(None, None, "the header does not have the layout measured on this release")
    size = struct.unpack_from("<Q", data, _SIZE_SLICE.start)[0]
    bits = struct.unpack_from("<Q", data, _CC_SLICE.start)[0]
    if bits == 0 or bits >> len(_RTX_CC_BITS):
        return MeasuredLayout(size, None, f"the compute-capability bits 0x{bits:x} are not the ones measured")
    ccs = tuple(cc for i, cc in enumerate(_RTX_CC_BITS) if bits >> i & 1)
    return MeasuredLayout(size, ccs, None)


def check_header(header: PlanHeader, expected: Flavour, builder_version: str | None) -> str | None:
    """None when the plan's own header agrees with what its metadata says (a ``expected`` plan built by
    ``builder_version``), else why not (one sentence)."""
    label = _LABEL[expected]
    if header.flavour == "unknown":
        return (f"the file is not a {label} plan: it starts with {header.magic!r}, expected "
                f"{(MAGIC_TENSORRT if expected == 'tensorrt' else MAGIC_RTX)!r}")
    if header.flavour != expected:
        return f"metadata says a {label} engine but the plan header is a {_LABEL[header.flavour]} plan"
    if header.serialization_version not in (0, None):
        return (f"unknown {label} plan serialization version {header.serialization_version} "
                "(only 0 is documented)")
    recorded = parse_version(builder_version)
    if header.version is None or not recorded:
        return None
    want = tuple(p & 0xFF for p in (recorded + (0, 0, 0, 0))[:4])
    have = header.version
    # Compare as many fields as the metadata records (a 3-part RTX version has no build number to check).
    n = min(len(recorded), 4)
    if have[:n] != want[:n]:
        return (f"the plan header says it was built by {label} {header.version_text}, but its metadata says "
                f"{builder_version}")
    return None


def recorded_version(reported: str, header: PlanHeader, target_version: str) -> tuple[str, str | None]:
    """The version an engine is recorded with: the one the tool itself reported (``trt.__version__``, trtexec's
    banner), completed with the build number from the engine's own plan header where the tool reports only
    major.minor.patch (the 8.6.1 and 10.0-10.7 wheels, trtexec before 10.13.3). The header holds the build number
    modulo 256: where that agrees with the target's build number, the target's (unwrapped) is taken.

    Returns (version, None), or (reported, why not) when the header contradicts the tool."""
    rep = parse_version(reported)
    if header.flavour == "unknown" or header.version is None or not rep:
        return reported, None
    have = header.version
    n = min(len(rep), 4)
    if tuple(p & 0xFF for p in rep[:n]) != have[:n]:
        return reported, (f"the engine's plan header says it was built by {_LABEL[header.flavour]} "
                          f"{header.version_text}, but the builder reported {reported}")
    if len(rep) >= 4:
        return reported, None
    target = parse_version(target_version)
    build = have[3]
    if len(target) >= 4 and target[:3] == rep[:3] and target[3] & 0xFF == build:
        build = target[3]
    return ".".join(str(p) for p in (*rep[:3], build)), None
