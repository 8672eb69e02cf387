"""Journey (issue 22.4): the code in README.md and docs/*.md runs as written.

Sybil (a maintained documentation-testing library) parses each page; its Python evaluator runs ```python blocks
and a shell evaluator runs ```bash and ```sh blocks with `bash -euo pipefail`, a non-zero exit failing the block.
Each page runs top to bottom in one fresh folder laid out like a checkout after `bash scripts/demo.sh`: the
repository's manifests, the fetched models, and the published demo's store as ``artifacts/`` (the session's
``demo_published``, built, gated and published for real). Python blocks of a page share one namespace, as in a
REPL session.

A block that must not run here says so just above it, with the reason, in Sybil's own markup:
``<!-- skip: next "needs a GPU: ..." -->``. ``test_every_block_is_run_or_marked`` keeps the pages honest: a block
in a language nothing runs and nothing declares as data fails, and so does a skip without a reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import SkipTest

import pytest
from sybil import Sybil
from sybil.evaluators.skip import Skipper
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from tests.journeys.store_copy import link_copy

REPO = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
SHELLS = ("bash", "sh")
# Fenced blocks that are data or text, never run: manifests and configs, file trees, messages.
DATA = {"", "yaml", "toml", "json", "text", "pbtxt"}
SHELL_TIMEOUT_S = 600


@dataclass(frozen=True)
class Checkout:
    """The folder a page runs in, and the environment its shell blocks get."""

    root: Path
    env: dict[str, str]


def run_shell(example) -> str | None:
    """Sybil evaluator for shell blocks: the block as one `bash -euo pipefail` script in the page's folder."""
    checkout: Checkout = example.namespace["__checkout__"]
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", example.parsed], cwd=checkout.root, env=checkout.env,
                          capture_output=True, text=True, timeout=SHELL_TIMEOUT_S)
    if proc.returncode != 0:
        return (f"exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
    return None


def sybil() -> Sybil:
    return Sybil(parsers=[PythonCodeBlockParser(), *(CodeBlockParser(lang, run_shell) for lang in SHELLS),
                          SkipParser()], path=str(REPO))


@pytest.fixture
def checkout(demo_published, tmp_path: Path, monkeypatch) -> Checkout:
    """The repository's manifests (and their data), its fetched models and the published demo's store."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "manifests", root / "manifests")
    (root / ".cache").symlink_to(REPO / ".cache", target_is_directory=True)
    link_copy(demo_published.store, root / "artifacts")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATE_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["ORCHESTRATE_CACHE"] = str(root / ".orchestrate")
    monkeypatch.chdir(root)  # Python blocks: relative paths are the page's folder too
    monkeypatch.setenv("ORCHESTRATE_CACHE", env["ORCHESTRATE_CACHE"])
    monkeypatch.delenv("ORCHESTRATE_REGISTRY", raising=False)
    return Checkout(root=root, env=env)


@pytest.mark.parametrize("page", PAGES)
def test_page_runs(page: str, checkout: Checkout):
    document = sybil().parse(REPO / page)
    document.namespace["__checkout__"] = checkout
    ran, skipped = [], []
    for example in document.examples():
        where = f"{page}:{example.line}"
        if isinstance(example.region.evaluator, Skipper):
            example.evaluate()  # a skip directive: arms the skip of the next block
            continue
        try:
            example.evaluate()
        except SkipTest as e:
            skipped.append(f"{where} ({e})")
            continue
        except Exception as e:
            done = "".join(f"\n  ran {w}" for w in ran)
            raise AssertionError(f"{where}: the block fails as written:{done}\n{type(e).__name__}: {e}") from e
        ran.append(where)
    print(f"{page}: ran {len(ran)} block(s), skipped {len(skipped)}: {skipped}")


def fenced_blocks(page: str) -> list[tuple[int, str]]:
    """(line, info string) of every fenced block of a page, as Sybil's Markdown lexer finds them."""
    lexer = RawFencedCodeBlockLexer(info_pattern=re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE),
                                    mapping={"info": "info", "source": "source"})
    document = sybil().parse(REPO / page)
    return [(document.text.count("\n", 0, region.start) + 1, region.lexemes["info"].strip())
            for region in lexer(document)]


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_run_or_marked(page: str):
    """Every fenced block is Python or shell (run, or skipped with a reason) or declared data."""
    unknown = [f"{page}:{line}: ```{info}" for line, info in fenced_blocks(page)
               if info not in DATA and info not in ("python", *SHELLS)]
    assert unknown == [], ("blocks in a language that neither runs here nor is declared data (tests/journeys/"
                           f"test_docs.py DATA): {unknown}")
    for example in sybil().parse(REPO / page).examples():
        if isinstance(example.region.evaluator, Skipper):
            action, reason = example.parsed
            assert action in ("next", "start", "end"), f"{page}:{example.line}: skip: {action}"
            if action != "end":
                assert reason and reason.strip().strip("'\""), (
                    f"{page}:{example.line}: a skipped block says why: <!-- skip: next \"reason\" -->")
