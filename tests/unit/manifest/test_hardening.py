"""Hardening (issue 11): manifests that validated and then crashed `plan`, or crashed the loader itself, or let
through values that later steps cannot take. Each test reproduced its problem before the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.core.plan import plan_against
from orchestrator.core.resolve import ResolveInputs, resolve
from orchestrator.errors import ManifestError
from orchestrator.manifest import load_manifest

from . import fakes

MAX_DEPTH = 50  # the loader's cap, named in its message


class _AnyDigest(dict):
    """Every model path has a digest (the plan is made against an empty registry: no file is read)."""

    def __missing__(self, key: str) -> str:
        return "sha256:" + "0" * 64


def plan_of(manifest):
    graph = resolve([manifest], ResolveInputs(model_digests=_AnyDigest()), fakes.capabilities)
    return graph, plan_against(graph, {}, "empty")


def problems_of(load, text: str, name: str = "h.yaml", **kw):
    with pytest.raises(ManifestError) as info:
        load(text, name=name, **kw)
    for p in info.value.problems:  # every problem is located: file:line:col
        assert p.file.endswith(name) and p.line is not None and p.column is not None, p
    return info.value.problems


STATIC = """\
manifest_version: 1
models:
  - name: st
    version: "1"
    source: {path: ../models/scores.onnx}
    inputs: {x: {shape: [1, 2]}}
    precisions: [fp32, PRECISION]
    calibration: {path: ../data/calib}
targets:
  - {name: TARGET}
"""
_CPU = "cpu, builder: onnxruntime, builder_version: \"1.31\", device: cpu"
_A10 = "a10, builder: tensorrt, builder_version: \"10.13.3.9\", compute_capability: \"8.6\""


# -- 1. int8 on a static model (no profile declared) -------------------------------------------------------------

@pytest.mark.parametrize("precision,target,route", [("int8", _CPU, "transform"),
                                                     ("{name: int8, via: transform}", _A10, "transform"),
                                                     ("{name: int8, via: native}", _A10, "native")])
def test_int8_on_a_static_model_plans_with_its_single_derived_profile(load, precision, target, route):
    m = load(STATIC.replace("PRECISION", precision).replace("TARGET", target))
    graph, the_plan = plan_of(m)
    cell = next(c for c in graph.cells if c.precision.name == "int8")
    assert cell.route == route and not cell.blocked
    if route == "transform":  # calibration runs at the static shape: the model's one (implicit) profile
        assert cell.key_inputs["calibration"]["shapes"] == {"x": [1, 2]}
        assert cell.calibrate_node in graph.nodes
    assert {e.status for e in the_plan.entries} == {"build"}


# -- 2. an empty document; an include rule without `model` ---------------------------------------------------------

@pytest.mark.parametrize("text", ["---\n", "", "# only a comment\n", "--- \n...\n", "~\n", "null\n", "--- !!null\n"])
def test_an_empty_document_is_refused_with_a_location(load, text):
    (problem,) = problems_of(load, text)
    assert problem.message == "the manifest is empty" and problem.line == 1


TWO_MODELS = """\
manifest_version: 1
models:
  - {name: st, version: "1", source: {path: ../models/scores.onnx}, inputs: {x: {shape: [1, 2]}}}
  - name: dyn
    version: "1"
    source: {path: ../models/tiny.onnx}
    inputs:
      x: {shape: [N, 3, 8, 8], profiles: {big: {min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}}}
    precisions: [fp32, fp16]
targets:
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}
matrix:
  exclude: [{target: cpu}]
  include: [RULE]
