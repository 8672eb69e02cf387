"""A target's toolchain, resolved: what a CI shard runs in to have exactly the builder version its cells need.

``targets[].toolchain`` (``model.Toolchain``) says the mode; the builder plugin says what provisions that version
(``Provisioning``, in its capabilities: the NGC image of the release, the exact pip pins and their index). Cells
carry the resolved toolchain, shards group by it (plus runner labels), and the CI emitters render it: a job
``container:``, a cached virtual environment per exact pin set, or the runner as it is.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.model import Target

# An OCI image reference as `docker pull` takes it: registry/path[:tag][@sha256:digest]. Values go into YAML and
# job containers, so nothing else (no spaces, quotes, `$`, `${{`) is let through.
IMAGE_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
                      r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
INDEX_URL_RE = re.compile(r"^https://[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~%/+-]*)?$")
# pip requirement pins as builder plugins state them (name==version); checked so a plugin cannot inject options
REQUIREMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9,._-]+\])?(?:[=<>!~]=?[A-Za-z0-9.*+!_-]+)?$")


@dataclass(frozen=True)
class Provisioning:
    """How fleet CI can get exactly this builder version (``targets[].toolchain``; ``core.toolchain``)."""

    # container: the image that ships exactly this version, its CUDA, and the table row it comes from (a citation)
    container_image: str | None = None
    container_cuda: str | None = None
    container_source: str = ""
    # why there is no such image, naming the nearest known releases (validate's hint)
    container_missing: str = ""
    # pip: CUDA major ("12", "13"; "" where the wheels have no CUDA variant) -> the exact requirements; the first
    # key is the default
    pip_requirements: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    pip_index_url: str | None = None  # the extra index those wheels need (None: PyPI has them)
    pip_missing: str = ""  # why pip cannot install this version


@dataclass(frozen=True)
class ResolvedToolchain:
    kind: str = "runner"  # runner | container | pip
    image: str = ""  # container
    gpus: bool = False  # container: the job container gets the runner's GPUs (`--gpus all`)
    requirements: tuple[str, ...] = ()  # pip: exact pins
    index_url: str = ""  # pip: extra index URL ("" = PyPI only)
    # what the image or pins provide, shown by the shard's first step and in `plan`: "tensorrt 10.8.0.43"
    provides: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "container":
            return f"container {self.image}" + (" (GPUs)" if self.gpus else "")
        if self.kind == "pip":
            index = f" from {self.index_url}" if self.index_url else ""
            return f"pip {' '.join(self.requirements)}{index}"
        return "runner (installed on the machine)"

    def digest(self) -> str:
        """Stable short id of what is installed: keys the CI cache of a pip environment."""
        text = "\n".join((self.kind, self.image, *self.requirements, self.index_url))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "image": self.image, "gpus": self.gpus, "requirements": list(self.requirements),
                "index_url": self.index_url, "provides": list(self.provides)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ResolvedToolchain:
        if not data:
            return cls()
        return cls(kind=str(data.get("kind", "runner")), image=str(data.get("image", "")),
                   gpus=bool(data.get("gpus", False)), requirements=tuple(data.get("requirements", ())),
                   index_url=str(data.get("index_url", "")), provides=tuple(data.get("provides", ())))


RUNNER = ResolvedToolchain()


class ToolchainProblem(Exception):
    """The toolchain a target asks for cannot be provisioned: ``field`` is the manifest key under the target's
    ``toolchain`` it concerns ("" for the mode itself)."""

    def __init__(self, message: str, hint: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.field = field


def resolve_toolchain(target: Target, prov: Provisioning | None) -> ResolvedToolchain:
    """The toolchain of ``target``'s cells; raises ToolchainProblem (validate reports it at the target).
    ``prov`` None (the builder's facts are not known here): the toolchain as written, unchecked."""
    spec = target.toolchain
    if prov is None:
        return ResolvedToolchain(kind=spec.kind, image=spec.image or "", gpus=target.device != "cpu",
                                 index_url=spec.index_url or "")
    what = f"{target.builder} {target.builder_version}"
    provides = (what,)
    if spec.kind == "runner":
        return RUNNER
    if spec.kind == "container":
        image = spec.image or prov.container_image
        if spec.image is not None and not IMAGE_RE.match(spec.image):
            raise ToolchainProblem(f"{spec.image!r} is not an image reference", "registry/path:tag or "
                                   "registry/path@sha256:<64 hex>, e.g. nvcr.io/nvidia/tensorrt:25.01-py3",
                                   "image")
        if not image:
            why = prov.container_missing or f"no container image of {what} is known"
            raise ToolchainProblem(f"{why}", "give the image yourself (toolchain: {kind: container, image: ...}), "
                                   "or use toolchain: pip or runner")
        return ResolvedToolchain(kind="container", image=image, gpus=target.device != "cpu", provides=provides)
    # pip
    if not prov.pip_requirements:
        raise ToolchainProblem(prov.pip_missing or f"{what} has no pip wheels this tool knows how to pin",
                               "use toolchain: container or runner")
    cudas = list(prov.pip_requirements)
    cuda = spec.cuda if spec.cuda is not None else cudas[0]
    if cuda not in prov.pip_requirements:
        known = ", ".join(repr(c) for c in cudas if c) or "none (these wheels have no CUDA variant)"
        raise ToolchainProblem(f"{what} has no pip wheels for CUDA {cuda}", f"CUDA majors it has: {known}",
                               "cuda")
    if spec.index_url is not None and not INDEX_URL_RE.match(spec.index_url):
        raise ToolchainProblem(f"index_url {spec.index_url!r} is not a plain https URL",
                               "e.g. https://pypi.nvidia.com", "index_url")
    requirements = prov.pip_requirements[cuda]
    bad = [r for r in requirements if not REQUIREMENT_RE.match(r)]
    if bad:  # a plugin's own data; refused rather than rendered into a script's arguments
        raise ToolchainProblem(f"the {target.builder} plugin states unusable requirements {bad}",
                               "report it to the plugin's authors")
    index = spec.index_url if spec.index_url is not None else (prov.pip_index_url or "")
    return ResolvedToolchain(kind="pip", requirements=tuple(requirements), index_url=index, provides=provides)
