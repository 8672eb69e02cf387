"""Build-key invariants (hypothesis), from the issue:

"the build key does not change when YAML key order or set-like list order changes; changing any single input
(model bytes, one profile dim, TensorRT version, compute capability, a builder option, calibration data) changes
exactly the keys that depend on it."

Cells are identified across two resolves by (model, precision, profile set, target name): a CC change moves a
cell to a new address, and that must still count as the same cell whose key changed.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.core.model import BuilderOptions
from orchestrator.core.resolve import ResolveInputs, resolve
from tests.conftest import make_tiny_model
from tests.unit.core_fixtures import (
    capabilities,
    image_input,
    inputs_for,
    manifest,
    model,
    ort_target,
    rtx_target,
    shapes,
    target,
)

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROFILE_NAMES = ("small", "large", "batch")
RTX_CCS = ("7.5", "8.0", "8.6", "8.9", "12.0")


@st.composite
def models_st(draw):
    out = []
    for i in range(draw(st.integers(1, 3))):
        names = draw(st.lists(st.sampled_from(PROFILE_NAMES), min_size=1, max_size=3, unique=True))
        profiles = {}
        for p in names:
            h = draw(st.sampled_from((32, 64, 320)))
            profiles[p] = shapes((1, 3, h, h), (draw(st.integers(1, 4)), 3, 2 * h, 2 * h), (8, 3, 4 * h, 4 * h))
        inputs = [image_input("x", profiles)]
        if draw(st.booleans()):  # a second input with only some of the profiles
            inputs.append(image_input("mask", {names[0]: shapes((1, 1, 8, 8), (1, 1, 16, 16), (1, 1, 32, 32))}))
        sets = {n: (n,) for n in names}
        if len(names) > 1 and draw(st.booleans()):
            sets["all"] = tuple(names)
        precs = draw(st.lists(st.sampled_from(("fp32", "fp16", "bf16", "int8", "fp8")), min_size=1, max_size=4,
                              unique=True))
        calib = f"/data/calib-m{i}" if draw(st.booleans()) else None
        out.append(model(f"m{i}", precs=tuple(precs), inputs=tuple(inputs), profile_sets=sets, calibration=calib))
    return tuple(out)


@st.composite
def targets_st(draw):
    pool = {
        "l4": lambda: target("l4", ccs=("8.9",)),
        "a10": lambda: target("a10", ccs=("8.6",), build=("self-hosted", "a10")),
        "h100": lambda: target("h100", version="11.1.0.8", ccs=("9.0",), build=("self-hosted", "h100"),
                               options=BuilderOptions(optimization_level=4, extra={"b": 1, "a": "x"})),
        "ampere": lambda: target("ampere", ccs=(), hardware_compatibility="ampere_plus",
                                 options=BuilderOptions(version_compatible=True)),
        "rtx": lambda: rtx_target("rtx", version="1.7.1.116",
                                  ccs=tuple(draw(st.lists(st.sampled_from(RTX_CCS), min_size=1, unique=True)))),
        "ort": lambda: ort_target("ort"),
    }
    names = draw(st.lists(st.sampled_from(sorted(pool)), min_size=1, max_size=4, unique=True))
    return tuple(pool[n]() for n in names)


@st.composite
def worlds(draw):
    m = manifest(draw(models_st()), draw(targets_st()), salt=draw(st.sampled_from(("", "s1"))))
    inputs = inputs_for(m, tools={"onnxconverter-common": "1.14.0", "onnxruntime": "1.23.2"},
                        plugin_libraries={"/opt/plugins/a.so": "sha256:" + "1" * 64})
    return m, inputs


def _keys(m, inputs):
    g = resolve([m], inputs, capabilities)
    cells = {(c.model, c.precision.name, c.profile_set, c.target.name): c for c in g.cells}
    transforms = sorted(n.key for n in g.nodes.values() if n.kind == "transform")
    return g, cells, transforms


def _changed(before, after) -> set:
    assert set(before) == set(after), "a single-input change must not add or remove cells"
    return {k for k in before if before[k].build_key != after[k].build_key}


def _shuffled(values, rnd: random.Random):
    values = list(values)
    rnd.shuffle(values)
    return values


def _shuffled_dict(d: dict, rnd: random.Random) -> dict:
    return dict(_shuffled(d.items(), rnd))


# --- order independence (dataclass level) ---------------------------------------------------------------------

@PROPS
@given(worlds(), st.randoms(use_true_random=False))
def test_keys_addresses_and_order_do_not_depend_on_list_or_dict_order(world, rnd):
    m, inputs = world
    models = []
    for mod in _shuffled(m.models, rnd):
        ins = tuple(replace(i, profiles=_shuffled_dict(i.profiles, rnd)) for i in _shuffled(mod.inputs, rnd))
        models.append(replace(mod, inputs=ins, precisions=tuple(_shuffled(mod.precisions, rnd)),
                              profile_sets=_shuffled_dict(mod.profile_sets, rnd)))
    targets = [replace(t, compute_capabilities=tuple(_shuffled(t.compute_capabilities, rnd)),
                       options=replace(t.options, extra=_shuffled_dict(t.options.extra, rnd)))
               for t in _shuffled(m.targets, rnd)]
    m2 = replace(m, models=tuple(models), targets=tuple(targets))
    inputs2 = ResolveInputs(model_digests=_shuffled_dict(dict(inputs.model_digests), rnd),
                            data_digests=_shuffled_dict(dict(inputs.data_digests), rnd),
                            tool_versions=_shuffled_dict(dict(inputs.tool_versions), rnd),
                            plugin_libraries=_shuffled_dict(dict(inputs.plugin_libraries), rnd))
    g1, c1, t1 = _keys(m, inputs)
    g2, c2, t2 = _keys(m2, inputs2)
    assert {k: (c.address, c.build_key, c.blocked) for k, c in c1.items()} == \
        {k: (c.address, c.build_key, c.blocked) for k, c in c2.items()}
    assert t1 == t2
    assert [c.address for c in g1.cells] == [c.address for c in g2.cells]
    assert g1.order == g2.order
    assert {i: (n.deps, n.key) for i, n in g1.nodes.items()} == {i: (n.deps, n.key) for i, n in g2.nodes.items()}


# --- a single input changes exactly the keys that depend on it -------------------------------------------------

@PROPS
@given(worlds(), st.data())
def test_model_bytes_change_every_cell_of_that_model_and_no_other(world, data):
    m, inputs = world
    victim = data.draw(st.sampled_from(m.models))
    _, before, _ = _keys(m, inputs)
    digests = {**inputs.model_digests, victim.source.path: "sha256:" + "f" * 64}
    _, after, _ = _keys(m, replace(inputs, model_digests=digests))
    assert _changed(before, after) == {k for k in before if k[0] == victim.name}


@PROPS
@given(worlds(), st.data())
def test_calibration_data_changes_only_calibrated_cells_of_that_model(world, data):
    m, inputs = world
    calibrated = [mod for mod in m.models if mod.calibration]
    if not calibrated:
        return
    victim = data.draw(st.sampled_from(calibrated))
    _, before, t_before = _keys(m, inputs)
    _, after, t_after = _keys(m, replace(inputs, data_digests={**inputs.data_digests,
                                                               victim.calibration.path: "sha256:" + "d" * 64}))
    # int8 reads the data through a calibrator (native) or Q/DQ calibration (transform); fp8 through Q/DQ only
    assert _changed(before, after) == {
        k for k, c in before.items()
        if k[0] == victim.name and ((k[1] == "int8" and c.route in ("native", "transform"))
                                    or (k[1] == "fp8" and c.route == "transform"))}


@PROPS
@given(worlds(), st.data())
def test_compute_capability_changes_only_that_targets_cells(world, data):
    m, inputs = world
    victim = data.draw(st.sampled_from(m.targets))
    if victim.compute_capabilities == ():
        new = replace(victim, hardware_compatibility="none", compute_capabilities=("7.0",))
    elif victim.builder == "tensorrt-rtx":
        ccs = set(victim.compute_capabilities) ^ {data.draw(st.sampled_from(RTX_CCS))}
        new = replace(victim, compute_capabilities=tuple(ccs or {"12.0", "8.6"} - set(victim.compute_capabilities)))
    else:
        new = replace(victim, compute_capabilities=("7.0",))  # sm70: no other target of the pool uses it
    m2 = replace(m, targets=tuple(new if t is victim else t for t in m.targets))
    _, before, t_before = _keys(m, inputs)
    _, after, t_after = _keys(m2, inputs)
    assert _changed(before, after) == {k for k in before if k[3] == victim.name}
    assert t_before == t_after or victim.compute_capabilities == () or \
        any(c.blocked for k, c in before.items() if k[3] == victim.name) or \
        any(c.blocked for k, c in after.items() if k[3] == victim.name)


@PROPS
@given(worlds(), st.data())
def test_builder_version_changes_only_that_targets_cells_and_no_transform(world, data):
    m, inputs = world
    victim = data.draw(st.sampled_from(m.targets))
    major, minor, *_ = victim.builder_version.split(".")
    new = replace(victim, builder_version=f"{major}.{minor}.99.1")  # same family: same address
    m2 = replace(m, targets=tuple(new if t is victim else t for t in m.targets))
    g1, before, _ = _keys(m, inputs)
    g2, after, _ = _keys(m2, inputs)
    assert _changed(before, after) == {k for k in before if k[3] == victim.name}
    assert {k: c.address for k, c in before.items()} == {k: c.address for k, c in after.items()}
    # an fp16-converted ONNX does not depend on the TensorRT version that builds it
    assert {i: n.key for i, n in g1.nodes.items() if n.kind == "transform"} == \
        {i: n.key for i, n in g2.nodes.items() if n.kind == "transform"}


@PROPS
@given(worlds(), st.data(), st.sampled_from(["optimization_level", "workspace_mib", "tiling_level", "extra"]))
def test_a_builder_option_changes_only_that_targets_cells(world, data, option):
    m, inputs = world
    victim = data.draw(st.sampled_from(m.targets))
    value = {"optimization_level": 5, "workspace_mib": 1234, "tiling_level": "full",
             "extra": {**victim.options.extra, "zz": 7}}[option]
    new = replace(victim, options=replace(victim.options, **{option: value}))
    m2 = replace(m, targets=tuple(new if t is victim else t for t in m.targets))
    _, before, t_before = _keys(m, inputs)
    _, after, t_after = _keys(m2, inputs)
    # only cells of that target, and only if its builder applies the option (an option it ignores never rebuilds)
    reads = capabilities(victim.builder, victim.builder_version).reads_options
    applies = reads is None or option in reads
    assert _changed(before, after) == {k for k in before if k[3] == victim.name and applies}
    assert t_before == t_after


@PROPS
@given(worlds(), st.data(), st.sampled_from(["min", "opt", "max"]))
def test_one_profile_dim_changes_only_that_models_cells_using_that_profile(world, data, which):
    m, inputs = world
    victim = data.draw(st.sampled_from(m.models))
    inp = data.draw(st.sampled_from(victim.inputs))
    pname = data.draw(st.sampled_from(sorted(inp.profiles)))
    dim = data.draw(st.integers(0, 3))
    old = inp.profiles[pname]
    shape = list(getattr(old, which))
    shape[dim] += 1000
    new_inp = replace(inp, profiles={**inp.profiles, pname: replace(old, **{which: tuple(shape)})})
    new_model = replace(victim, inputs=tuple(new_inp if i is inp else i for i in victim.inputs))
    m2 = replace(m, models=tuple(new_model if mod is victim else mod for mod in m.models))
    _, before, _ = _keys(m, inputs)
    _, after, _ = _keys(m2, inputs)
    assert _changed(before, after) == {k for k in before
                                       if k[0] == victim.name and pname in victim.profile_sets[k[2]]}


@PROPS
@given(worlds())
def test_transform_tool_version_changes_only_transformed_cells(world):
    m, inputs = world
    _, before, _ = _keys(m, inputs)
    _, after, _ = _keys(m, replace(inputs, tool_versions={**inputs.tool_versions, "onnxruntime": "1.24.0"}))
    assert _changed(before, after) == {k for k, c in before.items() if c.route == "transform"}


@PROPS
@given(worlds(), st.data())
def test_conversion_setting_changes_only_that_models_converted_cells_of_that_precision(world, data):
    m, inputs = world
    victim = data.draw(st.sampled_from(m.models))
    spec = data.draw(st.sampled_from(victim.precisions))
    new_spec = replace(spec, keep_io_types=not spec.keep_io_types)
    new_model = replace(victim, precisions=tuple(new_spec if s is spec else s for s in victim.precisions))
    m2 = replace(m, models=tuple(new_model if mod is victim else mod for mod in m.models))
    _, before, _ = _keys(m, inputs)
    _, after, _ = _keys(m2, inputs)
    assert _changed(before, after) == {k for k, c in before.items()
                                       if k[0] == victim.name and k[1] == spec.name and c.route == "transform"}


@PROPS
@given(worlds())
def test_plugin_libraries_and_salt_change_every_key(world):
    m, inputs = world
    _, base, _ = _keys(m, inputs)
    _, plugins, _ = _keys(m, replace(inputs, plugin_libraries={"/opt/plugins/a.so": "sha256:" + "2" * 64}))
    _, salted, _ = _keys(replace(m, salt=m.salt + "x"), inputs)
    assert _changed(base, plugins) == set(base) == _changed(base, salted)


# --- order independence through YAML text and the real loader ---------------------------------------------------

def _yaml_doc(model_path: str, calib_path: str) -> dict:
    return {
        "manifest_version": 1,
        "project": "props",
        "models": [
            {"name": "det", "version": "1.0.0", "source": {"path": model_path},
             "inputs": {"x": {"shape": ["N", 3, "H", "W"],
                              "profiles": {"small": {"min": [1, 3, 32, 32], "opt": [1, 3, 64, 64],
                                                     "max": [4, 3, 128, 128]},
                                           "large": {"min": [1, 3, 256, 256], "opt": [2, 3, 512, 512],
                                                     "max": [8, 3, 1024, 1024]}}}},
             "constraints": {"H": {"multiple_of": 32}, "W": {"multiple_of": 32}},
             "profile_sets": {"online": ["small"], "offline": ["large"]},
             "precisions": ["fp32", "fp16", {"name": "int8", "calibration_method": "entropy"}],
             "calibration": {"path": calib_path, "samples": 4}},
            {"name": "rec", "version": "2.0.0", "source": {"path": model_path.replace("det", "rec")},
             "inputs": {"x": {"shape": ["N", 3, 48, "W"],
                              "profiles": {"default": {"min": [1, 3, 48, 160], "opt": [8, 3, 48, 320],
                                                       "max": [16, 3, 48, 640]}}}},
             "precisions": ["fp32", {"name": "fp16", "keep_io_types": True, "op_block_list": ["Softmax", "Exp"]}]},
        ],
        "targets": [
            {"name": "l4", "builder": "tensorrt", "builder_version": "10.13.3.9", "compute_capability": "8.9",
             "runners": {"build": ["self-hosted", "l4"]},
             "options": {"optimization_level": 4, "workspace_mib": 2048}},
            {"name": "rtx", "builder": "tensorrt-rtx", "builder_version": "1.7.1.116",
             "compute_capabilities": ["8.6", "8.9", "12.0"],
             "runners": {"build": ["ubuntu-latest"], "gate": ["self-hosted", "rtx"]}},
            {"name": "cpu", "builder": "onnxruntime", "builder_version": "1.23", "device": "cpu"},
        ],
        "matrix": {"exclude": [{"precision": "int8", "target": "cpu"}, {"model": "rec", "target": "l4"}],
                   "include": [{"model": "rec", "precision": "fp16", "target": "l4"}]},
    }


_SET_LIKE = {"compute_capabilities", "op_block_list", "exclude", "include"}


def _scramble(value, rnd: random.Random, key: str | None = None):
    """Shuffle every mapping's key order and every set-like list; keep ordered lists (shapes, profile sets)."""
    if isinstance(value, dict):
        return {k: _scramble(v, rnd, k) for k, v in _shuffled(value.items(), rnd)}
    if isinstance(value, list):
        items = [_scramble(v, rnd) for v in value]
        return _shuffled(items, rnd) if key in _SET_LIKE or key in ("models", "targets", "precisions") else items
    return value


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.randoms(use_true_random=False))
def test_yaml_key_order_and_set_like_list_order_do_not_change_keys(tmp_path: Path, rnd):
    from orchestrator.manifest import load_manifest

    for name in ("det", "rec"):
        make_tiny_model(tmp_path / f"{name}.onnx", seed=len(name))  # validate reads the model: a real one
    (tmp_path / "calib").mkdir(exist_ok=True)
    doc = _yaml_doc(str(tmp_path / "det.onnx"), str(tmp_path / "calib"))
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(doc, sort_keys=False))
    b.write_text(yaml.safe_dump(_scramble(doc, rnd), sort_keys=False))
    builders = ("tensorrt", "tensorrt-rtx", "onnxruntime", "trtexec")
    ma = load_manifest(a, capabilities=capabilities, builder_names=builders)
    mb = load_manifest(b, capabilities=capabilities, builder_names=builders)
    inputs = inputs_for(ma)
    ga = resolve([ma], inputs, capabilities)
    gb = resolve([mb], inputs, capabilities)
    assert [(c.address, c.build_key) for c in ga.cells] == [(c.address, c.build_key) for c in gb.cells]
    assert len(ga.cells) == 21  # det 18 - 2 excluded int8@cpu; rec 6 - 2 excluded @l4 + 1 included
    assert ga.order == gb.order
