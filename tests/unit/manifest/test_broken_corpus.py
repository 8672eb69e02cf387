"""Every manifest under tests/data/manifests/broken/ must fail with exactly the problems in its .expected file.

Rendered with ``Problem.render()``; the temporary folder is written ``<root>`` and a test model's digest
``<sha256:NAME>``. ``UPDATE_EXPECTED=1 pytest ...`` rewrites the .expected files (review the diff).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import ManifestError

CORPUS = Path(__file__).parents[2] / "data" / "manifests" / "broken"
CASES = sorted(p.stem for p in CORPUS.glob("*.yaml"))


def test_corpus_is_large_enough():
    assert len(CASES) >= 30
    assert all((CORPUS / f"{c}.expected").is_file() or os.environ.get("UPDATE_EXPECTED") for c in CASES)


def _normalize(text: str, root: Path, digests: dict[str, str]) -> str:
    text = text.replace(str(root), "<root>")
    for name, digest in digests.items():
        text = text.replace(digest, f"<sha256:{name}>")
    return text


@pytest.mark.parametrize("case", CASES)
def test_broken_manifest(case, load, repo_root, digests):
    if "-yaml-" in case and not yaml.__with_libyaml__:
        pytest.skip("YAML syntax messages are libyaml's; this PyYAML has no libyaml")
    with pytest.raises(ManifestError) as info:
        load((CORPUS / f"{case}.yaml").read_text(encoding="utf-8"), name=f"{case}.yaml")
    assert info.value.problems, "a ManifestError always carries problems"
    got = _normalize("\n".join(p.render() for p in info.value.problems) + "\n", repo_root, digests)
    expected_file = CORPUS / f"{case}.expected"
    if os.environ.get("UPDATE_EXPECTED"):
        expected_file.write_text(got, encoding="utf-8")
    assert got == expected_file.read_text(encoding="utf-8")
