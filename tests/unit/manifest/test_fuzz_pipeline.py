"""The hardening fuzz (issue 11): mutated manifests taken through load + resolve + plan + the plan renderers.

The bases are the repository's own manifests (manifests/demo.yaml, manifests/fleet.yaml) and every YAML mapping
under tests/data/manifests/, with their model and data paths pointed at the test's tiny files. Mutations are made
on the parsed data (fast: no text re-parsing of garbage that YAML rejects on the first byte) and dumped back to
YAML. Every case must end in a plan, or in a ManifestError whose every problem has file:line:col: no other
exception, no crash, no hang (each case runs under a deadline). The plan is made against an empty registry with
the literal builder capabilities of ``fakes`` (no plugin is loaded).

Deterministic (``derandomize``): the same 2,000 cases every run, so CI failures reproduce locally.
"""

from __future__ import annotations

import copy
import io
import math
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from orchestrator.cli.plan_cmds import render_plan_markdown, render_plan_table
from orchestrator.contracts.builder import BuilderCapabilities
from orchestrator.core.plan import plan_against
from orchestrator.core.resolve import ResolveInputs, resolve
from orchestrator.errors import ManifestError, OrchestratorError
from orchestrator.manifest import load_manifests

from . import fakes

REPO = Path(__file__).parents[3]
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter: ~10x faster than PyYAML's
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2000"))
CASE_DEADLINE_S = 10.0  # one case takes milliseconds; a case running this long is a hang


def _capabilities(name: str, version: str) -> BuilderCapabilities | None:
    """fakes' first-party builders, plus the third-party `onnx-copy` of tests/data/manifests/third-party."""
    if name == "onnx-copy":
        return BuilderCapabilities(native=frozenset(), via_transform=frozenset(), target_kinds=frozenset({"cpu"}),
                                   needs_gpu=False, runs_on="anywhere", engine_suffix=".onnx")
    return fakes.capabilities(name, version)


BUILDERS = (*fakes.BUILDER_NAMES, "onnx-copy")


def _point_paths_at_test_files(doc: object) -> None:
    """Model sources -> a tiny test model (pins dropped), data paths -> the test's calibration folder."""
    if not isinstance(doc, dict):
        return
    for model in doc.get("models") or []:
        if not isinstance(model, dict):
            continue
        if isinstance(model.get("source"), dict):
            # a model gated as a classifier names its output: the stand-in has that output
            classifier = isinstance(model.get("classifier_outputs"), dict) and model["classifier_outputs"]
            model["source"] = {"path": "../models/classifier.onnx" if classifier else "../models/tiny.onnx"}
        for holder in (model.get("calibration"), ((model.get("gate") or {}).get("parity") or {}).get("data")
                       if isinstance(model.get("gate"), dict) else None):
            if isinstance(holder, dict) and "path" in holder:
                holder["path"] = "../data/calib"


def _bases() -> dict[str, dict]:
    files = [REPO / "manifests" / "demo.yaml", REPO / "manifests" / "fleet.yaml",
             *sorted((REPO / "tests" / "data" / "manifests").rglob("*.yaml"))]
    out = {}
    for path in files:
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue  # the corpus' YAML syntax cases: the text fuzz of test_fuzz.py covers those
        if isinstance(doc, dict):
            _point_paths_at_test_files(doc)
            out[str(path.relative_to(REPO))] = doc
    return out


BASES = _bases()
BASE_NAMES = sorted(BASES)
# the valid bases first: most mutations of them get through validation and reach resolve and plan
VALID_BASES = ["manifests/demo.yaml", "manifests/fleet.yaml", "tests/data/manifests/third-party/onnx-copy.yaml"]

HOSTILE = ["[/]", "[link=https://evil.example]ocr-det[/link]", "[bold]x", "a\n| + | `forged` | build |", "`", "|",
           "<img src=x onerror=alert(1)>", ":smile:", "\x00", "\x1b[31mred", "\u202egnp.exe", "\u2028", "a" * 300,
           "../../etc/passwd", "/dev/zero", "~", "*", "%s", "{x}", "$(id)", "${{ secrets.X }}", "", " ", "-", ".",
           "fp16", "fp61", "int8", "default", "cpu", "cuda", "8.9", "sm89", "12.0", "1.31", "10.13.3.9", "11.1.0.8",
           "tensorrt", "tensorrt-rtx", "onnxruntime", "trtexec", "onnx-copy", "opt", "max", "N", "H", "W", "x",
           "transform", "native", "auto", "ampere_plus", "same_compute_capability", "local", "oci"]
NUMBERS = [0, 1, -1, 2, 3, 7, 8, 32, 2**31 - 1, 2**31, 2**63, 10**30, -(10**30), 0.5, 1.0, -0.0, 1e-300, 1e308,
           math.nan, math.inf, -math.inf, True, False, None]
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)
SCALAR = st.one_of(st.sampled_from(HOSTILE), st.sampled_from(NUMBERS), TEXT, st.integers(-(2**70), 2**70),
                   st.floats(allow_nan=True, allow_infinity=True))
