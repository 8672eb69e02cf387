"""ONNX file I/O shared by the builders and transforms: load with external data, save (external data past
protobuf's 2 GB limit), a model's size on disk with its external data.

Only ``onnx`` (a core dependency) is imported here, and only inside functions.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.atomic import no_space
from orchestrator.errors import BuildError

# Protobuf refuses to serialize a message over 2 GiB; switch to external data with headroom below that.
EXTERNAL_DATA_THRESHOLD = int(1.8 * 1024**3)


def load_model(path: Path | str):
    """Load a model and its external data (resolved relative to the model's folder); ``BuildError`` when the file
    is no ONNX model (protobuf's ``DecodeError``) or its external data cannot be read."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=True)
    except OSError as e:
        raise BuildError(f"cannot read the model {path}: {e.strerror or e}") from e
    except Exception as e:  # google.protobuf.message.DecodeError and friends: not an ONNX model
        raise BuildError(f"{path} is not a readable ONNX model: {type(e).__name__}: {_first_line(e)}",
                         hint="re-export the model; `python -m onnx.checker PATH` says what is wrong") from e


def save_model(model, path: Path | str) -> list[Path]:
    """Write ``model`` to ``path``; models past ~1.8 GB get their tensors in ``<name>.data`` beside it.
    Returns every file written (the model, and its external data file if any)."""
    import onnx

    path = Path(path)
    try:
        size = model.ByteSize()
    except Exception:  # some protobuf builds raise instead of answering for > 2 GiB messages
        size = EXTERNAL_DATA_THRESHOLD + 1
    written = [path] if size <= EXTERNAL_DATA_THRESHOLD else [path, path.with_name(path.name + ".data")]
    try:
        if size <= EXTERNAL_DATA_THRESHOLD:
            onnx.save(model, str(path))
        else:
            onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=written[1].name, size_threshold=1024)
    except OSError as e:
        for partial in written:  # nothing half-written stays
            partial.unlink(missing_ok=True)
        raise no_space(e, path, what=f"the model {path.name}") or BuildError(
            f"cannot write the model {path}: {e.strerror or e}") from e
    return written


def raise_if_no_space(error: BaseException, path: Path | str, what: str) -> None:
    """A tool (onnxruntime's quantizer, ModelOpt) that failed writing under ``path`` because the disk is full:
    ``NoSpaceError`` naming the folder and the space left, instead of the tool's own wrapping of it."""
    full = no_space(error, path, what=what)
    if full is not None:
        raise full from error


def model_bytes(path: Path | str) -> int:
    """Size of a model on disk including every external data file it references."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # unreadable: the tool that reads it next reports the problem in its own words
        return path.stat().st_size
    locations = {ExternalDataInfo(t).location for t in _get_all_tensors(model) if uses_external_data(t)}
    return path.stat().st_size + sum((path.parent / loc).stat().st_size for loc in locations
                                     if (path.parent / loc).is_file())


def check_loadable(path: Path | str, what: str, *, standard_types: bool = True) -> None:
    """A transform's output must be a valid model before anything builds from it: the ONNX checker's full check
    (with shape and type inference) and an onnxruntime CPU session both accept it, or ``BuildError`` says why.
    ``standard_types=False`` (bf16 output: ONNX's type constraints do not admit bfloat16 for Conv and friends,
    TensorRT-RTX builds them, onnxruntime's CPU provider has no kernels for them) checks the structure only.

    TensorRT-RTX builds some models onnxruntime rejects (a Cast typed float16 where float is expected built fine
    and was published); parity would then run an engine built from a graph no reference can run."""
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=standard_types)
    except Exception as e:  # onnx raises ValidationError / InferenceError subclasses with the node named
        raise BuildError(f"{what} produced an invalid ONNX model: {_first_line(e)}",
                         hint="keep the offending op type out of the conversion (precision op_block_list) "
                              "or report the model to the converter") from e
    if not standard_types:
        return
    try:
        import onnxruntime as ort
    except ImportError:
        return  # the checker passed; onnxruntime (extra [ort]/[transforms]) is not here to load it
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises Fail/InvalidGraph/RuntimeException from the C++ side
        raise BuildError(f"{what} produced a model onnxruntime cannot load: {_first_line(e)}",
                         hint="keep the offending op type out of the conversion (precision op_block_list)") from e


def _first_line(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:500]
