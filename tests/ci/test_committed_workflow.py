"""The committed engine workflow is exactly what `orchestrate ci github manifests/demo.yaml manifests/fleet.yaml
-o .github/workflows/engines.yml` generates (same code path: ``orchestrator.app.ci.workflow_files``), byte for byte,
and it lints."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.app.ci import workflow_files
from orchestrator.errors import ManifestError
from trt_orchestrator_plugins.ci.github import WORKFLOW_PATH

from .ci_fixtures import REPO, actionlint, check_jsonschema, zizmor

MANIFESTS = ("manifests/demo.yaml", "manifests/fleet.yaml")
# This repository's own workflow installs the tool from its checkout, with the demo's builders and the OCI store.
TOOL_SPEC = ".[demo,oci]"
REGENERATE = ("orchestrate ci github manifests/demo.yaml manifests/fleet.yaml --tool-spec '.[demo,oci]' "
              "-o .github/workflows/engines.yml")


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    if not (REPO / WORKFLOW_PATH).is_file():
        pytest.skip(f"{WORKFLOW_PATH} is not committed yet: generate it with `{REGENERATE}`")
    missing = [m for m in MANIFESTS if not (REPO / m).is_file()]
    if missing:
        pytest.skip(f"manifests not in the repository yet: {', '.join(missing)}")
    try:
        return workflow_files("github", list(MANIFESTS), REPO, tool_spec=TOOL_SPEC)
    except ManifestError as e:
        if any("model file not found" in p.message for p in e.problems):
            pytest.skip("the manifests' model files are not fetched (the loader checks they exist): "
                        "run python scripts/fetch_models.py")
        raise


def test_committed_files_are_what_the_generator_writes(generated):
    for rel, text in sorted(generated.items()):
        path = REPO / rel
        assert path.is_file(), f"{rel} is not committed: run `{REGENERATE}`"
        assert path.read_text(encoding="utf-8") == text, f"{rel} is stale: run `{REGENERATE}` and commit it"


def test_committed_workflow_lints(generated):
    path: Path = REPO / WORKFLOW_PATH
    assert actionlint(path) == []
    proc = check_jsonschema(path, "--builtin-schema", "vendor.github-workflows")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert zizmor(REPO) == []  # no finding at medium or above


def test_headers_state_the_command_that_regenerates_them(generated):
    """A user following the header gets no diff: the header's command is the one these files come from."""
    command = "orchestrate ci github manifests/demo.yaml manifests/fleet.yaml --tool-spec '.[demo,oci]'"
    for rel, text in generated.items():
        assert f"#   {command}\n" in text, rel


def test_generation_is_byte_stable(generated):
    assert workflow_files("github", list(reversed(MANIFESTS)), REPO, tool_spec=TOOL_SPEC) == generated