JUNK = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.one_of(st.sampled_from(HOSTILE), TEXT), inner,
                                                                    max_size=3)), max_leaves=6)


def _paths(node, prefix=()) -> Iterator[tuple]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _get(doc, path):
    for part in path:
        doc = doc[part]
    return doc


def _tweak(value, data):
    if isinstance(value, bool) or value is None:
        return data.draw(st.sampled_from([not value, None, 0, 1, "true", "yes"]))
    if isinstance(value, (int, float)):
        return data.draw(st.one_of(st.sampled_from(NUMBERS), st.sampled_from([value + 1, value - 1, -value,
                                                                              value * 1000, str(value)])))
    if isinstance(value, str):
        snippet = data.draw(st.sampled_from(HOSTILE))
        return data.draw(st.sampled_from([value + snippet, snippet + value, value.upper(), value[:1], value * 40,
                                          value.replace(".", ""), value + "-", value + "." + value]))
    if isinstance(value, list):
        return data.draw(st.sampled_from([[], value[:1], value + value[:1], list(reversed(value)), [value]]))
    return data.draw(st.sampled_from([{}, [value], {"x": value}]))


def _entries(doc, section: str) -> list[dict]:
    entries = doc.get(section) if isinstance(doc, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _names(doc, section: str) -> list:
    return [e["name"] for e in _entries(doc, section) if "name" in e]


def _sets_of(model: dict) -> set:
    sets = set(model["profile_sets"]) if isinstance(model.get("profile_sets"), dict) else set()
    inputs = model.get("inputs") if isinstance(model.get("inputs"), dict) else {}
    return sets | {p for i in inputs.values() if isinstance(i, dict) and isinstance(i.get("profiles"), dict)
                   for p in i["profiles"]} | {"default"}


def _precisions_of(model: dict, doc) -> set:
    declared = model.get("precisions", (doc.get("defaults") or {}).get("precisions") if isinstance(
        doc.get("defaults"), dict) else None)
    if not isinstance(declared, list):
        declared = ["fp32"]
    names = (p if isinstance(p, str) else p.get("name") for p in declared if isinstance(p, (str, dict)))
    return {n for n in names if isinstance(n, str)}  # a mutated name may be any YAML value


def _rule(doc, data) -> dict:
    """A matrix rule: any subset of its four fields, taken from one model's own names (a rule that plans) or from
    anywhere in the manifest (one the checks must judge)."""
    models = _entries(doc, "models")
    consistent = bool(models) and data.draw(st.booleans(), label="consistent rule")
    if consistent:
        model = data.draw(st.sampled_from(models), label="rule model")
        choices = {"model": [model.get("name", "m")], "precision": sorted(map(str, _precisions_of(model, doc))),
                   "profile_set": sorted(map(str, _sets_of(model))), "target": _names(doc, "targets") or ["t"]}
    else:
        choices = {"model": _names(doc, "models") or ["m"], "precision": ["fp32", "fp16", "bf16", "int8", "fp8"],
                   "profile_set": sorted({str(x) for m in models for x in _sets_of(m)} | {"default"}),
                   "target": _names(doc, "targets") or ["t"]}
    rule = {}
    for key, options in choices.items():
        if options and data.draw(st.booleans(), label=f"rule has {key}"):
            rule[key] = data.draw(st.sampled_from([str(o) for o in options]), label=key)
    return rule or {"target": str(choices["target"][0])}


def _make_static(doc, data) -> None:
    """A model whose inputs are all fixed (no profile declared), perhaps calibrated int8: the IndexError of #11."""
    models = _entries(doc, "models")
    if not models:
        return
    model = data.draw(st.sampled_from(models), label="static model")
    if isinstance(model.get("inputs"), dict):
        for spec in model["inputs"].values():
            if isinstance(spec, dict) and isinstance(spec.get("shape"), list):
                spec["shape"] = [d if isinstance(d, int) else data.draw(st.sampled_from([1, 3, 32]))
                                 for d in spec["shape"]]
                spec.pop("profiles", None)
    for key in ("profile_sets", "constraints"):
        model.pop(key, None)
    if data.draw(st.booleans(), label="int8"):
        model["precisions"] = ["fp32", data.draw(st.sampled_from(["int8", {"name": "int8", "via": "transform"},
                                                                  {"name": "int8", "via": "native"}, "fp8"]))]
        model["calibration"] = {"path": "../data/calib"}


# weighted: the semantic actions reach resolve and plan far more often than junk does
ACTIONS = ["delete", "replace", "replace", "insert", "copy", "copy", "duplicate", "tweak", "tweak", "nest", "rule",
           "rule", "rule", "static", "static", "root"]


def mutate(doc, data):
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]), label="mutations")):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = _get(doc, path[:-1])
        last = path[-1]
        action = data.draw(st.sampled_from(ACTIONS), label="action")
        if action == "root":  # the whole document: empty (`null`), a list, a scalar
            doc = data.draw(st.sampled_from([None, [], [doc], "manifest", 1]), label="root")
        elif action == "rule" and isinstance(doc, dict):
            matrix = doc.get("matrix") if isinstance(doc.get("matrix"), dict) else {}
            doc["matrix"] = matrix
            section = data.draw(st.sampled_from(["include", "include", "exclude"]), label="section")
            rules = matrix.get(section) if isinstance(matrix.get(section), list) else []
            matrix[section] = rules + [_rule(doc, data)]
        elif action == "static":
            _make_static(doc, data)
        elif action == "delete":
            del parent[last]
        elif action == "replace":
            parent[last] = data.draw(JUNK)
        elif action == "insert":
            if isinstance(parent, dict):
                parent[data.draw(st.one_of(st.sampled_from(HOSTILE), TEXT))] = data.draw(JUNK)
            else:
                parent.insert(last, data.draw(JUNK))
        elif action == "copy":  # another node's value here: cross references, realistic types in odd places
            source = data.draw(st.sampled_from(paths))
            parent[last] = copy.deepcopy(_get(doc, source))
        elif action == "duplicate":  # a list entry twice (names, targets whose addresses collide)
            lists = [p for p in paths if isinstance(_get(doc, p), list) and _get(doc, p)]
            if lists:
                seq = _get(doc, data.draw(st.sampled_from(lists)))
                seq.append(copy.deepcopy(seq[data.draw(st.integers(0, len(seq) - 1))]))
        elif action == "tweak":
            parent[last] = _tweak(parent[last], data)
        else:  # nest around the limit of the loader's depth cap
            value = parent[last]
            for _ in range(data.draw(st.sampled_from([1, 2, 5, 20, 48, 60]))):
                value = [value]
            parent[last] = value
    return doc


