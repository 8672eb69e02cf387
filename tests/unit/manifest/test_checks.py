"""The semantic checks on literal typed manifests: no YAML, no files, builder knowledge passed in."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.core.model import (
    GateSettings,
    InputSpec,
    MatrixRule,
    Model,
    PrecisionSpec,
    ProfileShapes,
    SourceModel,
    Target,
)
from orchestrator.manifest.checks import CheckInput, check

from . import fakes


def _model(name="det", precisions=("fp32", "fp16")) -> Model:
    x = InputSpec("x", ("N", 3), profiles={"default": ProfileShapes((1, 3), (2, 3), (4, 3))})
    return Model(name=name, version="1", source=SourceModel("/m.onnx"), inputs=(x,), constraints=(),
                 precisions=tuple(PrecisionSpec(p) for p in precisions), profile_sets={"default": ("default",)},
                 calibration=None, gate=GateSettings())


def _check(models, targets, include=(), exclude=(), names=fakes.BUILDER_NAMES):
    return check(CheckInput(models, targets, [m.name for m in models], [t.name for t in targets], include, exclude),
                 capabilities=fakes.capabilities, builder_names=names)


def test_a_clean_manifest_has_no_findings():
    assert _check([_model()], [Target("rtx", "tensorrt-rtx", "1.7.1.116", ("8.9",))]) == []


def test_unknown_builder_hint_comes_from_the_names_given():
    (f,) = _check([_model()], [Target("t", "my-trt", "1.0", ("8.9",))], names=("my-trt2",))
    assert (f.path, f.message, f.hint) == (("targets", 0, "builder"), "unknown builder 'my-trt'",
                                           "did you mean 'my-trt2'?")
    (f,) = _check([_model()], [Target("t", "zzz", "1.0", ("8.9",))], names=())
    assert f.hint == "no builder plugins installed"


def test_auto_precision_is_fine_where_a_transform_exists_and_exclude_silences_a_cell():
    native = PrecisionSpec("fp16", via="native")
    model = Model(**{**_model().__dict__, "precisions": (PrecisionSpec("fp32"), native)})
    trt11 = Target("h100", "tensorrt", "11.1.0.8", ("9.0",))
    trt10 = Target("a10", "tensorrt", "10.13.3.9", ("8.6",))
    (f,) = _check([model], [trt10, trt11])
    assert f.path == ("models", 0, "precisions", 1) and "tensorrt 11.1.0.8 (target 'h100')" in f.message
    assert _check([model], [trt10, trt11], exclude=[MatrixRule(precision="fp16", target="h100")]) == []
    # include brings the excluded cell back, and with it the problem
    assert len(_check([model], [trt10, trt11], exclude=[MatrixRule(target="h100")],
                      include=[MatrixRule(model="det", target="h100")])) == 1


def test_untyped_entries_still_count_as_names_for_references():
    found = check(CheckInput([None], [Target("rtx", "tensorrt-rtx", "1.7.1.116", ("8.9",))], ["det"], ["rtx"],
                             [], [MatrixRule(model="det")]), capabilities=fakes.capabilities, builder_names=())
    assert found == []


def _dynamic_int8(name: str, version: str):
    """A builder that quantizes int8 natively without calibration data (onnxruntime's dynamic quantization, say):
    its capabilities say so (``calibrated`` leaves int8 out)."""
    base = fakes.capabilities("onnxruntime", "1.31")
    return replace(base, native=frozenset({"int8"}), calibrated=frozenset()) if name == "dyn-int8" \
        else fakes.capabilities(name, version)


def test_int8_needs_calibration_data_only_where_a_builder_calibrates_it():
    """Issue 23.22: the builder's capabilities say which precisions need calibration data."""
    model = _model(precisions=("fp32", "int8"))
    dyn = Target("dyn", "dyn-int8", "1.0", (), device="cpu")
    rtx = Target("rtx", "tensorrt-rtx", "1.7.1.116", ("8.9",))  # int8 by the Q/DQ transform: calibrates

    def run(targets):
        return check(CheckInput([model], targets, ["det"], [t.name for t in targets], [], []),
                     capabilities=_dynamic_int8, builder_names=("dyn-int8", *fakes.BUILDER_NAMES))

    assert run([dyn]) == []
    (f,) = run([dyn, rtx])
    assert (f.path, f.message) == (("models", 0, "precisions", 1),
                                   "int8 needs calibration data, and model 'det' has none")
    # the rtx cell excluded: every int8 cell is quantized without data again
    assert check(CheckInput([model], [dyn, rtx], ["det"], ["dyn", "rtx"], [],
                            [MatrixRule(precision="int8", target="rtx")]),
                 capabilities=_dynamic_int8, builder_names=("dyn-int8", *fakes.BUILDER_NAMES)) == []
