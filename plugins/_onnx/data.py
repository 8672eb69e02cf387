"""Calibration samples from a ``DataSource``: npy/npz files, an image folder with ``Preprocess``, or seeded
random tensors when ``DataSource.path`` is None.

A *sample* is one feed for the model: input name -> array at that input's calibration shape (batch included).
Layouts accepted:

- ``x.npy`` (single-input models): shape == input shape (one sample), ``(S, *input shape)`` (S samples), or
  ``(K, *input shape[1:])`` (K rows, cut into batches of the input's batch size, a partial last batch dropped);
- ``x.npz``: one array per input name, each in one of the layouts above;
- a folder of ``.npy``/``.npz`` files: each file is read as above, in sorted name order;
- a folder of images (png/jpg/jpeg/bmp/ppm/webp, sorted; needs Pillow): single-input models only.

At most ``DataSource.samples`` samples are produced. numpy is imported inside functions like everything heavy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from orchestrator.core.model import ARRAY_SUFFIXES, IMAGE_SUFFIXES, DataSource, Preprocess
from orchestrator.errors import BuildError

Shapes = Mapping[str, tuple[int, ...]]
Dtypes = Mapping[str, str]


def iter_samples(source: DataSource | None, shapes: Shapes, dtypes: Dtypes) -> Iterator[dict]:
    """Yield up to ``source.samples`` feeds (input name -> numpy array)."""
    source = source or DataSource()
    produced = 0
    for feed in _feeds(source, shapes, dtypes):
        if produced >= source.samples:
            return
        yield feed
        produced += 1
    if produced == 0:
        raise BuildError(f"calibration data {source.path} yielded no sample for inputs "
                         f"{ {k: list(v) for k, v in shapes.items()} }")


def _feeds(source: DataSource, shapes: Shapes, dtypes: Dtypes) -> Iterator[dict]:
    if source.path is None:
        yield from random_feeds(shapes, dtypes, source.samples, source.seed)
        return
    path = Path(source.path)
    if path.is_file():
        yield from _file_feeds(path, shapes, dtypes)
    elif path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file())
        arrays = [p for p in files if p.suffix in ARRAY_SUFFIXES]
        images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
        if arrays:
            for p in arrays:
                yield from _file_feeds(p, shapes, dtypes)
        elif images:
            yield from _image_feeds(images, source.preprocess or Preprocess(), shapes, dtypes)
        else:
            raise BuildError(f"calibration folder {path} has no .npy/.npz files and no images "
                             f"({', '.join(IMAGE_SUFFIXES)})")
    else:
        raise BuildError(f"calibration data {path} does not exist")


def random_feeds(shapes: Shapes, dtypes: Dtypes, count: int, seed: int) -> Iterator[dict]:
    """Seeded tensors: floats uniform in [0, 1) (image-like after scaling), integers in [0, 10)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for _ in range(count):
        feed = {}
        for name, shape in shapes.items():
            dtype = np.dtype(dtypes.get(name, "float32"))
            if dtype.kind == "f":
                feed[name] = rng.random(shape, dtype=np.float32).astype(dtype)
            elif dtype.kind == "b":
                feed[name] = rng.integers(0, 2, shape).astype(dtype)
            else:
                feed[name] = rng.integers(0, 10, shape).astype(dtype)
        yield feed


def _split(name: str, array, shape: tuple[int, ...], origin: Path) -> list:
    """One array -> the list of per-sample arrays for one input (see the module docstring for layouts)."""
    if tuple(array.shape) == tuple(shape):
        return [array]
    if array.ndim == len(shape) + 1 and tuple(array.shape[1:]) == tuple(shape):
        return list(array)
    if array.ndim == len(shape) and tuple(array.shape[1:]) == tuple(shape[1:]) and shape and shape[0] > 0:
        batch = shape[0]
        return [array[i:i + batch] for i in range(0, array.shape[0] - batch + 1, batch)]
    raise BuildError(f"{origin}: array for input {name!r} has shape {list(array.shape)}; expected "
                     f"{list(shape)}, [S, *{list(shape)}] or [K, *{list(shape[1:])}]")


def _file_feeds(path: Path, shapes: Shapes, dtypes: Dtypes) -> Iterator[dict]:
    import numpy as np

    if path.suffix == ".npy":
        if len(shapes) != 1:
            raise BuildError(f"{path}: a .npy file feeds single-input models only; this model has inputs "
                             f"{', '.join(shapes)} (use .npz with one array per input)")
        arrays = {next(iter(shapes)): np.load(path, allow_pickle=False)}
    elif path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            missing = [n for n in shapes if n not in z.files]
            if missing:
                raise BuildError(f"{path}: no array for inputs {missing}; it has {z.files}")
            arrays = {n: z[n] for n in shapes}
    else:
        raise BuildError(f"{path}: calibration files must be .npy or .npz")
    per_input = {n: _split(n, a, shapes[n], path) for n, a in arrays.items()}
    count = min(len(v) for v in per_input.values())
    for i in range(count):
        yield {n: np.ascontiguousarray(v[i]).astype(dtypes.get(n, "float32"), copy=False)
               for n, v in per_input.items()}


def _image_feeds(images: list[Path], pre: Preprocess, shapes: Shapes, dtypes: Dtypes) -> Iterator[dict]:
    import numpy as np

    try:
        from PIL import Image
    except ImportError as e:
        raise BuildError("reading an image folder needs Pillow, which is not installed",
                         hint="pip install pillow, or convert the images to .npy/.npz") from e
    if len(shapes) != 1:
        raise BuildError(f"an image folder feeds single-input models only; this model has {', '.join(shapes)}")
    name, shape = next(iter(shapes.items()))
    if len(shape) != 4:
        raise BuildError(f"input {name!r} has shape {list(shape)}; image folders need a 4-D (N,C,H,W/N,H,W,C) input")
    batch = shape[0]
    height, width = pre.resize or ((shape[2], shape[3]) if pre.layout == "NCHW" else (shape[1], shape[2]))
    mean = np.asarray(pre.mean, dtype=np.float32)
    std = np.asarray(pre.std, dtype=np.float32)
    tensors = []
    for path in images:
        with Image.open(path) as im:
            rgb = im.convert("RGB").resize((width, height), Image.BILINEAR)  # PIL sizes are (W, H)
        hwc = np.asarray(rgb, dtype=np.float32)
        if pre.color == "BGR":
            hwc = hwc[..., ::-1]
        hwc = (hwc * pre.scale - mean) / std
        tensors.append(hwc.transpose(2, 0, 1) if pre.layout == "NCHW" else hwc)
        if len(tensors) == batch:
            yield {name: np.ascontiguousarray(np.stack(tensors)).astype(dtypes.get(name, pre.dtype))}
            tensors = []