def _on_alarm(signum, frame):
    raise _Hang()


class _Hang(BaseException):  # not an Exception: nothing under test may swallow it
    pass


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_LOCATED = re.compile(r"\.yaml:\d+")


def run_case(path: Path, text: str) -> str:
    """load + resolve + plan + render; the outcome's name. Raises AssertionError on anything not allowed."""
    path.write_text(text, encoding="utf-8")
    try:
        with deadline(CASE_DEADLINE_S):
            try:
                manifests = load_manifests([path], capabilities=_capabilities, builder_names=BUILDERS,
                                           builder_slug=fakes.slug)
                assert len(manifests) == 1, "a manifest that loads without a problem must give a Manifest"
                graph = resolve(manifests, ResolveInputs(model_digests={m.source.path: "sha256:" + "0" * 64
                                                                        for man in manifests for m in man.models}),
                                _capabilities)
                the_plan = plan_against(graph, {}, "empty")
                render_plan_markdown(the_plan)
                if len(the_plan.entries) <= 60:  # rich tables cost ~0.3 ms a row: the small plans, every time
                    Console(file=io.StringIO(), width=200).print(render_plan_table(the_plan))
                return "planned"
            except ManifestError as e:
                assert e.problems
                for p in e.problems:
                    assert p.file.endswith(path.name), p
                    assert p.line is not None and p.column is not None, f"problem without a location: {p.render()}"
                    assert p.message and "\n" not in p.message, p
                return "refused"
            except OrchestratorError as e:
                assert _LOCATED.search(str(e)), f"{type(e).__name__} without file:line: {e}"
                return "refused"
    except _Hang:
        raise AssertionError(f"a case ran past {CASE_DEADLINE_S} s:\n{text[:3000]}") from None


@pytest.mark.parametrize("base", VALID_BASES)
def test_the_unmutated_bases_plan(repo_root, base):
    assert run_case(repo_root / "manifests" / "fuzz-base.yaml", yaml.safe_dump(BASES[base])) == "planned"


def test_mutated_manifests_plan_or_fail_located(repo_root):
    outcomes: dict[str, int] = {"planned": 0, "refused": 0}
    path = repo_root / "manifests" / "fuzz.yaml"

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data(), base=st.sampled_from(VALID_BASES * 15 + BASE_NAMES))  # ~1/2 from the valid three
    def case(data, base):
        doc = mutate(BASES[base], data)
        text = yaml.dump(doc, Dumper=DUMPER, allow_unicode=data.draw(st.booleans(), label="unicode"), sort_keys=False)
        outcomes[run_case(path, text)] += 1

    start = time.monotonic()
    case()
    seconds = time.monotonic() - start
    total = sum(outcomes.values())
    print(f"\nfuzz: {total} mutated manifests in {seconds:.1f} s: {outcomes}")
    assert total >= EXAMPLES
    # the mutations must reach resolve and plan, not only the schema: a fair share plans
    assert outcomes["planned"] >= total // 10, outcomes
