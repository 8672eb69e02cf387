"""ONNX file I/O shared by the builders and transforms: load with external data, save (external data past
protobuf's 2 GB limit), a model's size on disk with its external data.

Only ``onnx`` (a core dependency) is imported here, and only inside functions.
"""

from __future__ import annotations

from pathlib import Path

# Protobuf refuses to serialize a message over 2 GiB; switch to external data with headroom below that.
EXTERNAL_DATA_THRESHOLD = int(1.8 * 1024**3)


def load_model(path: Path | str):
    """Load a model and its external data (resolved relative to the model's folder)."""
    import onnx

    return onnx.load(str(path), load_external_data=True)


def save_model(model, path: Path | str) -> list[Path]:
    """Write ``model`` to ``path``; models past ~1.8 GB get their tensors in ``<name>.data`` beside it.
    Returns every file written (the model, and its external data file if any)."""
    import onnx

    path = Path(path)
    try:
        size = model.ByteSize()
    except Exception:  # some protobuf builds raise instead of answering for > 2 GiB messages
        size = EXTERNAL_DATA_THRESHOLD + 1
    if size <= EXTERNAL_DATA_THRESHOLD:
        onnx.save(model, str(path))
        return [path]
    location = path.name + ".data"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=1024)
    return [path, path.with_name(location)]


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
