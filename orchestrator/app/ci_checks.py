"""What a generated pipeline needs from the repository, checked when it is generated (issue 22.10).

A CI job starts from a fresh checkout on a fresh runner. So it cannot build a model whose file is not committed
(a git-ignored download, a file only on this machine), and a local store directory publishes engines onto one
runner's disk, where the next run's plan never sees them. Neither is an error here (a team may commit the files
next, or keep a local store on purpose on a single self-hosted machine), so ``orchestrate ci github|gitlab`` warns,
each warning with the manifest's ``file:line:col`` and the fix.

The default tool spec lives here too: the workflow installs ``orchestrate`` from the repository it runs in, at the
workflow's own commit (``.`` in the checkout), with the extras these manifests need.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from orchestrator import plugins
from orchestrator.app.project import display_path
from orchestrator.app.sources import EXTRA_OF_SCHEME
from orchestrator.core.model import Manifest
from orchestrator.manifest.positions import Path as ManifestPath
from orchestrator.manifest.positions import SourceMap, parse_yaml

GIT_TIMEOUT_S = 60


@dataclass(frozen=True)
class CIWarning:
    where: str  # "manifests/x.yaml:12:7"
    message: str
    hint: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def default_tool_spec(manifests: Sequence[Manifest]) -> str:
    """``.[extras]``: this repository at the workflow's commit, with what every job of these manifests imports
    (the parity reference runs on onnxruntime, so ``ort`` always; precision transforms; the OCI store; the
    downloaders of url sources). Builders come from each shard's toolchain, not from here."""
    extras = {"ort"}
    for manifest in manifests:
        if manifest.registry.store == plugins.OCI_STORE:
            extras.add(plugins.OCI_STORE)
        for model in manifest.models:
            if any(p.name != "fp32" for p in model.precisions):
                extras.add("transforms")
            if model.source.url:
                extras.add(EXTRA_OF_SCHEME.get(urlparse(model.source.url).scheme, "fetch"))
    return f".[{','.join(sorted(extras))}]"


def tool_spec_warnings(spec: str | None, default: str, root: str | os.PathLike[str]) -> list[CIWarning]:
    """The default spec installs the checkout itself (``.[extras]``): right in trt-orchestrator's own repository (or
    a fork), a failing first step in a repository that only uses the tool. Said at generation, not on the runner."""
    top = Path(root).resolve()
    if spec is not None or (top / "pyproject.toml").is_file() or (top / "setup.py").is_file():
        return []
    return [CIWarning(display_path(str(top)),
                      f"the jobs would install {default!r} (this repository), but it has no pyproject.toml: their "
                      "first step would fail",
                      "pin the tool the jobs install: --tool-spec 'trt-orchestrator[ort,oci]==VERSION' (an index "
                      "that has it) or 'trt-orchestrator[ort,oci] @ git+https://…@TAG' (docs/ci.md)")]


def _git(args: Sequence[str], root: Path) -> subprocess.CompletedProcess[bytes] | None:
    if shutil.which("git") is None:
        return None
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def git_origin(root: str | os.PathLike[str]) -> dict[str, str]:
    """``repo_url`` (the ``origin`` remote) and ``revision`` (HEAD's commit) of the repository at ``root``, for
    pipelines that check the repository out themselves (``ci k8s``); what git cannot tell is left out."""
    found = {}
    for key, args in (("repo_url", ["remote", "get-url", "origin"]), ("revision", ["rev-parse", "HEAD"])):
        proc = _git(args, Path(root))
        if proc is not None and proc.returncode == 0 and proc.stdout.strip():
            found[key] = proc.stdout.decode().strip()
    return found


def committed(paths: Sequence[str], root: Path) -> set[str] | None:
    """The ``paths`` (absolute) that git tracks in the repository at ``root``, Git LFS files included (their
    pointers are committed); None when ``root`` is not a git work tree or git is missing."""
    probe = _git(["rev-parse", "--show-toplevel"], root)
    if probe is None or probe.returncode != 0:
        return None
    top = Path(probe.stdout.decode().strip()).resolve()
    inside = {p: os.path.relpath(Path(p).resolve(), top) for p in paths}
    asked = {p: r for p, r in inside.items() if not r.startswith("..")}
    if not asked:
        return set()
    listed = _git(["ls-files", "-z", "--", *asked.values()], top)
    if listed is None or listed.returncode != 0:
        return None
    tracked = set(listed.stdout.decode("utf-8", "surrogateescape").split("\0"))
    return {p for p, r in asked.items() if r.replace(os.sep, "/") in tracked}


class _Places:
    """``file:line:col`` of a manifest's paths, for warnings raised after loading."""

    def __init__(self, manifest: Manifest) -> None:
        self.shown = display_path(manifest.file)
        try:
            self.source: SourceMap | None = parse_yaml(Path(manifest.file).read_text(encoding="utf-8"),
                                                       manifest.file).source
        except OSError:
            self.source = None

    def __call__(self, path: ManifestPath, *, key: bool = False) -> str:
        line, col = self.source.locate(path, key=key) if self.source is not None else (None, None)
        return f"{self.shown}:{line}:{col or 1}" if line is not None else f"{self.shown}:1:1"


def checkout_warnings(manifests: Sequence[Manifest], root: str | os.PathLike[str]) -> list[CIWarning]:
    """Models a fresh checkout will not have, and registries a CI run cannot share, with where and how to fix."""
    top = Path(root).resolve()
    files = [m.source.path for manifest in manifests for m in manifest.models if m.source.url is None]
    tracked = committed(files, top)
    out: list[CIWarning] = []
    if tracked is None and files:
        out.append(CIWarning(f"{display_path(str(top))}", "not a git repository: cannot tell whether the model "
                             "files are committed, and a CI checkout has only what is",
                             "run `orchestrate ci` in the repository the pipeline runs in (--repo-root)"))
    for manifest in manifests:
        where = _Places(manifest)
        for i, model in enumerate(manifest.models):
            if model.source.url is not None or tracked is None or model.source.path in tracked:
                continue
            shown = os.path.relpath(model.source.path, top)
            out.append(CIWarning(
                where(("models", i, "source", "path")),
                f"models[{model.name}].source.path: {shown} is not committed (git-ignored or never added), so a CI "
                "checkout will not have it",
                "commit it (large files through Git LFS: `git lfs track '*.onnx'`), or give the model a pinned url: "
                "source: {url: https://..., sha256: ...}"))
        registry = manifest.registry
        if (registry.store or plugins.DEFAULT_STORE) == plugins.DEFAULT_STORE:
            shown = display_path(registry.path) if registry.path else "a local directory"
            out.append(CIWarning(
                where(("registry",), key=True),
                f"registry: a local store ({shown}) is a directory on whichever runner publishes: the next run's "
                "plan will not see what this one published, and deployments cannot pull from it",
                "publish to an OCI registry every job can reach: registry: {store: oci, url: ghcr.io/OWNER/engines}"))
    return out
