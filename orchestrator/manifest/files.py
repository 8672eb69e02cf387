"""The files a manifest names, checked where validate can see them: model files (a regular file holding an ONNX
model, its sha256 pin, its external data), data paths (calibration and parity data, labels: a regular file or a
folder of regular files) and what reading them needs (Pillow for a folder of calibration images).

``absent=True`` (a deployment's copy of a manifest, read by ``pull --build-on-miss``): a file that does not exist here
is no finding. Such a deployment builds from the model version's ONNX published in the registry and takes the
digests of data it does not have from the published records (``orchestrator.app.heal``); a file that is there is
checked as always.

Everything ``plan`` later reads (model and data digests) is checked here first, so a problem with one becomes a
finding at the line that names the file, never an error without a place. Only typed models are checked; a model
fetched from a url is checked by build and gate, which fetch it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from orchestrator.core.model import ARRAY_SUFFIXES, IMAGE_SUFFIXES, GateSettings, Model
from orchestrator.digests import external_data_files, hash_file
from orchestrator.errors import BuildError
from orchestrator.manifest.model_file import ModelFile, ModelFileError, read_model_file
from orchestrator.manifest.positions import Finding, Path

_DATA_HINT = "a folder of .npy/.npz files or images, or one .npz file"
_IMAGES_EXTRA = "pip install 'trt-orchestrator[images]'"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def file_findings(models: Sequence[Model | None], own_gates: Sequence[tuple[Path, GateSettings]] = (), *,
                  absent: bool = False) -> tuple[list[Finding], list[ModelFile | None]]:
    """Findings about the files of typed models and of targets' and matrix rules' own gates, and what each model
    file holds (None where it could not be read, or the model comes from a url). ``absent``: files that do not
    exist are passed over (see the module doc)."""
    out: list[Finding] = []
    files: list[ModelFile | None] = []
    for i, model in enumerate(models):
        here = model is not None and not (absent and model.source.url is None
                                          and not os.path.lexists(model.source.path))
        files.append(_model_file(model, ("models", i, "source"), out) if model is not None and here else None)
        if model is None:
            continue
        if model.calibration is not None and model.calibration.path is not None \
                and not (absent and not os.path.lexists(model.calibration.path)):
            cpath: Path = ("models", i, "calibration", "path")
            found = _data_path(cpath, model.calibration.path)
            out += found or _calibration_reader(cpath, model.calibration.path)
        gpath: Path = ("models", i, "gate")
        unlabelled = model.gate.parity.data.labels is not None and model.gate.parity.data.path is None
        if unlabelled:
            out.append(Finding(gpath + ("parity", "data", "labels"), "labels need the images they label",
                               "set gate.parity.data.path to the image folder the labels name"))
        out += _gate_files(gpath, model.gate, labels=not unlabelled, absent=absent)
    for gpath, gate in own_gates:  # a target's or a matrix rule's own parity data and labels
        out += _gate_files(gpath, gate, absent=absent)
    return out, files


def _model_file(model: Model, path: Path, out: list[Finding]) -> ModelFile | None:
    if model.source.url is not None:
        return None  # fetched (and checked against its pin) by build and gate, never by validate or plan
    src = model.source.path
    try:
        facts = read_model_file(src)
    except ModelFileError as e:
        out.append(Finding(path + ("path",), f"model file {e.message}: {src}", e.hint))
        return None
    if model.source.sha256 is not None:
        try:
            actual = hash_file(src, regular_only=True)[0].split(":", 1)[1]
        except OSError as e:
            out.append(Finding(path + ("path",), f"cannot read model file: {e.strerror}: {src}"))
            return None
        if actual != model.source.sha256:
            out.append(Finding(path + ("sha256",), f"sha256 mismatch: the file has {actual}",
                               "the model changed; update the pin if the new file is intended"))
    if facts.external_data:
        try:  # what the model digest of `plan` checks: every external-data file there, whole, inside the folder
            external_data_files(src, model.name)
        except BuildError as e:
            out.append(Finding(path + ("path",), e.message, e.hint))
            return None
    return facts


def _data_path(path: Path, data: str | None, *, what: str = "data path", hint: str = _DATA_HINT) -> list[Finding]:
    """A data path plan can digest: a regular file, or a folder of regular files (never a FIFO or a device,
    which would block or never end)."""
    if data is None:
        return []
    try:
        mode = os.stat(data).st_mode
    except FileNotFoundError:
        return [Finding(path, f"{what} not found: {data}", hint)]
    except OSError as e:
        return [Finding(path, f"{what} cannot be read ({e.strerror or e}): {data}", hint)]
    if stat.S_ISREG(mode):
        return []
    if not stat.S_ISDIR(mode):
        return [Finding(path, f"{what} is not a regular file or a folder ({_kind(mode)}): {data}", hint)]
    problems: list[OSError] = []
    for root, _, names in os.walk(data, onerror=problems.append):
        for name in sorted(names):
            full = os.path.join(root, name)
            try:
                mode = os.stat(full).st_mode
            except OSError as e:
                return [Finding(path, f"{what} {data} holds {full}, which cannot be read ({e.strerror or e})",
                                "keep only regular files (.npy/.npz, images) in data folders")]
            if not stat.S_ISREG(mode):
                return [Finding(path, f"{what} {data} holds {full}, which is not a regular file ({_kind(mode)})",
                                "keep only regular files (.npy/.npz, images) in data folders")]
    if problems:
        first = problems[0]
        return [Finding(path, f"{what} {data}: a folder in it cannot be read ({first.strerror or first}): "
                              f"{first.filename}")]
    return []


def _calibration_reader(path: Path, data: str) -> list[Finding]:
    """A folder of calibration images (no arrays: those are read first) is decoded with Pillow, an extra."""
    if not os.path.isdir(data):
        return []
    suffixes = {os.path.splitext(name)[1].lower() for name in os.listdir(data)}
    if suffixes & set(ARRAY_SUFFIXES) or not suffixes & set(IMAGE_SUFFIXES):
        return []
    try:
        import PIL.Image  # noqa: F401  (is it there: the calibrators import it when they read the images)
    except ImportError:
        return [Finding(path, f"calibration data {data} is a folder of images: reading them needs Pillow, which "
                              "is not installed", f"{_IMAGES_EXTRA} (or store the calibration inputs as .npy/.npz)")]
    return []


def _gate_files(path: Path, gate: GateSettings, *, labels: bool = True, absent: bool = False) -> list[Finding]:
    data = gate.parity.data
    out = [] if absent and data.path is not None and not os.path.lexists(data.path) else \
        _data_path(path + ("parity", "data", "path"), data.path)
    if labels and data.labels is not None and not (absent and not os.path.lexists(data.labels)):
        out += _data_path(path + ("parity", "data", "labels"), data.labels, what="labels file",
                          hint="a JSON object (image name -> class or text), a name<TAB>label text file, a COCO "
                               "instances JSON or a folder of YOLO .txt labels")
    return out


__all__ = ["file_findings"]
