"""Refitting TensorRT and TensorRT-RTX engines from the weights blob's ONNX (``targets[].weights``, docs/refit.md).

One path, per release (the binding surfaces in tests/conformance/data say which release has what):

1. deserialize the plan (``Runtime.deserialize_cuda_engine``; needs a GPU the library accepts) and check
   ``ICudaEngine.refittable`` (a plan built without REFIT / REFIT_IDENTICAL takes no weights);
2. ``Refitter(engine, logger)``, then the weights from the ONNX model the engine was built from:
   ``OnnxParserRefitter(refitter, logger).refit_from_file(model.onnx)`` (10.0+; it reads external data relative to
   the file, so the blob's ``model.onnx`` beside its ``weights.bin`` is enough), or on 8.6, which has no
   OnnxParserRefitter, ``set_named_weights`` for every refittable weight the engine names
   (``get_all_weights``) from the ONNX initializer of that name (the ONNX parser names weights after them,
   "Refitting an Engine", https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/refitting-engines.html);
3. the missing-weights check: ``get_missing_weights()`` must be empty (a weight the ONNX model does not supply would
   stay at the placeholder of a stripped plan), then ``refit_cuda_engine()`` must return True;
4. serialize with the weights: from 10.0 ``create_serialization_config()`` with ``SerializationFlag.EXCLUDE_WEIGHTS``
   cleared (a STRIP_PLAN engine serializes without them otherwise) and, for an engine that must stay refittable,
   ``INCLUDE_REFIT`` where the release has it (10.14+, 11.x; before it the serialized engine may not be refittable);
   8.6 ``serialize()``.

Any failure is a ``GateError`` naming the step and TensorRT's own messages.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import GateError


def _set_from_onnx(trt: Any, refitter: Any, model_path: Path, label: str) -> int:
    """8.6: every refittable weight the engine names, from the ONNX initializer of that name."""
    import onnx

    model = onnx.load(str(model_path))
    arrays = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    names = [str(n) for n in refitter.get_all_weights()]
    set_count = 0
    for name in names:
        if name not in arrays:
            continue  # reported by the missing-weights check below when the engine needs it
        if not refitter.set_named_weights(name, trt.Weights(arrays[name])):
            raise GateError(f"{label}: set_named_weights({name!r}) refused the ONNX initializer (count or type "
                            "changed)")
        set_count += 1
    return set_count


def refit_plan(trt: Any, runtime: Any, logger: Any, data: bytes, weights_onnx: Path, *, label: str,
               keep_refittable: bool, host_code_allowed: bool = False,
               errors: Callable[[], str] = lambda: "") -> tuple[bytes, dict[str, Any]]:
    """The plan ``data`` with the weights of ``weights_onnx`` in it, serialized; and what was done. ``runtime``: a
    ``trt.Runtime`` made with ``logger``; ``errors``: the logger's recent messages, added to a failure."""
    if host_code_allowed:
        runtime.engine_host_code_allowed = True
    engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        raise GateError(f"{label}: deserialize_cuda_engine failed; a refit needs a GPU this library accepts"
                        + (f"\n{errors()}" if errors() else ""))
    if not engine.refittable:
        raise GateError(f"{label}: the engine is not refittable (built without REFIT or REFIT_IDENTICAL)",
                        hint="rebuild the target with weights: stripped or refittable")
    refitter = trt.Refitter(engine, logger)
    facts: dict[str, Any] = {"tensorrt": str(trt.__version__)}
    if hasattr(trt, "OnnxParserRefitter"):  # 10.0+
        parser = trt.OnnxParserRefitter(refitter, logger)
        if not parser.refit_from_file(str(weights_onnx)):
            found = [str(parser.get_error(i).desc()) for i in range(parser.num_errors)]
            raise GateError(f"{label}: OnnxParserRefitter.refit_from_file({Path(weights_onnx).name}) failed: "
                            + ("; ".join(found) or errors() or "no error reported"))
        facts["how"] = "OnnxParserRefitter.refit_from_file"
    else:  # 8.6
        facts["how"] = "Refitter.set_named_weights from the ONNX initializers"
        facts["weights_set"] = _set_from_onnx(trt, refitter, Path(weights_onnx), label)
    missing = [str(n) for n in refitter.get_missing_weights()]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise GateError(f"{label}: {len(missing)} weights the engine needs are not in {Path(weights_onnx).name}: "
                        f"{shown}", hint="the weights blob is not of the model version this engine was built from")
    if not refitter.refit_cuda_engine():
        raise GateError(f"{label}: refit_cuda_engine() failed" + (f"\n{errors()}" if errors() else ""))
    if hasattr(engine, "create_serialization_config"):  # 10.0+
        config = engine.create_serialization_config()
        config.clear_flag(trt.SerializationFlag.EXCLUDE_WEIGHTS)
        if keep_refittable:
            include = getattr(trt.SerializationFlag, "INCLUDE_REFIT", None)
            if include is not None:
                config.set_flag(include)
            facts["refittable_after"] = include is not None
        plan = engine.serialize_with_config(config)
    else:
        plan = engine.serialize()
        facts["refittable_after"] = keep_refittable
    if plan is None:
        raise GateError(f"{label}: serializing the refitted engine failed" + (f"\n{errors()}" if errors() else ""))
    return bytes(memoryview(plan)), facts
