from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.model import (
    DataSource,
    DimConstraint,
    GateSettings,
    InputSpec,
    Model,
    Preprocess,
    ProfileShapes,
    SourceModel,
)
from orchestrator.errors import GateError
from orchestrator.gates.inputs import allowed_range, gate_cases, load_dataset, preprocess_image, random_shapes


def model(inputs, constraints=(), **kw) -> Model:
    return Model(name="m", version="1", source=SourceModel("/m.onnx"), inputs=tuple(inputs),
                 constraints=tuple(constraints), precisions=(), profile_sets={}, calibration=None,
                 gate=GateSettings(), **kw)


DET = InputSpec("x", ("N", 3, "H", "W"), profiles={"p": ProfileShapes((1, 3, 320, 320), (1, 3, 640, 640),
                                                                       (4, 3, 960, 960))})
DET_C = (DimConstraint("H", multiple_of=32), DimConstraint("W", multiple_of=32, max=1024))


def test_min_opt_max_cases_are_seeded_and_typed():
    m = model([DET, InputSpec("scale", (1,), dtype="int64")], DET_C)
    cases = gate_cases(m, "p", DataSource(samples=2, seed=5))
    assert [c.label for c in cases] == ["min", "opt", "max"]
    assert cases[2].shapes == {"x": (4, 3, 960, 960), "scale": (1,)}
    x = cases[0].samples[0]["x"]
    assert x.dtype == np.float32 and 0 <= x.min() and x.max() < 1
    assert cases[0].samples[0]["scale"].dtype == np.int64
    again = gate_cases(m, "p", DataSource(samples=2, seed=5))
    assert np.array_equal(again[1].samples[1]["x"], cases[1].samples[1]["x"])
    assert not np.array_equal(cases[1].samples[0]["x"], cases[1].samples[1]["x"])


def test_identical_points_run_once_and_unknown_profile_is_named():
    static = model([InputSpec("x", (1, 4))])
    (case,) = gate_cases(static, "default", DataSource(samples=1))
    assert case.label == "min+opt+max" and case.shapes == {"x": (1, 4)}
    with pytest.raises(GateError, match="has no profile 'pp'") as e:
        gate_cases(model([DET]), "pp")
    assert e.value.hint == "did you mean 'p'?"


def test_profile_breaking_a_constraint_is_a_gate_error():
    bad = model([DET], (DimConstraint("H", multiple_of=128),))
    with pytest.raises(GateError, match=r"min shapes break .*x dim 2 \(H\): 320 is not a multiple of 128"):
        gate_cases(bad, "p")


@settings(max_examples=60, deadline=None)
@given(lo=st.integers(1, 200), span=st.integers(0, 400), mult=st.integers(1, 16), cmax=st.integers(1, 700),
       seed=st.integers(0, 2**32 - 1))
def test_random_shapes_honour_profile_and_constraints(lo, span, mult, cmax, seed):
    hi = lo + span
    spec_a = InputSpec("a", ("B", "L"), profiles={"p": ProfileShapes((1, lo), (1, lo), (2, hi))})
    spec_b = InputSpec("b", ("B", 7), profiles={"p": ProfileShapes((1, 7), (1, 7), (3, 7))})
    m = model([spec_a, spec_b], (DimConstraint("L", multiple_of=mult, max=cmax),))
    first, last, step = allowed_range(lo, hi, m.constraints)
    rng = np.random.default_rng(seed)
    if first > last:
        with pytest.raises(GateError, match="leaves no value for dim 'L'"):
            random_shapes(m, "p", rng)
        return
    shapes = random_shapes(m, "p", rng)
    b, length = shapes["a"]
    assert lo <= length <= hi and length % mult == 0 and length <= cmax
    assert 1 <= b <= 2 and shapes["b"] == (b, 7)  # shared dim B: one value, inside both ranges


def test_npz_dataset_and_missing_array(tmp_path):
    m = model([InputSpec("x", (1, 2)), InputSpec("y", (1,), dtype="int32")])
    np.savez(tmp_path / "a.npz", x=np.ones((1, 2)), y=np.array([3]))
    np.savez(tmp_path / "b.npz", x=np.zeros((1, 2)), y=np.array([4]))
    case = load_dataset(m, "default", DataSource(path=str(tmp_path), samples=8))
    assert case.label == "dataset" and len(case.samples) == 2
    assert case.samples[0]["x"].dtype == np.float32 and case.samples[1]["y"].tolist() == [4]
    np.savez(tmp_path / "c.npz", x=np.ones((1, 2)), y_=np.array([1]))
    with pytest.raises(GateError, match=r"c.npz: no array for input 'y' \(found 'y_'\); it holds x, y_"):
        load_dataset(m, "default", DataSource(path=str(tmp_path / "c.npz")))


def test_preprocess_image_scale_mean_std_layout_bgr():
    rgb = np.zeros((2, 2, 3), dtype=np.uint8)
    rgb[..., 0] = 255  # red
    pre = Preprocess(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), layout="NCHW", color="BGR", dtype="float16")
    out = preprocess_image(rgb, pre, (2, 2))
    assert out.shape == (3, 2, 2) and out.dtype == np.float16
    assert out[:, 0, 0].tolist() == [-1.0, -1.0, 1.0]  # BGR: red moved to the last channel
    nhwc = preprocess_image(rgb, Preprocess(layout="NHWC"), (4, 4))
    assert nhwc.shape == (4, 4, 3) and nhwc[..., 0].min() == pytest.approx(1.0)


def test_images_without_pillow_name_the_extra(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pil(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("No module named 'PIL'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    (tmp_path / "a.png").write_bytes(b"\x89PNG")
    m = model([InputSpec("x", (1, 3, 4, 4))])
    with pytest.raises(GateError, match="needs Pillow") as e:
        load_dataset(m, "default", DataSource(path=str(tmp_path), samples=1))
    assert "trt-orchestrator[images]" in e.value.hint


def test_random_inputs_are_drawn_in_the_inputs_own_dtype():
    """Issue 24 (gate overhead): float32 inputs come from numpy's float32 generator, not a float64 draw cast down
    (twice the bytes drawn, and a copy); fp16 from float32, integers in their own dtype."""
    import numpy as np

    from orchestrator.gates.inputs import random_tensor

    got = random_tensor((3, 4), "float32", np.random.default_rng(0))
    assert got.dtype == np.float32
    assert np.array_equal(got, np.random.default_rng(0).random((3, 4), dtype=np.float32))
    half = random_tensor((5,), "float16", np.random.default_rng(1))
    assert half.dtype == np.float16 and np.array_equal(
        half, np.random.default_rng(1).random(5, dtype=np.float32).astype(np.float16))
    ints = random_tensor((100,), "uint8", np.random.default_rng(2))
    assert ints.dtype == np.uint8 and 0 <= ints.min() and ints.max() < 10
    flags = random_tensor((100,), "bool", np.random.default_rng(3))
    assert flags.dtype == np.bool_ and 0 < flags.sum() < 100
