"""identify (issue 27.1) on a corpus of real files built here (tests/integration/identify_corpus.py): TensorRT-RTX
engines of several models, precisions and compute capabilities, stripped and not, behind an Ultralytics prefix and
inside EPContext models; onnxruntime-optimized and plain ONNX; cut-off and random files; synthesized TensorRT
8.6/10.x/11.x headers. Every answer is checked: zero wrong."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.app.identify import identify_file
from tests.integration.conftest import REPO
from tests.integration.identify_corpus import build_corpus, check

pytestmark = pytest.mark.integration
pytest.importorskip("tensorrt_rtx", reason="the corpus builds TensorRT-RTX engines (pip install tensorrt-rtx)")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, demo_models):
    return build_corpus(tmp_path_factory.mktemp("identify-corpus"))


def test_corpus_has_the_files_the_issue_asks_for(corpus):
    kinds = [tuple(e.kind for e in c.layers) for c in corpus]
    assert len(corpus) >= 20
    assert sum(k == ("tensorrt-rtx-plan",) for k in kinds) >= 8
    assert sum(k[0] == "ultralytics-engine" for k in kinds) >= 3
    assert sum(k[0] == "onnx-epcontext" for k in kinds) >= 3
    assert sum(k[0] == "onnxruntime-optimized-onnx" for k in kinds) >= 3
    assert sum(k[0] == "tensorrt-plan" for k in kinds) >= 3


def test_every_file_is_identified_right(corpus):
    wrong = [w for case in corpus for w in check(case, identify_file(case.path))]
    assert wrong == []


def test_unknown_is_never_guessed(corpus):
    """TensorRT proper's header documents no compute capability or compatibility mode: unknown, with the reason;
    an RTX plan's stripped state is not in its header either."""
    for case in corpus:
        for layer in identify_file(case.path).layers:
            if layer.kind == "tensorrt-plan":
                assert layer.facts["hardware_compatibility"] is None and "hardware_compatibility" in layer.unknown
                assert layer.facts["version_compatibility"] is None and "version_compatibility" in layer.unknown
            if layer.kind.endswith("-plan"):
                assert layer.facts.get("stripped") is None and "stripped" in layer.unknown


def test_cli_json_and_no_runtime_imported(corpus):
    """`orchestrate identify --json` answers for every file without importing TensorRT or onnxruntime."""
    paths = [str(c.path) for c in corpus]
    code = ("import sys, json; from orchestrator.cli import main\n"
            "sys.argv = ['orchestrate', 'identify', '--json', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "bad = [m for m in ('tensorrt', 'tensorrt_rtx', 'onnxruntime') if m in sys.modules]\n"
            "sys.stderr.write('IMPORTED=' + json.dumps(bad))\n")
    proc = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert "IMPORTED=[]" in proc.stderr, proc.stderr[-2000:]
    files = json.loads(proc.stdout)["files"]
    assert [f["kind"] for f in files] == [c.layers[0].kind for c in corpus]
    ultra = next(f for f in files if f["path"].endswith("ultralytics.orientation.sm86.engine"))
    assert ultra["layers"][1]["builder_version"] == "1.7.1.116"
    assert ultra["layers"][1]["facts"]["compute_capabilities"] == ["8.6"]


def test_unreadable_file_exits_1_and_says_so(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "identify", str(tmp_path / "nope.plan")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1
    assert "nope.plan" in proc.stderr and "Traceback" not in proc.stderr