"""


@pytest.mark.parametrize("rule,expected", [
    ("{profile_set: big, target: cpu}", {"dyn/fp32/big@cpu+ort1.31", "dyn/fp16/big@cpu+ort1.31"}),
    ("{profile_set: big}", {"dyn/fp32/big@cpu+ort1.31", "dyn/fp16/big@cpu+ort1.31"}),
    ("{precision: fp16}", {"dyn/fp16/big@cpu+ort1.31"}),  # st never declared fp16: no cell of st
    ("{precision: fp32, profile_set: default}", {"st/fp32/default@cpu+ort1.31"}),
])
def test_an_include_rule_without_model_applies_to_the_models_that_have_what_it_names(load, rule, expected):
    m = load(TWO_MODELS.replace("RULE", rule))
    graph, _ = plan_of(m)
    assert {c.address for c in graph.cells} == expected


def test_an_include_rule_whose_precision_and_profile_set_never_meet_is_refused(load):
    (problem,) = problems_of(load, TWO_MODELS.replace("RULE", "{precision: fp16, profile_set: default}"))
    assert problem.path == "matrix.include[0]" and problem.line == 14
    assert problem.message == ("no model declares both precision 'fp16' and profile set 'default': the rule "
                               "matches no cell")


# -- 3. nesting depth; explicit tags -------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", ["flow-list", "flow-map", "block-list"])
def test_deep_nesting_is_refused_at_load_naming_the_limit(load, shape):
    depth = 500
    text = {"flow-list": "models: " + "[" * depth + "]" * depth + "\n",
            "flow-map": "models: " + "{a: " * depth + "1" + "}" * depth + "\n",
            "block-list": "models:\n" + "- " * depth + "x\n"}[shape]
    (problem,) = problems_of(load, "manifest_version: 1\n" + text)
    assert problem.line == (3 if shape == "block-list" else 2)
    assert problem.message == f"the manifest nests deeper than {MAX_DEPTH} levels"
    assert "a manifest needs" in problem.hint


@pytest.mark.parametrize("shape", ["[", "- ", "{a: "])
def test_very_deep_nesting_does_not_crash_the_process(tmp_path, shape):
    """~30,000 levels used to overflow the C stack in libyaml's composer (exit 139): the real CLI, its own
    process."""
    path = tmp_path / "deep.yaml"
    path.write_text("manifest_version: 1\nmodels: " + ("\n" if shape == "- " else "") + shape * 30_000 + "x\n")
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(path)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = 3 if shape == "- " else 2
    assert f"deep.yaml:{line}:" in proc.stderr and f"nests deeper than {MAX_DEPTH} levels" in proc.stderr


def test_aliases_cannot_build_a_tree_deeper_than_the_limit(load):
    # every level is shallow in the text; the aliases stack them
    lines = ["manifest_version: 1", "x0: &a0 [1]"]
    for i in range(1, 60):
        lines.append(f"x{i}: &a{i} [*a{i - 1}]")
    problems = problems_of(load, "\n".join(lines) + "\n")
    assert any(p.message == f"the manifest nests deeper than {MAX_DEPTH} levels" for p in problems)


MINIMAL = """\
manifest_version: 1
models:
  - {name: s, version: "1", source: {path: ../models/scores.onnx}, inputs: {x: {shape: [1, 2]}}}
