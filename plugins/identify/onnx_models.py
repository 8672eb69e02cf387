"""ONNX models and what onnxruntime makes of them: a plain ONNX model, one onnxruntime saved after optimizing it,
an ONNX Runtime EPContext model (an execution provider's compiled engine wrapped in an ONNX node), and the
ORT flatbuffer format.

Markers, and where they come from:

- **EPContext**: a node ``EPContext`` in domain ``com.microsoft`` with the attributes ``main_context``,
  ``ep_cache_context``, ``embed_mode`` (1: ``ep_cache_context`` holds the engine bytes; 0: a path to the engine
  file, relative to the model), ``ep_sdk_version``, ``partition_name``, ``source`` (the execution provider that
  made it) and, for the TensorRT EPs, ``hardware_architecture`` (onnxruntime's contrib-op reference,
  https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.EPContext, and the EP
  context design page, https://onnxruntime.ai/docs/execution-providers/EP-Context-Design.html). The engine inside is
  identified on its own; a path that leaves the model's directory is not followed.
- **onnxruntime-optimized**: a model saved through ``SessionOptions.optimized_model_filepath`` imports every
  operator domain onnxruntime registers, including domains only onnxruntime defines (``com.microsoft.nchwc``,
  ``com.microsoft.experimental``, ``com.ms.internal.nhwc``: onnxruntime/core/graph/constants.h); measured here on
  onnxruntime 1.31.1 at every optimization level. Nodes in ``com.microsoft.nchwc`` are the NCHWc layout of
  ``ORT_ENABLE_ALL``, which onnxruntime warns "may contain hardware specific optimizations, and should only be used
  in the same environment the model was optimized in"; ``com.microsoft`` nodes are contrib-op fusions
  (``ORT_ENABLE_EXTENDED`` and up). Which level exactly is not recorded.
- **ORT format**: the flatbuffer file identifier ``ORTM`` at bytes 4..8 (``file_identifier "ORTM"`` in
  onnxruntime/core/flatbuffers/schema/ort.fbs); its contents are not parsed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.contracts.identify import Blob, Identity, Inner

ORT_ONLY_DOMAINS = ("com.microsoft.nchwc", "com.microsoft.experimental", "com.ms.internal.nhwc")
MAX_ONNX_BYTES = 2**31  # protobuf's own limit for one message


def _looks_like_onnx(head: bytes) -> bool:
    """ModelProto as every ONNX writer serializes it: field 1 (ir_version, a small varint) first, then a
    length-delimited field among 2..8 (producer_name ... graph, opset_import)."""
    return (len(head) >= 3 and head[0] == 0x08 and 1 <= head[1] <= 30
            and head[2] in (0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42))


def _tensor(value: Any) -> dict[str, Any]:
    import onnx

    kind = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type).name if kind.elem_type else None
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in kind.shape.dim]
    return {"name": value.name, "dtype": dtype, "shape": dims}


def _attribute(attr: Any) -> Any:
    import onnx

    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8") if len(value) < 4096 else f"<{len(value)} bytes>"
        except UnicodeDecodeError:
            return f"<{len(value)} bytes>"
    return value if isinstance(value, (int, float, str)) else str(value)


def _epcontext(nodes: list[Any], blob: Blob) -> tuple[dict[str, Any], dict[str, str], Inner | None, list[str]]:
    facts: list[dict[str, Any]] = []
    unknown: dict[str, str] = {}
    problems: list[str] = []
    inner: Inner | None = None
    for node in nodes:
        attrs = {a.name: a for a in node.attribute}
        entry = {name: _attribute(a) for name, a in attrs.items() if name != "ep_cache_context"}
        entry["node"] = node.name
        cache = attrs.get("ep_cache_context")
        mode = entry.get("embed_mode", 1)  # the contrib-op reference: embed_mode defaults to 1
        entry["embed_mode"] = mode
        if cache is None:
            problems.append(f"EPContext node {node.name!r} has no ep_cache_context")
        elif mode == 1:
            data = bytes(cache.s)
            entry["ep_cache_context"] = f"<{len(data)} bytes embedded>"
            if inner is None and data:
                inner = Inner(f"the engine embedded in EPContext node {node.name!r} (embed_mode 1)", data=data)
        else:
            ref = cache.s.decode("utf-8", errors="replace")
            entry["ep_cache_context"] = ref
            where = blob.directory
            target = (where / ref).resolve() if where is not None else None
            if where is None or target is None:
                unknown["engine"] = f"embed_mode 0 names {ref!r}, but the model's directory is not known"
            elif Path(ref).is_absolute() or where.resolve() not in (target, *target.parents):
                unknown["engine"] = f"embed_mode 0 names {ref!r}, outside the model's directory: not followed"
            elif not target.is_file():
                unknown["engine"] = f"embed_mode 0 names {ref!r}, which is not a file beside the model"
            elif inner is None:
                inner = Inner(f"the engine file {ref!r} named by EPContext node {node.name!r} (embed_mode 0)",
                              path=target)
        facts.append(entry)
    return {"epcontext_nodes": facts}, unknown, inner, problems


class OnnxIdentifier:
    name = "onnx"
    order = 50

    def identify(self, head: bytes, blob: Blob) -> Identity | None:
        if head[4:8] == b"ORTM":
            return Identity("onnxruntime-ort-format", "onnxruntime ORT-format model (flatbuffer)",
                            {"format": "ORT format (flatbuffer, file identifier ORTM)", "size": blob.size},
                            {"contents": "the ORT flatbuffer is not parsed here"}, runtime="onnxruntime")
        if not _looks_like_onnx(head):
            return None
        import onnx
        from google.protobuf.message import DecodeError

        model = onnx.ModelProto()
        try:
            if blob.size > MAX_ONNX_BYTES:
                raise DecodeError("larger than protobuf's 2 GiB limit")
            model.ParseFromString(blob.read(0, blob.size))
        except (DecodeError, RuntimeError, ValueError) as e:
            return Identity("onnx", "ONNX model (truncated or damaged)", {"format": "ONNX (protobuf)",
                                                                           "size": blob.size},
                            {"graph": "the protobuf does not parse"},
                            (f"truncated or damaged: the ONNX protobuf does not parse ({e})",))
        if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
            return None
        graph = model.graph
        weights = {i.name for i in graph.initializer}
        opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
        node_domains = sorted({n.domain or "ai.onnx" for n in graph.node})
        facts: dict[str, Any] = {
            "format": "ONNX (protobuf)", "size": blob.size, "ir_version": model.ir_version,
            "producer": f"{model.producer_name} {model.producer_version}".strip() or "(not set)",
            "opsets": opsets, "graph": graph.name, "nodes": len(graph.node), "node_domains": node_domains,
            "inputs": [_tensor(v) for v in graph.input if v.name not in weights],
            "outputs": [_tensor(v) for v in graph.output],
            "external_data": any(t.data_location == onnx.TensorProto.EXTERNAL for t in graph.initializer),
        }
        unknown: dict[str, str] = {}
        epc = [n for n in graph.node if n.op_type == "EPContext" and n.domain == "com.microsoft"]
        if epc:
            more, unknown, inner, problems = _epcontext(epc, blob)
            facts.update(more)
            sources = sorted({str(e.get("source")) for e in more["epcontext_nodes"] if e.get("source")})
            return Identity("onnx-epcontext",
                            f"ONNX Runtime EPContext model ({len(epc)} EPContext node(s)"
                            + (f", source {', '.join(sources)}" if sources else "") + ")",
                            facts, unknown, tuple(problems), inner=inner)
        ort_domains = [d for d in ORT_ONLY_DOMAINS if d in opsets]
        if ort_domains:
            contrib = sorted({n.op_type for n in graph.node if n.domain == "com.microsoft"})
            nchwc = sorted({n.op_type for n in graph.node if n.domain == "com.microsoft.nchwc"})
            facts.update({
                "onnxruntime_optimized": True, "onnxruntime_only_domains": ort_domains,
                "contrib_fusions": contrib, "nchwc_layout": nchwc,
                "platform_specific": bool(nchwc),
                "optimization_evidence": ("NCHWc layout nodes: ORT_ENABLE_ALL (hardware specific)" if nchwc
                                          else "contrib-op fusions: ORT_ENABLE_EXTENDED or higher" if contrib
                                          else "no fusion nodes: ORT_ENABLE_BASIC, or nothing to fuse"),
            })
            unknown["optimization_level"] = "onnxruntime does not record the level it saved the model at"
            unknown["onnxruntime_version"] = "onnxruntime keeps the original producer; its own version is not saved"
            return Identity("onnxruntime-optimized-onnx",
                            "ONNX model saved by onnxruntime after optimization"
                            + (" (NCHWc layout: only for machines like the one that optimized it)" if nchwc else ""),
                            facts, unknown, runtime="onnxruntime")
        return Identity("onnx", f"ONNX model, IR {model.ir_version}, opset {opsets.get('ai.onnx', '?')}"
                        + (f", producer {facts['producer']}" if model.producer_name else ""),
                        facts, unknown, runtime="onnxruntime")


identifier = OnnxIdentifier()
