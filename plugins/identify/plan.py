"""TensorRT and TensorRT-RTX plans, from their header (``plugins/_trt/plan_header.py`` holds every offset and where
it comes from): the flavour and builder version (documented: what trtexec ``--getPlanVersionOnly`` reads), and for
TensorRT-RTX releases measured here the compute capabilities the engine was built for and the plan's own size
(a cut-off file says so). TensorRT never loaded."""

from __future__ import annotations

from orchestrator.contracts.identify import Blob, Identity
from trt_orchestrator_plugins._trt.plan_header import (
    HEADER_BYTES,
    MAGIC_RTX,
    MAGIC_TENSORRT,
    measured_layout,
    read_header,
)

_MIN_HEADER = 28  # through the version bytes 24..27
_NOT_IN_HEADER = "not recorded in the plan header"
# TensorRT-RTX engines load only on the RTX release that built it and only on the compute capabilities they were
# built for (NVIDIA TensorRT-RTX documentation, "Engine compatibility" and "CPU-only AOT engine builds")
_RTX_VERSION_RULE = "none: a TensorRT-RTX engine loads only with the TensorRT-RTX release that built it"


class PlanIdentifier:
    name = "tensorrt-plan"
    order = 20

    def identify(self, head: bytes, blob: Blob) -> Identity | None:
        magic = head[:4]
        if magic not in (MAGIC_TENSORRT, MAGIC_RTX):
            return None
        rtx = magic == MAGIC_RTX
        label = "TensorRT-RTX" if rtx else "TensorRT"
        kind = "tensorrt-rtx-plan" if rtx else "tensorrt-plan"
        runtime = "tensorrt-rtx" if rtx else "tensorrt"
        problems: list[str] = []
        unknown: dict[str, str] = {}
        if blob.size < _MIN_HEADER:
            problems.append(f"truncated: {blob.size} bytes, shorter than the {_MIN_HEADER}-byte plan header")
            return Identity(kind, f"{label} plan (truncated header)",
                            {"format": f"{label} plan", "magic": magic.decode("ascii"), "size": blob.size},
                            {"version": "the header is cut off before its version bytes (24..27)",
                             "stripped": "the header is cut off"},
                            tuple(problems), runtime=runtime)
        header = read_header(head[:HEADER_BYTES])
        version = header.version_text if header.serialization_version == 0 else None
        if version is None:
            unknown["version"] = (f"serialization version {header.serialization_version}: only 0 is documented "
                                  "(trtexec --getPlanVersionOnly reads no other)")
        layout = measured_layout(header, head[:HEADER_BYTES])
        facts: dict[str, object] = {
            "format": f"{label} plan", "magic": magic.decode("ascii"),
            "serialization_version": header.serialization_version, "version": version,
            "version_note": "the header stores each version field in one byte: a build number above 255 reads "
                            "modulo 256" if version else None,
            "size": blob.size, "plan_size": layout.plan_size,
            "compute_capabilities": list(layout.compute_capabilities) if layout.compute_capabilities else None,
        }
        if layout.plan_size is None:
            unknown["plan_size"] = layout.why_unknown or _NOT_IN_HEADER
        elif blob.size < layout.plan_size:
            problems.append(f"truncated: the header says the plan is {layout.plan_size} bytes, the file has "
                            f"{blob.size}")
        elif blob.size > layout.plan_size:
            problems.append(f"{blob.size - layout.plan_size} bytes follow the {layout.plan_size}-byte plan")
        if layout.compute_capabilities is None:
            unknown["compute_capabilities"] = layout.why_unknown or _NOT_IN_HEADER
        if rtx:
            facts["hardware_compatibility"] = ("the listed compute capabilities" if layout.compute_capabilities
                                               else None)
            facts["version_compatibility"] = _RTX_VERSION_RULE
            if layout.compute_capabilities is None:
                unknown["hardware_compatibility"] = "the compute capabilities are not readable (see above)"
        else:
            facts["hardware_compatibility"] = None
            facts["version_compatibility"] = None
            why = ("not documented in the plan header (only the magic, serialization version and version bytes "
                   "are); the builder's hardware_compatibility_level and VERSION_COMPATIBLE flag are not read")
            unknown["hardware_compatibility"] = why
            unknown["version_compatibility"] = why
        unknown["stripped"] = "whether weights were stripped is not visible in the plan header"
        facts["stripped"] = None
        ccs = f" for {', '.join('sm' + c.replace('.', '') for c in layout.compute_capabilities)}" \
            if layout.compute_capabilities else ""
        summary = f"{label} plan, built by {label} {version or '(version unknown)'}{ccs}"
        if problems and problems[0].startswith("truncated"):
            summary += " (truncated)"
        return Identity(kind, summary, facts, unknown, tuple(problems), runtime=runtime, builder_version=version)


identifier = PlanIdentifier()