targets: [{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}]
"""


@pytest.mark.parametrize("old,new,path,message", [
    ("device: cpu}]", "device: cpu, options: {timing_cache: !!bool maybe}}]", "targets[0].options.timing_cache",
     "invalid bool value: 'maybe' is not a YAML boolean"),
    ("{name: cpu,", "!!python/object:os.system {name: cpu,", "targets[0]",
     "YAML tag '!!python/object:os.system' is not allowed"),
    ('version: "1"', "version: !!python/name:os.system ''", "models[0].version",
     "YAML tag '!!python/name:os.system' is not allowed"),
    ('version: "1"', "version: !!binary aGk=", "models[0].version", "YAML tag '!!binary' is not allowed"),
    ("shape: [1, 2]", "shape: !!set {1, 2}", "models[0].inputs.x.shape", "YAML tag '!!set' is not allowed"),
    ("shape: [1, 2]", "shape: !!omap [a: 1]", "models[0].inputs.x.shape", "YAML tag '!!omap' is not allowed"),
    ('version: "1"', "version: !custom 1", "models[0].version", "YAML tag '!custom' is not allowed"),
    ('"1.31"', "!!float 1.31x", "targets[0].builder_version", "invalid float value"),
])
def test_explicit_yaml_tags_are_located_errors(load, old, new, path, message):
    problems = problems_of(load, MINIMAL.replace(old, new))
    assert any(p.path == path and p.message.startswith(message) for p in problems), problems
    tagged = [p for p in problems if "YAML tag" in p.message]
    assert all(p.hint == "a manifest is plain data: remove the tag" for p in tagged)


def test_core_tags_that_fit_their_value_stay_allowed(load):
    m = load(MINIMAL.replace('"1.31"', "!!str 1.31").replace('version: "1"', "version: !!str 1"))
    assert m.targets[0].builder_version == "1.31" and m.models[0].version == "1"


def test_an_unquoted_date_is_read_as_its_text(load):
    assert load(MINIMAL.replace('version: "1"', "version: 2024-01-31")).models[0].version == "2024-01-31"


# -- 4. NaN / inf, long names, and other values later steps cannot take ---------------------------------------------

GATED = MINIMAL.replace("inputs: {x: {shape: [1, 2]}}}", "inputs: {x: {shape: [1, 2]}}, gate: GATE}")


@pytest.mark.parametrize("gate,path", [
    ("{parity: {tolerances: {fp32: {atol: .nan, rtol: 0.1}}}}", "models[0].gate.parity.tolerances.fp32.atol"),
    ("{parity: {tolerances: {fp32: {atol: 0.1, rtol: .inf}}}}", "models[0].gate.parity.tolerances.fp32.rtol"),
    ("{parity: {per_output: {y: {atol: 0.1, rtol: 0.1, min_cosine: .NaN}}}}",
     "models[0].gate.parity.per_output.y.min_cosine"),
    ("{parity: {per_output: {y: {atol: 0.1, rtol: 0.1, max_rel_l2: -.inf}}}}",
     "models[0].gate.parity.per_output.y.max_rel_l2"),
    ("{benchmark: {max_p95_ms: .inf}}", "models[0].gate.benchmark.max_p95_ms"),
    ("{benchmark: {max_regression_pct: .nan}}", "models[0].gate.benchmark.max_regression_pct"),
    ("{parity: {data: {preprocess: {mean: [0.5, .nan, 0.5]}}}}", "models[0].gate.parity.data.preprocess.mean[1]"),
])
def test_nan_and_infinite_numbers_are_refused(load, gate, path):
    problems = problems_of(load, GATED.replace("GATE", gate))
    (problem,) = [p for p in problems if p.message.startswith("not a finite number")]
    assert problem.path == path and "omit the key" in problem.hint


LONG = "a" * 64


@pytest.mark.parametrize("old,new,path", [
    ("name: s,", f"name: {LONG},", "models[0].name"),
    ("name: cpu,", f"name: {LONG},", "targets[0].name"),
    ("manifest_version: 1\n", f"manifest_version: 1\nproject: {LONG}\n", "project"),
    ("{x: {shape: [1, 2]}}",
     f"{{x: {{shape: [N, 2], profiles: {{{LONG}: {{min: [1, 2], opt: [1, 2], max: [1, 2]}}}}}}}}",
     f"models[0].inputs.x.profiles.{LONG}"),
])
def test_names_longer_than_63_characters_are_refused(load, old, new, path):
    problems = problems_of(load, MINIMAL.replace(old, new))
    assert [p.path for p in problems] == [path]
    assert "at most 63 characters" in problems[0].message


DYN = MINIMAL.replace("{x: {shape: [1, 2]}}",
                      "{x: {shape: [N, 2], profiles: {PROFILE: {min: [1, 2], opt: [1, 2], max: [1, 2]}}}}")

# Each case: what validate accepted, then which later step broke on it (or what it silently broke).
INVALID = [
    # names are address parts, file names, OCI repository components and table cells
    ("profile name with rich markup (crashed the plan table)", DYN.replace("PROFILE", '"[/]"'),
     'models[0].inputs.x.profiles["[/]"]'),
    ("profile name with a link (spoofed the address)", DYN.replace("PROFILE", '"[link=https://e.example]a"'),
     'models[0].inputs.x.profiles["[link=https://e.example]a"]'),
    ("profile name with a newline (forged plan --markdown rows)", DYN.replace("PROFILE", '"a\\n| + | b"'),
     'models[0].inputs.x.profiles["a\\n| + | b"]'),
    ("profile name with '/' and '@' (address separators)", DYN.replace("PROFILE", '"a/b@c"'),
     'models[0].inputs.x.profiles["a/b@c"]'),
    ("profile name with a space (publish: the artifact schema's address holds no whitespace)",
     DYN.replace("PROFILE", '"big batch"'), 'models[0].inputs.x.profiles["big batch"]'),
    ("builder version with a space (the same, through the target's address part)",
     MINIMAL.replace('"1.31"', '"1.31 beta"'), "targets[0].builder_version"),
    ("profile set name with '/'", MINIMAL.replace("[1, 2]}}}", "[1, 2]}}, profile_sets: {\"a/b\": [x]}}"),
     'models[0].profile_sets["a/b"]'),
    ("model name with a trailing separator (the same OCI repository as 's')", MINIMAL.replace("name: s,", "name: s-,"),
     "models[0].name"),
    ("target name with doubled separators", MINIMAL.replace("name: cpu,", "name: c..pu,"), "targets[0].name"),
    ("model version with a space (the readable OCI tag of '1 beta' is the one of '1-beta')",
     MINIMAL.replace('version: "1"', 'version: "1 beta"'), "models[0].version"),
    ("model version with '/'", MINIMAL.replace('version: "1"', 'version: "1/2"'), "models[0].version"),
    ("builder version with '/' (lands in the address)", MINIMAL.replace('"1.31"', '"1.31/x"'),
     "targets[0].builder_version"),
    ("runner label over 100 characters",
     MINIMAL.replace("device: cpu}", f"device: cpu, runners: {{build: [{LONG * 2}]}}}}"),
     "targets[0].runners.build[0]"),
    ("input name with a control character", MINIMAL.replace("{x: {shape", '{"x\\u0007": {shape'),
     'models[0].inputs["x\\x07"]'),
    ("salt with a bidi override", MINIMAL + 'salt: "a\\u202eb"\n', "salt"),
    ("op type with a space", MINIMAL.replace("inputs:", "precisions: [fp32, {name: fp16, op_block_list: [Soft max]}], "
                                             "inputs:"), "models[0].precisions[1].op_block_list[0]"),
    # numbers no tool, numpy array or TensorRT dimension can take
    ("fixed dim beyond int32", MINIMAL.replace("[1, 2]", "[1, 4294967296]"), "models[0].inputs.x.shape[1]"),
    ("profile dim beyond int32", DYN.replace("PROFILE", "p").replace("max: [1, 2]", "max: [99999999999999999999, 2]"),
     "models[0].inputs.x.profiles.p.max[0]"),
    ("constraint beyond int32", DYN.replace("PROFILE", "p").replace("inputs:", "constraints: {N: {multiple_of: "
                                                                    "4294967296}}, inputs:"),
     "models[0].constraints.N.multiple_of"),
    ("calibration samples in the trillions",
     MINIMAL.replace("inputs:", "calibration: {samples: 1000000000000}, inputs:"), "models[0].calibration.samples"),
    ("benchmark iterations in the trillions", GATED.replace("GATE", "{benchmark: {iterations: 1000000000000}}"),
     "models[0].gate.benchmark.iterations"),
    ("benchmark warmup in the trillions", GATED.replace("GATE", "{benchmark: {warmup: 1000000000000}}"),
     "models[0].gate.benchmark.warmup"),
    ("workspace beyond what a size_t of bytes holds", MINIMAL.replace("device: cpu}", "device: cpu, options: "
                                                                      "{workspace_mib: 100000000000000}}"),
     "targets[0].options.workspace_mib"),
    ("builder extra option beyond int64", MINIMAL.replace("device: cpu}", "device: cpu, options: "
                                                          "{extra: {k: 99999999999999999999}}}"),
     "targets[0].options.extra.k"),
    ("preprocess dtype numpy does not know", MINIMAL.replace("inputs:", "calibration: {preprocess: {dtype: flaot32}}, "
                                                             "inputs:"),
     "models[0].calibration.preprocess.dtype"),
    ("resize beyond any image", MINIMAL.replace("inputs:", "calibration: {preprocess: {resize: [9999999, 9]}}, "
                                                "inputs:"), "models[0].calibration.preprocess.resize[0]"),
    ("top-k beyond int32", GATED.replace("GATE", "{parity: {per_output: {y: {atol: 1, rtol: 1, topk: 4294967296}}}}"),
     "models[0].gate.parity.per_output.y.topk"),
    ("classifier k beyond int32", MINIMAL.replace("inputs:", "classifier_outputs: {y: 4294967296}, inputs:"),
     "models[0].classifier_outputs.y"),
    ("compute capability with a three-digit major", MINIMAL.replace("device: cpu}", "device: cpu}, "
                                                                    "{name: g, builder: tensorrt, builder_version: "
                                                                    "\"10.13.3.9\", compute_capability: \"123.4\"}"),
     "targets[1].compute_capability"),
    ("two targets whose cells get the same addresses (plan: 'also declared', no line)",
     MINIMAL.replace("device: cpu}]", "device: cpu}, {name: cpu2, builder: onnxruntime, builder_version: \"1.31.1\", "
                                      "device: cpu}]"), "targets[1].name"),
]


@pytest.mark.parametrize("text,path", [(t, p) for _, t, p in INVALID], ids=[d for d, _, _ in INVALID])
def test_values_later_steps_cannot_take_are_refused_at_validate(load, text, path):
    problems = problems_of(load, text)
    assert path in [p.path for p in problems], problems


def test_an_unknown_store_is_refused_when_the_store_names_are_known(repo_root):
    path = repo_root / "manifests" / "store.yaml"
    path.write_text(MINIMAL + "registry: {store: locall}\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(path, capabilities=fakes.capabilities, builder_names=fakes.BUILDER_NAMES,
                      store_names=("local", "oci"))
    (problem,) = info.value.problems
    assert (problem.path, problem.line, problem.message, problem.hint) == (
        "registry.store", 5, "unknown store 'locall'", "did you mean 'local'?")


def test_runner_labels_stay_free_text(load):
    """Labels are free text (tests/ci checks the emitters keep hostile ones out of workflows); the plan renderers
    escape them."""
    m = load(MINIMAL.replace("device: cpu}", 'device: cpu, runners: {build: ["new\\nline", "[/]"]}}'))
    assert m.targets[0].runners.build == ("new\nline", "[/]")


def test_problem_messages_never_carry_raw_control_characters(load):
    problems = problems_of(load, MINIMAL.replace("manifest_version: 1\n", 'manifest_version: 1\n"a\\nb\\u202e": 1\n'))
    assert all(ch not in p.render() for p in problems for ch in ("\u202e",))
    assert all("\n" not in p.message and "\n" not in p.path for p in problems)


def test_every_repository_manifest_still_loads(repo_root):
    """The real manifests keep validating under the tightened rules (their model files are not needed for this)."""
    root = Path(__file__).parents[3]
    for path in [root / "manifests" / "demo.yaml", root / "manifests" / "fleet.yaml"]:
        try:
            load_manifest(path, capabilities=fakes.capabilities, builder_names=fakes.BUILDER_NAMES)
        except ManifestError as e:
            rest = [p for p in e.problems if not p.message.startswith(("model file not found", "data path not found"))]
            assert not rest, rest
