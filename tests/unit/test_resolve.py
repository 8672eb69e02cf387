"""resolve(): literal manifests -> exact addresses, node ids, deps, blocked reasons and order."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.gatekeys import gate_inputs, gate_key, gate_node_key
from orchestrator.core.keys import digest_of, record_key
from orchestrator.core.model import MatrixRule, RunnerPool
from orchestrator.core.resolve import ResolveInputs, resolve, topological_order
from orchestrator.errors import ManifestError
from tests.unit.core_fixtures import (
    capabilities,
    image_input,
    inputs_for,
    manifest,
    model,
    ort_target,
    path_digest,
    precisions,
    rtx_target,
    shapes,
    target,
)


def _resolve(*manifests, **kw):
    return resolve(list(manifests), inputs_for(*manifests, **kw), capabilities)


def test_single_cell_exact_address_nodes_and_deps():
    m = manifest([model("ocr-det", precs=("fp16",))], [target("l4-trt")])
    g = _resolve(m)
    a = "ocr-det/fp16/default@sm89+trt10.13"
    assert [c.address for c in g.cells] == [a]
    cell = g.cell(a)
    assert (cell.route, cell.blocked, cell.transform_node, cell.model_version) == ("native", None, None, "1.0.0")
    assert {i: n.deps for i, n in g.nodes.items()} == {
        "prepare:ocr-det@1.0.0": (),
        f"build:{a}": ("prepare:ocr-det@1.0.0",),
        f"gate:parity:{a}": (f"build:{a}",),
        f"gate:benchmark:{a}": (f"gate:parity:{a}", f"build:{a}"),  # timed after parity, reads the engine
        f"publish:{a}": (f"gate:parity:{a}", f"gate:benchmark:{a}"),
    }
    assert g.order == ("prepare:ocr-det@1.0.0", f"build:{a}", f"gate:parity:{a}", f"gate:benchmark:{a}",
                       f"publish:{a}")
    assert g.nodes["prepare:ocr-det@1.0.0"].key == path_digest("/models/ocr-det.onnx")
    assert g.nodes[f"build:{a}"].key == cell.build_key
    # each gate node has its own key (build key + that gate's settings); the publish node the record's key
    parity, bench = g.nodes[f"gate:parity:{a}"].key, g.nodes[f"gate:benchmark:{a}"].key
    assert len({cell.build_key, parity, bench, cell.gate_key}) == 4
    assert cell.gate_inputs["build_key"] == cell.build_key
    assert g.nodes[f"publish:{a}"].key == record_key(cell.build_key, cell.gate_key, "1.0.0") == cell.record_key
    assert g.nodes[f"build:{a}"].address == a


def test_gates_disabled_publish_depends_on_build():
    m = manifest([model("m", parity=False, benchmark=False)], [target()])
    g = _resolve(m)
    a = "m/fp16/default@sm89+trt10.13"
    assert set(g.nodes) == {"prepare:m@1.0.0", f"build:{a}", f"publish:{a}"}
    assert g.nodes[f"publish:{a}"].deps == (f"build:{a}",)


def test_benchmark_only_follows_build():
    g = _resolve(manifest([model("m", parity=False)], [target()]))
    a = "m/fp16/default@sm89+trt10.13"
    assert g.nodes[f"gate:benchmark:{a}"].deps == (f"build:{a}",)
    assert g.nodes[f"publish:{a}"].deps == (f"gate:benchmark:{a}",)


def test_addresses_of_every_target_kind():
    targets = [target("l4", ccs=("8.9",)), target("a100-hc", ccs=(), hardware_compatibility="ampere_plus"),
               target("h100-samecc", ccs=("9.0",), hardware_compatibility="same_compute_capability"),
               target("t4-vc", ccs=("7.5",), options=replace(target().options, version_compatible=True)),
               rtx_target("rtx", ccs=("8.6", "8.9", "12.0")), ort_target("ort")]
    g = _resolve(manifest([model("ocr-det", precs=("fp32",))], targets))
    assert [c.address for c in g.cells] == [
        "ocr-det/fp32/default@ampere-plus+trt10.13",
        "ocr-det/fp32/default@cpu+ort1.23",
        "ocr-det/fp32/default@sm75+trt10.13-vc",
        "ocr-det/fp32/default@sm86-sm89-sm120+rtx1.2",
        "ocr-det/fp32/default@sm89+trt10.13",
        "ocr-det/fp32/default@sm90-samecc+trt10.13",
    ]
    assert {c.route for c in g.cells} == {"none"}
    assert not any(n.kind == "transform" for n in g.nodes.values())


def test_fp16_transform_node_shared_by_two_targets():
    m = manifest([model("ocr-det", precs=("fp16",))],
                 [rtx_target("rtx-ampere", ccs=("8.6",), build=("self-hosted", "cpu")),
                  rtx_target("rtx-ada", ccs=("8.9",), build=("self-hosted", "cpu")),
                  target("trt11", version="11.0.0.1", ccs=("9.0",), build=("self-hosted", "sm90"))])
    g = _resolve(m)
    transforms = [n for n in g.nodes.values() if n.kind == "transform"]
    assert len(transforms) == 1
    t = transforms[0]
    assert t.id == f"transform:ocr-det/fp16#{t.key[:12]}"
    assert (t.deps, t.transform_kind, t.model) == (("prepare:ocr-det@1.0.0",), "fp16", "ocr-det")
    for a in ["ocr-det/fp16/default@sm86+rtx1.2", "ocr-det/fp16/default@sm89+rtx1.2",
              "ocr-det/fp16/default@sm90+trt11.0"]:
        assert g.cell(a).transform_node == t.id
        assert g.nodes[f"build:{a}"].deps == (t.id,)
    # three different engines from one converted model
    assert len({c.build_key for c in g.cells}) == 3
    assert g.order.index(t.id) < min(g.order.index(f"build:{c.address}") for c in g.cells)


def test_native_and_transform_routes_and_via():
    m = manifest([model("m", precs=(*precisions("fp16"), *precisions("int8", via="transform")),
                        calibration="/data/calib")], [target("t")])
    g = _resolve(m)
    assert g.cell("m/fp16/default@sm89+trt10.13").route == "native"
    int8 = g.cell("m/int8/default@sm89+trt10.13")
    assert int8.route == "transform"
    assert int8.transform_node.startswith("transform:m/int8-qdq#")
    calib = int8.key_inputs["calibration"]
    assert calib["data"] == {"digest": "sha256:" + "c" * 64, "random": False, "samples": 8, "seed": None,
                             "preprocess": None}
    assert calib["shapes"] == {"x": [1, 3, 640, 640]} and calib["method"] == "entropy"
    assert calib["calibrator"] == {"name": "transform:int8-qdq", "tools": {"onnxconverter-common": "1.14.0"},
                                   "for": "int8-qdq", "recipe": ""}
    # the transform is keyed by the calibration cache it quantizes from; the calibrate node comes first
    node = g.nodes[int8.calibrate_node]
    assert int8.key_inputs["transform"]["calibration"] == node.key == digest_of(calib)
    assert (node.kind, node.calibrator, node.deps) == ("calibrate", "transform:int8-qdq", ("prepare:m@1.0.0",))
    assert g.nodes[int8.transform_node].deps == ("prepare:m@1.0.0", int8.calibrate_node)
    assert g.cell("m/fp16/default@sm89+trt10.13").key_inputs["calibration"] is None


def test_native_int8_keys_the_calibration_data():
    g = _resolve(manifest([model("m", precs=("int8",), calibration="/data/calib")], [target()]))
    cell = g.cell("m/int8/default@sm89+trt10.13")
    assert cell.route == "native" and cell.key_inputs["calibration"]["data"]["digest"] == "sha256:" + "c" * 64
    # the builder family's own cache format, of that exact version
    assert cell.key_inputs["calibration"]["calibrator"] == {"name": "tensorrt", "version": "10.13.3.9",
                                                            "for": "native"}
    assert g.nodes[f"build:{cell.address}"].deps == ("prepare:m@1.0.0", cell.calibrate_node)
    assert g.nodes[cell.calibrate_node].calibrator == "builder:tensorrt"


def test_a_builder_that_quantizes_without_data_keys_no_calibration():
    """Issue 23.22: a builder whose capabilities leave int8 out of ``calibrated`` (dynamic quantization) builds its
    int8 cells from no calibration data: none in the key, no calibrate node."""
    def dynamic(builder: str, version: str):
        caps = capabilities(builder, version)
        return replace(caps, calibrated=frozenset()) if caps is not None else None

    m = manifest([model("m", precs=("int8",))], [target()])
    cell = resolve([m], inputs_for(m), dynamic).cell("m/int8/default@sm89+trt10.13")
    assert (cell.route, cell.key_inputs["calibration"], cell.calibrate_node) == ("native", None, None)
    # the same builder calibrating int8 (the default) keys its calibration data
    calibrated = _resolve(manifest([model("m", precs=("int8",), calibration="/data/calib")], [target()]))
    assert calibrated.cell(cell.address).key_inputs["calibration"] is not None


def test_one_calibration_cache_for_every_int8_target_of_a_builder_version():
    targets = [target("l4", ccs=("8.9",)), target("a10", ccs=("8.6",)), target("old", ccs=("8.6",),
                                                                               version="10.8.0.43")]
    g = _resolve(manifest([model("m", precs=("int8",), calibration="/data/calib")], targets))
    by_version: dict[str, set[str]] = {}
    for c in g.cells:
        by_version.setdefault(c.target.builder_version, set()).add(c.calibrate_node)
    assert {v: len(n) for v, n in by_version.items()} == {"10.13.3.9": 1, "10.8.0.43": 1}
    assert by_version["10.13.3.9"] != by_version["10.8.0.43"]


def test_profile_sets_each_give_a_cell_with_their_profiles():
    inp = image_input(profiles={"small": shapes((1, 3, 32, 32), (1, 3, 64, 64), (1, 3, 128, 128)),
                                "large": shapes((1, 3, 512, 512), (1, 3, 640, 640), (1, 3, 1024, 1024))})
    m = manifest([model("m", inputs=(inp,), profile_sets={"small": ("small",), "both": ("small", "large")})],
                 [target()])
    g = _resolve(m)
    assert [c.address for c in g.cells] == ["m/fp16/both@sm89+trt10.13", "m/fp16/small@sm89+trt10.13"]
    both = g.cell("m/fp16/both@sm89+trt10.13")
    assert [p.name for p in both.profiles] == ["small", "large"]
    assert both.key_inputs["profiles"][1] == {
        "name": "large", "shapes": {"x": {"min": [1, 3, 512, 512], "opt": [1, 3, 640, 640],
                                          "max": [1, 3, 1024, 1024]}}}


def test_exclude_removes_matching_cells_only():
    m = manifest([model("det", precs=("fp16", "int8")), model("rec", precs=("fp16", "int8"))],
                 [target("l4"), ort_target("ort")],
                 exclude=(MatrixRule(precision="int8", target="ort"), MatrixRule(model="rec", target="l4")))
    assert [c.address for c in _resolve(m).cells] == [
        "det/fp16/default@cpu+ort1.23", "det/fp16/default@sm89+trt10.13", "det/int8/default@sm89+trt10.13",
        "rec/fp16/default@cpu+ort1.23"]


def test_include_adds_cells_and_re_adds_excluded_ones_once():
    m = manifest([model("det", precs=("fp16",))], [target("l4"), ort_target("ort")],
                 exclude=(MatrixRule(target="ort"),),
                 include=(MatrixRule(model="det", precision="fp16", target="ort"),  # re-adds the excluded cell
                          MatrixRule(model="det", precision="fp32", target="l4"),  # a precision not listed
                          MatrixRule(model="det", precision="fp16", target="l4")))  # already there: no duplicate
    g = _resolve(m)
    assert [c.address for c in g.cells] == [
        "det/fp16/default@cpu+ort1.23", "det/fp16/default@sm89+trt10.13", "det/fp32/default@sm89+trt10.13"]
    assert g.cell("det/fp32/default@sm89+trt10.13").precision.name == "fp32"


def test_include_without_fields_matches_everything():
    m = manifest([model("det", precs=("fp16",))], [target("l4")], exclude=(MatrixRule(),),
                 include=(MatrixRule(model="det"),))
    assert [c.address for c in _resolve(m).cells] == ["det/fp16/default@sm89+trt10.13"]


def test_blocked_fp8_on_sm86():
    m = manifest([model("m", precs=("fp8",), calibration="/data/c")], [target("a10", ccs=("8.6",))])
    cell = _resolve(m).cell("m/fp8/default@sm86+trt10.13")
    assert cell.blocked == "fp8 needs compute capability >= 8.9; target has sm86"


def test_blocked_fp8_names_only_the_too_old_ccs_of_an_rtx_list():
    m = manifest([model("m", precs=("fp8",))], [rtx_target(ccs=("8.0", "8.6", "8.9", "12.0"))])
    cell = _resolve(m).cells[0]
    assert cell.blocked == "fp8 needs compute capability >= 8.9; target has sm80, sm86"


def test_blocked_precision_impossible_for_builder():
    m = manifest([model("m", precs=("bf16",)), model("n", precs=(*precisions("fp16", via="native"),))],
                 [ort_target("ort"), target("trt11", version="11.0.0.1", ccs=("9.0",))])
    g = _resolve(m)
    assert g.cell("m/bf16/default@cpu+ort1.23").blocked == "onnxruntime 1.23.2 cannot build bf16 (via auto)"
    assert g.cell("n/fp16/default@sm90+trt11.0").blocked == "tensorrt 11.0.0.1 cannot build fp16 (via native)"
    assert g.cell("m/bf16/default@sm90+trt11.0").blocked is None


def test_blocked_builder_not_installed():
    m = manifest([model("m")], [target("x", builder="mystery", version="1.0")])
    assert _resolve(m).cells[0].blocked == "builder plugin 'mystery' is not installed"


def test_blocked_runner_pool_labels_missing():
    pools = (RunnerPool(labels=("self-hosted", "sm89", "trt10.13", "linux")), RunnerPool(labels=("self-hosted", "cpu")))
    m = manifest([model("m", precs=("fp16",))],
                 [target("l4"),  # build labels are a subset of pool 1
                  target("a10", ccs=("8.6",), build=("self-hosted", "sm86")),
                  rtx_target("rtx", ccs=("8.9",)),  # builds on cpu pool; gate labels [self-hosted, rtx] nowhere
                  ],
                 runner_pools=pools)
    g = _resolve(m)
    assert g.cell("m/fp16/default@sm89+trt10.13").blocked is None
    assert g.cell("m/fp16/default@sm86+trt10.13").blocked == "no runner pool has the build labels [self-hosted, sm86]"
    assert g.cell("m/fp16/default@sm89+rtx1.2").blocked == "no runner pool has the gate labels [self-hosted, rtx]"


def test_no_runner_pools_means_labels_are_not_checked():
    m = manifest([model("m")], [target("a10", ccs=("8.6",), build=("nowhere",))])
    assert _resolve(m).cells[0].blocked is None


def test_blocked_cell_has_a_key_but_no_work_nodes():
    m = manifest([model("m", precs=("fp16", "fp8"))], [rtx_target("rtx", ccs=("8.6",))])
    g = _resolve(m)
    blocked = g.cell("m/fp8/default@sm86+rtx1.2")
    assert blocked.blocked and len(blocked.build_key) == 64
    assert g.nodes_of(blocked.address) == []
    # the fp8 Q/DQ transform is only needed by the blocked cell: it must not be scheduled
    transforms = [n.id for n in g.nodes.values() if n.kind == "transform"]
    assert transforms == [g.cell("m/fp16/default@sm86+rtx1.2").transform_node]


def test_model_whose_cells_are_all_blocked_has_no_prepare_node():
    m = manifest([model("ok"), model("never", precs=("bf16",))], [ort_target()])
    assert [n for n in _resolve(m).nodes if n.startswith("prepare:")] == ["prepare:ok@1.0.0"]


def test_order_is_deterministic_and_independent_of_declaration_order():
    models = [model("b", precs=("fp16", "int8"), calibration="/c"), model("a", precs=("fp32", "fp16"))]
    targets = [target("l4"), rtx_target(), ort_target()]
    g1 = _resolve(manifest(models, targets))
    g2 = _resolve(manifest(models[::-1], targets[::-1]))
    assert g1.order == g2.order
    assert [c.address for c in g1.cells] == sorted(c.address for c in g1.cells)
    assert [c.build_key for c in g1.cells] == [c.build_key for c in g2.cells]
    assert list(g1.order) != sorted(g1.order)  # topological, not alphabetical
    pos = {n: i for i, n in enumerate(g1.order)}
    assert all(pos[d] < pos[n] for n, node in g1.nodes.items() for d in node.deps)


def test_cc_list_order_does_not_change_address_or_key():
    m1 = manifest([model("m")], [rtx_target(ccs=("8.9", "8.6", "12.0"))])
    m2 = manifest([model("m")], [rtx_target(ccs=("12.0", "8.6", "8.9"))])
    c1, c2 = _resolve(m1).cells[0], _resolve(m2).cells[0]
    assert c1.address == c2.address == "m/fp16/default@sm86-sm89-sm120+rtx1.2"
    assert c1.build_key == c2.build_key


def test_same_address_in_two_manifests_is_a_manifest_error():
    m1 = manifest([model("m")], [target("l4")], file="/repo/manifests/a.yaml")
    m2 = manifest([model("m")], [target("l4-again")], file="/repo/manifests/b.yaml")
    with pytest.raises(ManifestError) as e:
        _resolve(m1, m2)
    (p,) = e.value.problems
    assert (p.file, p.path) == ("/repo/manifests/b.yaml", "models[m]")
    assert p.message == "cell m/fp16/default@sm89+trt10.13 is also declared in /repo/manifests/a.yaml"
    assert p.hint == "give one of the models or targets a different name"


def test_two_manifests_resolve_into_one_graph():
    m1 = manifest([model("det")], [target()], file="/repo/manifests/a.yaml")
    m2 = manifest([model("rec")], [target()], file="/repo/manifests/b.yaml")
    g = _resolve(m1, m2)
    assert [(c.address, c.manifest) for c in g.cells] == [
        ("det/fp16/default@sm89+trt10.13", "/repo/manifests/a.yaml"),
        ("rec/fp16/default@sm89+trt10.13", "/repo/manifests/b.yaml")]


def test_capabilities_are_asked_once_per_builder_version():
    calls = []

    def caps(builder, version):
        calls.append((builder, version))
        return capabilities(builder, version)

    m = manifest([model("a"), model("b")], [target("l4"), target("a10", ccs=("8.6",)), ort_target()])
    resolve([m], inputs_for(m), caps)
    assert sorted(calls) == [("onnxruntime", "1.23.2"), ("tensorrt", "10.13.3.9")]


def test_key_inputs_exact_for_a_native_fp16_cell():
    m = manifest([model("ocr-det")], [target()], salt="s1")
    cell = _resolve(m, plugin_libraries={"/opt/p.so": "sha256:" + "9" * 64}).cells[0]
    assert cell.key_inputs == {
        "schema": 1,
        "model": {"digest": path_digest("/models/ocr-det.onnx")},
        "transform": None,
        "calibration": None,
        "precision": {"name": "fp16", "route": "native"},
        "profiles": [{"name": "default",
                      "shapes": {"x": {"min": [1, 3, 320, 320], "opt": [1, 3, 640, 640],
                                       "max": [4, 3, 1280, 1280]}}}],
        "builder": {"name": "tensorrt", "version": "10.13.3.9", "recipe": ""},  # no recipes given: ""
        "target": {"compute_capabilities": ["8.9"], "hardware_compatibility": "none", "device": "gpu",
                   "platform": "linux/x86_64"},
        "options": {"optimization_level": None, "tiling_level": None, "workspace_mib": None,
                    "strongly_typed": None, "version_compatible": False, "exclude_lean_runtime": False,
                    "ort_optimization": "all", "timing_cache_pin": False, "extra": {}},
        "plugin_libraries": {"/opt/p.so": "sha256:" + "9" * 64},
        "salt": "s1",
    }


def _graphlib_order(nodes):
    from graphlib import TopologicalSorter

    sorter = TopologicalSorter()
    for node_id in sorted(nodes):
        sorter.add(node_id, *nodes[node_id].deps)
    sorter.prepare()
    order = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return tuple(order)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 29), max_size=4), min_size=1, max_size=30), st.booleans())
def test_topological_order_equals_the_sorted_graphlib_layers(deps, dangling):
    from orchestrator.core.graph import Node

    # node i may depend only on nodes < i (a DAG); with `dangling`, also on ids that are not nodes
    nodes = {f"n{i:02d}": Node(f"n{i:02d}", "build", tuple(f"n{d:02d}" for d in ds if d < i)
                               + (("ghost",) if dangling and i % 3 == 0 else ()), "k")
             for i, ds in enumerate(deps)}
    assert topological_order(nodes) == _graphlib_order(nodes)


def test_topological_order_refuses_a_cycle():
    from graphlib import CycleError

    from orchestrator.core.graph import Node

    with pytest.raises(CycleError):
        topological_order({"a": Node("a", "build", ("b",), "k"), "b": Node("b", "build", ("a",), "k")})


def test_every_build_key_is_the_key_of_its_key_inputs():
    from orchestrator.core.keys import build_key

    m = manifest([model("b", precs=("fp16", "int8", "fp8"), calibration="/c"), model("a", precs=("fp32", "bf16"))],
                 [target(), rtx_target(), ort_target(), target("h", version="11.1.0.8", ccs=("9.0",))], salt="é")
    g = _resolve(m, plugin_libraries={"/p/b.so": "sha256:2", "/p/a.so": "sha256:1"})
    assert len(g.cells) == 20
    blocked_with_transform = 0
    for c in g.cells:
        assert c.build_key == build_key(c.key_inputs)
        if c.transform_node:
            transform_key = build_key(c.key_inputs["transform"])
            assert c.transform_node.endswith("#" + transform_key[:12])
            # a transform node is scheduled exactly when an unblocked cell needs it; blocked cells schedule nothing
            needed = any(o.transform_node == c.transform_node and not o.blocked for o in g.cells)
            assert (c.transform_node in g.nodes) == needed
            if needed:
                assert g.nodes[c.transform_node].key == transform_key
            if c.blocked:
                blocked_with_transform += 1
                assert g.nodes_of(c.address) == []
    # b/fp8 on the sm86 RTX target is blocked but shares its fp8 Q/DQ transform with the unblocked fp8 cells
    assert blocked_with_transform == 1


def test_a_precision_whose_transform_is_not_installed_is_blocked():
    m = manifest([model("m", precs=("fp8",))], [target("h100", ccs=("9.0",))])
    g = resolve([m], ResolveInputs(model_digests={"/models/m.onnx": path_digest("/models/m.onnx")},
                                   transforms=frozenset({"fp16", "bf16", "int8-qdq"})), capabilities)
    (cell,) = g.cells
    assert cell.blocked == "fp8 needs the 'fp8-qdq' transform, which no installed plugin provides"
    assert not [n for n in g.nodes if n.endswith(cell.address)]


def test_spliced_keys_equal_their_plain_definitions():
    """resolve() builds keys from cached JSON parts for speed; they are the documented digests, byte for byte."""
    m = manifest([model("m", precs=(*precisions("fp16"), *precisions("int8", via="transform")),
                        calibration="/data/calib")], [target(), rtx_target(), ort_target()])
    g = _resolve(m)
    models = {mod.name: mod for mod in m.models}
    for cell in g.cells:
        assert cell.gate_inputs == gate_inputs(cell.build_key, models[cell.model], cell.precision, cell.target, None)
        assert cell.build_key == digest_of(cell.key_inputs)
        assert cell.gate_key == gate_key(cell.gate_inputs)
        for kind in ("parity", "benchmark"):
            assert g.nodes[f"gate:{kind}:{cell.address}"].key == gate_node_key(cell.gate_inputs, kind)
