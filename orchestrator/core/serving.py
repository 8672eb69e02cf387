"""Serving stacks and the exact TensorRT release each ships (pure data): ``triton:25.01`` -> TensorRT 10.8.0.43.

A TensorRT engine loads only on the TensorRT release that built it (unless built version compatible), so a
deployment that names its serving container must name a TensorRT version too. This table says which, for the
three forms a deployment names:

- ``triton:YY.MM``: NVIDIA's Triton compatibility matrix (triton-inference-server/server
  docs/introduction/compatibility.md, rendered at
  https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/introduction/compatibility.html).
  That matrix lists the ``tritonserver:YY.MM-trtllm-python-py3`` image, whose TensorRT/CUDA is often older than
  the month's plain ``-py3`` image; the plain ``-py3`` image's TensorRT could not be read from NVIDIA's release
  notes. Every ``triton`` row is therefore the trtllm-python-py3 image, and says so. Status: confirmed.
- ``ngc-tensorrt:YY.MM``: the ``nvcr.io/nvidia/tensorrt:YY.MM-py3`` image. NVIDIA's container release notes could
  not be read, so every row rests on other projects' files and issues (status: secondary); months with no
  readable TensorRT version are left out rather than guessed.
- ``jetpack:X.Y``: JetPack releases (secondary: Torch-TensorRT's docs and devices' ``dpkg`` output).

TensorRT 11.x: no NVIDIA source found names a container that ships it. The one row with TensorRT 11
(``ngc-tensorrt:26.08``: 11.2.1.2) rests on several public projects that pin that image as TensorRT 11.2.1.2
(secondary, like every ngc-tensorrt row); the newest TensorRT NVIDIA's Triton matrix lists is 10.14.1.48
(``tritonserver:26.03``..``26.07-trtllm-python-py3``). Before the trtllm images, a ``triton`` row is the plain
``tritonserver:YY.MM-py3`` image (8.6.x; secondary: NVIDIA staff and the support matrix quoted in issues). A
release this table does not know is refused, never guessed. The facts and their sources come from the project's
research notes on NGC/Triton/JetPack TensorRT versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator.errors import UsageError

ServingKind = Literal["triton", "ngc-tensorrt", "jetpack"]
Status = Literal["confirmed", "secondary"]

_TRITON_SOURCE = ("NVIDIA Triton compatibility matrix, triton-inference-server/server "
                  "docs/introduction/compatibility.md (https://docs.nvidia.com/deeplearning/triton-inference-server/"
                  "user-guide/docs/introduction/compatibility.html)")
_TRITON_NOTE = ("the tritonserver:{release}-trtllm-python-py3 image's TensorRT; the plain tritonserver:{release}-py3 "
                "image's TensorRT could not be read from NVIDIA's release notes")
NO_TENSORRT_11 = ("no Triton or JetPack release is known to ship TensorRT 11.x (the newest TensorRT NVIDIA's Triton "
                  "matrix lists is 10.14.1.48, tritonserver:26.03..26.07-trtllm-python-py3); of the NGC TensorRT "
                  "images only ngc-tensorrt:26.08 (TensorRT 11.2.1.2, secondary sources) is known")


@dataclass(frozen=True)
class ServingStack:
    """One serving container (or JetPack release) and the exact TensorRT it ships."""

    kind: ServingKind
    release: str  # "25.01", "6.2"
    tensorrt: str  # "10.8.0.43"
    cuda: str | None  # None: not found
    image: str | None  # the container image it names (None: JetPack, not an image)
    source: str  # where the TensorRT version comes from
    status: Status
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.release}"

    @property
    def runtime(self) -> str:
        """As ``pull --runtime`` spells it: ``trt10.8.0.43``."""
        return f"trt{self.tensorrt}"


def _triton(releases: tuple[str, ...], tensorrt: str, cuda: str, conflict: str = "") -> tuple[ServingStack, ...]:
    return tuple(ServingStack("triton", r, tensorrt, cuda, f"nvcr.io/nvidia/tritonserver:{r}-trtllm-python-py3",
                              _TRITON_SOURCE, "confirmed", _TRITON_NOTE.format(release=r) + conflict)
                 for r in releases)


_EARLIER = "; an earlier revision of the matrix (docs/compatibility.md @01bbc523) said {}"


def _triton_py3(release: str, tensorrt: str, source: str, note: str) -> ServingStack:
    return ServingStack("triton", release, tensorrt, None, f"nvcr.io/nvidia/tritonserver:{release}-py3", source,
                        "secondary", note)


# Triton compatibility matrix, trtllm-python-py3 rows (research note §2a); status confirmed for that image. Before
# them, two plain -py3 images whose TensorRT 8.6 NVIDIA staff or the quoted support matrix state (secondary).
_TRITON_ROWS = (
    _triton_py3("23.05", "8.6.1.2", "https://github.com/triton-inference-server/server/issues/5975 (quotes the "
                "Frameworks Support Matrix: \"TensorRT for Triton container v23.05 ... 8.6.1.2\"); "
                "https://github.com/NVIDIA/TensorRT/issues/3071",
                "the plain tritonserver:23.05-py3 image; 8.6.1.2 shipped only in NVIDIA's containers"),
    _triton_py3("24.02", "8.6.3", "https://github.com/triton-inference-server/server/issues/6959 (NVIDIA maintainer: "
                "\"Triton base image includes installation of the TensorRT version 8.6.3\")",
                "the plain tritonserver:24.02-py3 image; 3-part version only"),
    *_triton(("24.04",), "9.3.0.post12.dev1", "12.3.2.001", _EARLIER.format("8.6.3")),
    *_triton(("24.05",), "10.0.1.6", "12.3.2.001", "; NVIDIA staff in triton-inference-server/server#7374: the "
             "24.05 TRT-LLM image should have TensorRT 9.3.0 (the plain 24.05-py3 image has TensorRT 10)"),
    *_triton(("24.06",), "10.0.1", "12.4.0.041"),
    *_triton(("24.07",), "10.1.0", "12.4.1.003", _EARLIER.format("10.2.0.19")),
    *_triton(("24.08",), "10.3.0", "12.5.1.007", _EARLIER.format("10.3.0.26")),
    *_triton(("24.09", "24.10"), "10.4.0", "12.5.1.007"),
    *_triton(("24.11",), "10.6.0", "12.6.3"),
    *_triton(("24.12",), "10.7.0", "12.6.3"),
    *_triton(("25.01", "25.02"), "10.8.0.43", "12.8.0.038"),
    *_triton(("25.03", "25.04", "25.05"), "10.9.0.34", "12.8.1.012"),
    *_triton(("25.06", "25.07"), "10.10.0.31", "12.9.0.036"),
    *_triton(("25.08",), "10.11.0.33", "12.9.0.043"),
    *_triton(("25.09", "25.10"), "10.11.0.33", "12.9.1.010"),
    *_triton(("25.11", "25.12", "26.01", "26.02"), "10.13.3.9", "13.0.2.006"),
    *_triton(("26.03", "26.04", "26.05", "26.06", "26.07"), "10.14.1.48", "13.1.0.036"),
)


def _ngc(release: str, tensorrt: str, cuda: str | None, source: str, note: str = "") -> ServingStack:
    return ServingStack("ngc-tensorrt", release, tensorrt, cuda, f"nvcr.io/nvidia/tensorrt:{release}-py3", source,
                        "secondary", note)


# nvcr.io/nvidia/tensorrt:YY.MM-py3 rows that have a TensorRT version (research note §1); all secondary. Left out:
# 24.12 (sources conflict: 10.7 or 10.8), 25.08 (its only source's "10.9" contradicts its CUDA 13), 25.12 (one
# repo's assumption), and every month with nothing found.
_NGC_ROWS = (
    _ngc("23.01", "8.5.2", "12.0.1", "https://forums.developer.nvidia.com/t/nvidia-release-versions-compatibility/"
         "265643 (a user's forum post)", "3-part version only"),
    _ngc("23.02", "8.5.3", None, "https://github.com/autonomi-ai/nos/pull/19", "3-part version only"),
    _ngc("23.04", "8.6.1", None, "https://github.com/NVIDIA/TensorRT/issues/4676 (quotes NVIDIA's 23.04 release "
         "notes)", "dpkg inside the image shows 8.6.1.2"),
    _ngc("24.05", "10.0", None, "https://github.com/NVIDIA/TensorRT/issues/3796 (NVIDIA staff: \"TRT 10 will be in "
         "the 24.05 docker image\")", "10.0.x: the first TensorRT 10 image"),
    _ngc("25.01", "10.8.0.43", "12.8", "three independent repositories pin libnvinfer 10.8.0.43-1+cuda12.8 for it; "
         "https://github.com/NVIDIA/TensorRT/issues/4346"),
    _ngc("25.03", "10.9", "12.8.1", "a ROS repository's README (ika-rwth-aachen): tested with tensorrt:25.03-py3, "
         "TensorRT 10.9", "3-part version only"),
    _ngc("26.08", "11.2.1.2", "13.3", "several public projects pin it as TensorRT 11.2.1.2 (an RF-DETR TensorRT "
         "backend's versions.env spec: TENSORRT_VERSION=11.2.1.2, CUDA_VERSION=13.3, NGC_CONTAINER_TAG=26.08; an "
         "rfdetr export note of 2026-10-07: \"nvcr.io/nvidia/tensorrt:26.08-py3 (TensorRT 11.2.1.2)\")",
         "not confirmed against NVIDIA's container release notes"),
)

_JETPACK_TORCH_TRT = "https://docs.pytorch.org/TensorRT/_sources/getting_started/jetpack.rst.txt"
# JetPack -> TensorRT (research note §2c); all secondary (device dpkg output, Torch-TensorRT docs).
_JETPACK_ROWS = tuple(
    ServingStack("jetpack", release, tensorrt, cuda, None, source, "secondary", note)
    for releases, tensorrt, cuda, source, note in (
        (("5.1", "5.1.1", "5.1.2", "5.1.3"), "8.5.2.2", "11.4",
         "several repositories' dpkg output on L4T R35.x (libnvinfer 8.5.2-1+cuda11.4; trt.__version__ 8.5.2.2)",
         "L4T R35.x (Orin, Xavier)"),
        (("6.1", "6.2", "6.2.1", "6.2.2"), "10.3.0.30", "12.6",
         f"{_JETPACK_TORCH_TRT} (\"JetPack 6.2 ... TensorRT 10.3\"); devices' dpkg output: libnvinfer "
         "10.3.0.30-1+cuda12.5", "L4T R36.4 / R36.5 (Orin); not 10.3.0.26, the SBSA/x86 build"),
        (("7.0", "7.1"), "10.13.3.9", "13.0",
         "https://github.com/OE4T/meta-tegra/issues/2120 (L4T R38.4.0); a Thor device table: tensorrt "
         "10.13.3.9-1+cuda13.0", "L4T R38.x (Thor)"),
    )
    for release in releases
)

STACKS: tuple[ServingStack, ...] = (*_TRITON_ROWS, *_NGC_ROWS, *_JETPACK_ROWS)
KINDS: tuple[ServingKind, ...] = ("triton", "ngc-tensorrt", "jetpack")
_BY_NAME = {s.name: s for s in STACKS}
_FORM = "triton:25.01, ngc-tensorrt:25.01 or jetpack:6.2"


def is_serving(text: str) -> bool:
    """Whether ``text`` names a serving stack (``kind:release``) rather than a runtime (``trt10.13``)."""
    kind, sep, _ = text.partition(":")
    return bool(sep) and kind.strip().lower() in KINDS


def releases(kind: str) -> tuple[str, ...]:
    return tuple(s.release for s in STACKS if s.kind == kind)


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split(".") if p.isdigit())


def resolve_serving(text: str) -> ServingStack:
    """``triton:25.01`` -> the stack and the exact TensorRT it ships; a ``UsageError`` naming the known releases
    of that kind when the kind or release is unknown (never a guess)."""
    kind, sep, release = text.strip().partition(":")
    kind, release = kind.strip().lower(), release.strip()
    if not sep or kind not in KINDS:
        raise UsageError(f"unknown serving stack {text!r}",
                         hint=f"name one as KIND:RELEASE, e.g. {_FORM} (kinds: {', '.join(KINDS)})")
    found = _BY_NAME.get(f"{kind}:{release}")
    if found is not None:
        return found
    known = releases(kind)
    newer = bool(_release_key(release)) and _release_key(release) > max(_release_key(r) for r in known)
    message = f"unknown {kind} release {release!r}: no TensorRT version is known for it"
    if newer:
        message += f" ({NO_TENSORRT_11}; a newer release is not assumed to carry any particular one)"
    hint = f"known {kind} releases: {', '.join(known)}"
    if kind == "ngc-tensorrt":
        hint += " (months whose TensorRT version could not be verified are left out)"
    raise UsageError(message, hint=hint + "; or name the TensorRT version itself (builder_version: \"10.13.3.9\", "
                                        "--runtime trt10.13.3.9)")
