"""Gate inputs: seeded random tensors inside a profile, or samples loaded from the manifest's dataset.

Random (``DataSource.path is None``): one :class:`InputCase` per requested point of the profile — ``min``,
``opt``, ``max`` (the profile's own shapes, checked against the model's ``DimConstraint``s) and ``random`` (every
dynamic dim drawn between the profile's min and max, honouring ``multiple_of``/``min``/``max`` of its named
constraint; a dim name shared by several inputs gets one value). Each case holds ``DataSource.samples``
samples. Values: floats uniform in [0, 1) (what a normalised image looks like), integers uniform in [0, 10),
bools fair coin flips. Everything derives from ``DataSource.seed``: the same manifest gives the same tensors.

Dataset (``DataSource.path`` set), one case labelled ``dataset``:

* a ``.npz`` file is one sample: one array per input name;
* a ``.npy`` file is one sample of a single-input model;
* a folder holds such files (sorted by name; the first ``samples`` are used), or images (png/jpg/jpeg/bmp/
  ppm/webp) that are decoded with Pillow (the optional ``images`` extra), preprocessed per ``Preprocess`` and
  batched into the input's ``opt`` batch size.

This module reads files (dataset loading) but imports nothing beyond numpy and, lazily, Pillow.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from orchestrator.core.model import (
    ARRAY_SUFFIXES,
    IMAGE_SUFFIXES,
    DataSource,
    DimConstraint,
    InputSpec,
    Model,
    Preprocess,
    ProfileShapes,
)
from orchestrator.errors import GateError, OrchestratorError

CaseLabel = Literal["min", "opt", "max", "random"]


@dataclass(frozen=True)
class InputCase:
    """One set of input shapes and the samples fed at those shapes."""

    label: str
    shapes: dict[str, tuple[int, ...]]
    samples: tuple[dict[str, np.ndarray], ...]
    # each row's expected answer (every sample's batch rows, in order) when the dataset is labelled
    labels: tuple[Any, ...] | None = None


def profile_of(model: Model, profile: str) -> dict[str, ProfileShapes]:
    """min/opt/max per input for ``profile``; a static input without profiles uses its declared shape."""
    out: dict[str, ProfileShapes] = {}
    for spec in model.inputs:
        if profile in spec.profiles:
            out[spec.name] = spec.profiles[profile]
        elif not spec.is_dynamic:
            fixed = tuple(int(d) for d in spec.shape)
            out[spec.name] = ProfileShapes(fixed, fixed, fixed)
        else:
            known = sorted({p for s in model.inputs for p in s.profiles})
            close = difflib.get_close_matches(profile, known, n=1)
            raise GateError(
                f"{model.name}: input {spec.name!r} is dynamic and has no profile {profile!r}",
                hint=f"did you mean {close[0]!r}?" if close else f"profiles: {', '.join(known) or 'none'}")
    return out


def shape_problems(spec: InputSpec, shape: Sequence[int], constraints: Sequence[DimConstraint]) -> list[str]:
    """Why ``shape`` does not fit ``spec`` and the constraints on its named dims (empty: it fits)."""
    problems = []
    if len(shape) != len(spec.shape):
        return [f"{spec.name}: rank {len(shape)} != declared rank {len(spec.shape)}"]
    by_dim = _constraints_by_dim(constraints)
    for axis, (declared, value) in enumerate(zip(spec.shape, shape)):
        if isinstance(declared, int) and declared >= 0 and value != declared:
            problems.append(f"{spec.name} dim {axis}: {value} != fixed {declared}")
        elif isinstance(declared, str):
            for c in by_dim.get(declared, ()):
                if c.multiple_of and value % c.multiple_of:
                    problems.append(f"{spec.name} dim {axis} ({declared}): {value} is not a multiple of "
                                    f"{c.multiple_of}")
                if c.min is not None and value < c.min:
                    problems.append(f"{spec.name} dim {axis} ({declared}): {value} < min {c.min}")
                if c.max is not None and value > c.max:
                    problems.append(f"{spec.name} dim {axis} ({declared}): {value} > max {c.max}")
    return problems


def _constraints_by_dim(constraints: Sequence[DimConstraint]) -> dict[str, list[DimConstraint]]:
    out: dict[str, list[DimConstraint]] = {}
    for c in constraints:
        out.setdefault(c.dim, []).append(c)
    return out


def allowed_range(lo: int, hi: int, constraints: Sequence[DimConstraint]) -> tuple[int, int, int]:
    """``(first, last, step)``: the values in [lo, hi] every constraint allows (step = lcm of multiple_of)."""
    step = 1
    for c in constraints:
        if c.min is not None:
            lo = max(lo, c.min)
        if c.max is not None:
            hi = min(hi, c.max)
        if c.multiple_of:
            step = int(np.lcm(step, c.multiple_of))
    first = -(-lo // step) * step
    last = (hi // step) * step
    return first, last, step


def random_shapes(model: Model, profile: str, rng: np.random.Generator) -> dict[str, tuple[int, ...]]:
    """A shape per input with every dim inside [min, max] of ``profile`` and its constraints honoured.

    A named dim shared by several inputs is drawn once, inside the intersection of their ranges.
    """
    shapes_by_input = profile_of(model, profile)
    by_dim = _constraints_by_dim(model.constraints)
    named: dict[str, tuple[int, int]] = {}
    for spec in model.inputs:
        ps = shapes_by_input[spec.name]
        for axis, declared in enumerate(spec.shape):
            if isinstance(declared, str):
                lo, hi = ps.min[axis], ps.max[axis]
                if declared in named:
                    lo, hi = max(lo, named[declared][0]), min(hi, named[declared][1])
                named[declared] = (lo, hi)
    values: dict[str, int] = {}
    for dim, (lo, hi) in named.items():
        first, last, step = allowed_range(lo, hi, by_dim.get(dim, ()))
        if first > last:
            raise GateError(f"{model.name}: profile {profile!r} leaves no value for dim {dim!r} in [{lo}, {hi}] "
                            f"under its constraints", hint="widen the profile or relax the constraint")
        values[dim] = first + step * int(rng.integers(0, (last - first) // step + 1))
    out: dict[str, tuple[int, ...]] = {}
    for spec in model.inputs:
        ps = shapes_by_input[spec.name]
        out[spec.name] = tuple(values[d] if isinstance(d, str) else ps.opt[axis]
                               for axis, d in enumerate(spec.shape))
    return out


def random_tensor(shape: Sequence[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Floats uniform [0, 1), integers uniform [0, 10), bools fair; drawn in the input's own dtype (float32 inputs
    from numpy's float32 generator, fp16 from float32: half the bytes of drawing float64 and casting, issue 24)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        draw = dt if dt in (np.float32, np.float64) else np.dtype(np.float32)
        out = rng.random(tuple(shape), dtype=draw)
        return out if out.dtype == dt else out.astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, 10, size=tuple(shape), dtype=dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=tuple(shape), dtype=np.uint8).astype(bool)
    raise GateError(f"cannot make random inputs of dtype {dtype}", hint="give the gate a dataset (gate.parity.data)")


def random_cases(model: Model, profile: str, data: DataSource,
                 points: Sequence[CaseLabel] = ("min", "opt", "max")) -> list[InputCase]:
    """Seeded random samples at each point of ``profile``; identical shapes are run once (labels joined)."""
    per_input = profile_of(model, profile)
    cases: list[tuple[str, dict[str, tuple[int, ...]]]] = []
    for n, point in enumerate(points):
        if point == "random":
            shapes = random_shapes(model, profile, np.random.default_rng([data.seed, 7919, n]))
        else:
            shapes = {name: tuple(getattr(ps, point)) for name, ps in per_input.items()}
        problems = [p for spec in model.inputs for p in shape_problems(spec, shapes[spec.name], model.constraints)]
        if problems:
            raise GateError(f"{model.name}: profile {profile!r} {point} shapes break the model's constraints: "
                            + "; ".join(problems), hint="fix the profile in the manifest")
        for i, (label, existing) in enumerate(cases):
            if existing == shapes:
                cases[i] = (f"{label}+{point}", existing)
                break
        else:
            cases.append((point, shapes))
    out = []
    for case_index, (label, shapes) in enumerate(cases):
        samples = []
        for sample in range(max(1, data.samples)):
            rng = np.random.default_rng([data.seed, case_index, sample])
            samples.append({spec.name: random_tensor(shapes[spec.name], spec.dtype, rng) for spec in model.inputs})
        out.append(InputCase(label, shapes, tuple(samples)))
    return out


def benchmark_inputs(model: Model, profile: str, points: Sequence[str],
                     seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """One random sample per benchmarked point (``BenchmarkGate.shapes``), keyed by point."""
    per_input = profile_of(model, profile)
    out = {}
    for n, point in enumerate(points):
        rng = np.random.default_rng([seed, 104729, n])
        out[point] = {spec.name: random_tensor(getattr(per_input[spec.name], point), spec.dtype, rng)
                      for spec in model.inputs}
    return out


# How a task plugin reads a labels file: (path, [(image file name, (width, height))], the model input's (height,
# width)) -> each image's expected answer, in order, in the model input's coordinates (``contracts.task``).
LabelsReader = Callable[[str, Sequence[tuple[str, tuple[int, int]]], tuple[int, int]], Sequence[Any]]


def gate_cases(model: Model, profile: str, data: DataSource | None = None,
               read_labels: LabelsReader | None = None) -> list[InputCase]:
    """The parity cases for ``profile``: the dataset when the manifest names one, else random min/opt/max.
    ``read_labels``: the model's task plugin's, when ``data.labels`` names a labels file."""
    data = data or model.gate.parity.data
    if data.path is None:
        return random_cases(model, profile, data)
    return [load_dataset(model, profile, data, read_labels)]


# -- dataset loading ------------------------------------------------------------------------------------------


def load_dataset(model: Model, profile: str, data: DataSource,
                 read_labels: LabelsReader | None = None) -> InputCase:
    assert data.path is not None, "load_dataset needs a dataset path (gate_cases draws random cases otherwise)"
    root = Path(data.path)
    if not root.exists():
        raise GateError(f"{model.name}: parity dataset {root} does not exist", hint="check gate.parity.data.path")
    if root.is_file():
        files = [root]
    else:
        files = sorted(p for p in root.iterdir() if p.suffix.lower() in ARRAY_SUFFIXES + IMAGE_SUFFIXES)
        if not files:
            raise GateError(f"{model.name}: {root} holds no .npy/.npz files or images",
                            hint=f"supported: {', '.join(ARRAY_SUFFIXES + IMAGE_SUFFIXES)}")
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    labels = None
    if images:
        samples, chosen, input_hw = _image_samples(model, profile, images, data)
        if data.labels is not None:
            labels = _read_labels(model, data.labels, chosen, input_hw, read_labels)
    else:
        samples = [_array_sample(model, p) for p in files[: max(1, data.samples)]]
        if data.labels is not None:
            raise GateError(f"{model.name}: labels {data.labels} label images, and {root} holds arrays",
                            hint="point gate.parity.data.path at the image folder, or drop labels")
    shapes = {name: tuple(arr.shape) for name, arr in samples[0].items()}
    for sample in samples[1:]:
        other = {name: tuple(arr.shape) for name, arr in sample.items()}
        if other != shapes:
            shapes = {name: () for name in shapes}  # mixed shapes: recorded per sample by the runner
            break
    return InputCase("dataset", shapes, tuple(samples), labels)


def _array_sample(model: Model, path: Path) -> dict[str, np.ndarray]:
    names = [s.name for s in model.inputs]
    dtypes = {s.name: np.dtype(s.dtype) for s in model.inputs}
    if path.suffix.lower() == ".npy":
        if len(names) != 1:
            raise GateError(f"{path}: a .npy sample feeds one input, but {model.name} has {len(names)} "
                            f"({', '.join(names)})", hint="store each sample as .npz with one array per input")
        return {names[0]: np.load(path, allow_pickle=False).astype(dtypes[names[0]], copy=False)}
    if path.suffix.lower() != ".npz":
        raise GateError(f"{path}: not a .npy or .npz file")
    with np.load(path, allow_pickle=False) as npz:
        missing = [n for n in names if n not in npz.files]
        if missing:
            hints = []
            for n in missing:
                close = difflib.get_close_matches(n, npz.files, n=1)
                hints.append(f"{n!r}" + (f" (found {close[0]!r})" if close else ""))
            raise GateError(f"{path}: no array for input {', '.join(hints)}; it holds {', '.join(npz.files)}",
                            hint="name each array in the .npz after the model input it feeds")
        return {n: npz[n].astype(dtypes[n], copy=False) for n in names}


def _image_samples(model: Model, profile: str, images: list[Path], data: DataSource
                   ) -> tuple[list[dict[str, np.ndarray]], list[tuple[str, tuple[int, int]]], tuple[int, int]]:
    """The samples (batches of the opt batch), each chosen image's (name, (width, height)) and the input's
    (height, width)."""
    if len(model.inputs) != 1:
        raise GateError(f"{model.name}: an image folder feeds a single-input model; this one has "
                        f"{len(model.inputs)}", hint="store samples as .npz files instead")
    spec = model.inputs[0]
    pre = data.preprocess or Preprocess()
    opt = profile_of(model, profile)[spec.name].opt
    if len(opt) != 4:
        raise GateError(f"{model.name}: input {spec.name!r} has rank {len(opt)}; images need a 4-D input")
    batch = opt[0]
    hw = pre.resize or ((opt[2], opt[3]) if pre.layout == "NCHW" else (opt[1], opt[2]))
    needed = batch * max(1, data.samples)
    if len(images) < batch:
        raise GateError(f"{model.name}: {len(images)} images is less than one batch of {batch}",
                        hint="add images or lower the profile's opt batch")
    chosen = images[: min(needed, len(images) - len(images) % batch)]
    decoded = [(p, decode_image(p)) for p in chosen]
    arrays = [preprocess_image(rgb, pre, hw) for _, rgb in decoded]
    names = [(p.name, (int(rgb.shape[1]), int(rgb.shape[0]))) for p, rgb in decoded]
    samples = [{spec.name: np.stack(arrays[i: i + batch])} for i in range(0, len(arrays), batch)]
    return samples, names, (int(hw[0]), int(hw[1]))


def _read_labels(model: Model, path: str, images: Sequence[tuple[str, tuple[int, int]]], input_hw: tuple[int, int],
                 read_labels: LabelsReader | None) -> tuple[Any, ...]:
    """Each chosen image's expected answer, read by the model's task plugin."""
    kind = model.task.kind if model.task is not None else None
    if read_labels is None:
        raise GateError(f"{model.name}: gate.parity.data.labels is set, but task {kind!r} reads no labels",
                        hint="drop labels, or use a task that reads them (classification, ctc, detection)")
    try:
        found = list(read_labels(path, images, input_hw))
    except OrchestratorError:
        raise
    except Exception as e:  # a plugin's own failure reading a user's file: name both
        raise GateError(f"{model.name}: cannot read labels {path} for task {kind!r}: {type(e).__name__}: {e}",
                        hint="check the labels file's format (docs/gates.md, \"Labels\")") from e
    if len(found) != len(images):
        raise GateError(f"{model.name}: labels {path} gave {len(found)} answers for {len(images)} images",
                        hint="one label per image of the dataset")
    return tuple(found)


def decode_image(path: Path) -> np.ndarray:
    """HWC uint8 RGB. Pillow is the optional ``images`` extra: imported here, when images are asked for."""
    try:
        from PIL import Image
    except ImportError as e:
        raise GateError(f"reading {path.name} needs Pillow, which is not installed",
                        hint="pip install 'trt-orchestrator[images]' (or pip install pillow), or convert the "
                             "dataset to .npy/.npz") from e
    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except OSError as e:
        raise GateError(f"{path}: cannot decode image: {e}") from e


def preprocess_image(rgb: np.ndarray, pre: Preprocess, hw: tuple[int, int]) -> np.ndarray:
    """HWC uint8 RGB -> one sample (CHW or HWC) per ``Preprocess``: resize, colour order, scale, mean/std."""
    image = resize_bilinear(rgb, hw) if tuple(rgb.shape[:2]) != tuple(hw) else rgb.astype(np.float64)
    if pre.color == "BGR":
        image = image[..., ::-1]
    image = image * pre.scale
    mean = np.asarray(pre.mean, dtype=np.float64)
    std = np.asarray(pre.std, dtype=np.float64)
    image = (image - mean) / std
    if pre.layout == "NCHW":
        image = image.transpose(2, 0, 1)
    return np.ascontiguousarray(image.astype(np.dtype(pre.dtype)))


def resize_bilinear(image: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of an HWC image with half-pixel centres (what cv2/PIL use); returns float64."""
    src = np.asarray(image, dtype=np.float64)
    h, w = src.shape[:2]
    out_h, out_w = int(hw[0]), int(hw[1])
    ys = np.clip((np.arange(out_h) + 0.5) * h / out_h - 0.5, 0, h - 1)
    xs = np.clip((np.arange(out_w) + 0.5) * w / out_w - 0.5, 0, w - 1)
    y0 = np.floor(ys).astype(int)
    x0 = np.floor(xs).astype(int)
    y1 = np.minimum(y0 + 1, h - 1)
    x1 = np.minimum(x0 + 1, w - 1)
    wy = (ys - y0)[:, None, None]
    wx = (xs - x0)[None, :, None]
    top = src[y0][:, x0] * (1 - wx) + src[y0][:, x1] * wx
    bottom = src[y1][:, x0] * (1 - wx) + src[y1][:, x1] * wx
    return top * (1 - wy) + bottom * wy

