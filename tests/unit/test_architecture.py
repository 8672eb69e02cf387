"""The layering rules that a grep or a linter can check, checked on the source itself.

import-linter (pyproject.toml) enforces who may import whom; these tests add what it cannot see:
- the core, the app verbs and the run layer name no first-party plugin (builders, runtimes, stores): plugins own
  their facts, so a third-party pair goes as far as a first-party one;
- no function-level import of our own modules anywhere in ``orchestrator/`` or ``plugins/`` (a cycle is fixed
  by fixing the dependency, not by hiding the import in a function).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIRST_PARTY_PLUGINS = {"tensorrt", "trtexec", "tensorrt-rtx", "onnxruntime", "local", "oci"}
PLUGIN_FREE = ("orchestrator/core", "orchestrator/app", "orchestrator/run")
OURS = ("orchestrator", "trt_orchestrator_plugins")


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.py"))


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def plugin_names_in(source: str) -> list[tuple[int, str]]:
    """String literals (docstrings aside) that are first-party plugin names."""
    tree = ast.parse(source)
    docs = _docstring_nodes(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and node.value in FIRST_PARTY_PLUGINS]


def own_imports_in_functions(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    bad = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = ["." if node.level else (node.module or "")]
            bad += [(node.lineno, n) for n in names if n == "." or n.split(".")[0] in OURS]
    return bad


@pytest.mark.parametrize("path", _sources(*PLUGIN_FREE), ids=lambda p: str(p.relative_to(REPO)))
def test_no_first_party_plugin_name_in_core_app_run(path):
    found = plugin_names_in(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(REPO)} names first-party plugins {found}: ask the plugin instead"


@pytest.mark.parametrize("path", _sources("orchestrator", "plugins"), ids=lambda p: str(p.relative_to(REPO)))
def test_no_function_level_import_of_our_own_modules(path):
    bad = own_imports_in_functions(path.read_text(encoding="utf-8"))
    assert not bad, f"{path.relative_to(REPO)}: function-level imports of our own modules {bad}"


def test_the_scans_find_what_they_look_for():
    """Not vacuous: planted names and imports are found; docstrings and third-party imports are not."""
    planted = ('"""Mentions "tensorrt" in prose."""\nimport numpy\n\n\ndef f():\n    import numpy as np\n'
               '    from orchestrator import plugins\n    from . import x\n    return "tensorrt", "oci", np\n')
    assert plugin_names_in(planted) == [(9, "tensorrt"), (9, "oci")]
    assert own_imports_in_functions(planted) == [(7, "orchestrator"), (8, ".")]
    assert _sources(*PLUGIN_FREE), "the plugin-free folders moved: update PLUGIN_FREE"


_SKIP_DIRS = {".git", ".venv", ".cache", ".orchestrate", "node_modules", "artifacts", "__pycache__", ".gpu", ".whl"}
_NEEDLES = ("shared" + "/reference", "../" + "shared/")  # spelt apart so this file does not name them
_TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".j2", ".json", ".txt", ".cfg"}


def test_nothing_cites_a_folder_beside_the_repository():
    """The repository stands alone (issue 23.25): code, docs, tests and bench notes cite public sources, never the
    reference folder a development machine has beside the checkout, which a clone does not."""
    offending = []
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO)
        if any(part in _SKIP_DIRS for part in rel.parts) or path.suffix not in _TEXT or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if any(needle in text for needle in _NEEDLES):
            offending.append(str(rel))
    assert offending == [], offending
