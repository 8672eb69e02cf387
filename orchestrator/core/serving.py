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
- ``ngc-tensorrt:YY.MM``: the ``nvcr.io/nvidia/tensorrt:YY.MM-py3`` image. NVIDIA's per-month TensorRT container
  release notes could not be read; each row says what its version rests on (``status``): NVIDIA's own publications
  (confirmed: framework release notes of the month, NVIDIA repositories and staff), an NVIDIA file that pins the
  release next to the image (primary-proxy: Triton's Windows build of that month), or other projects (secondary).
  Months with no source, or with sources that disagree, are left out rather than guessed. The ``container``
  toolchain (``plugins/_trt/provisioning.py``) takes only confirmed and primary-proxy rows.
- ``jetpack:X.Y``: JetPack releases (secondary: Torch-TensorRT's docs and devices' ``dpkg`` output).

TensorRT 11.x: no NVIDIA source found names a container that ships it. The one row with TensorRT 11
(``ngc-tensorrt:26.08``: 11.2.1.2) rests on several public projects that pin that image as TensorRT 11.2.1.2
(secondary); the newest TensorRT NVIDIA's Triton matrix lists is 10.14.1.48
(``tritonserver:26.03``..``26.07-trtllm-python-py3``). Before the trtllm images, a ``triton`` row is the plain
``tritonserver:YY.MM-py3`` image (8.6.x; secondary: NVIDIA staff and the support matrix quoted in issues). A
release this table does not know is refused, never guessed. Each row carries its public source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator.errors import UsageError

ServingKind = Literal["triton", "ngc-tensorrt", "jetpack"]
# confirmed: NVIDIA's own publication; primary-proxy: an NVIDIA file pinning the release next to it (Triton's Windows
# build of that month); secondary: other projects and users. See _NGC_ROWS.
Status = Literal["confirmed", "primary-proxy", "secondary"]
STATUSES: tuple[Status, ...] = ("confirmed", "primary-proxy", "secondary")

TRITON_SOURCE = ("NVIDIA Triton compatibility matrix, triton-inference-server/server "
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
                              TRITON_SOURCE, "confirmed", _TRITON_NOTE.format(release=r) + conflict)
                 for r in releases)


_EARLIER = "; an earlier revision of the matrix (docs/compatibility.md @01bbc523) said {}"


def _triton_py3(release: str, tensorrt: str, source: str, note: str) -> ServingStack:
    return ServingStack("triton", release, tensorrt, None, f"nvcr.io/nvidia/tritonserver:{release}-py3", source,
                        "secondary", note)


# Triton compatibility matrix, trtllm-python-py3 rows; status confirmed for that image. Before
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


def _ngc(release: str, tensorrt: str, cuda: str | None, source: str, note: str = "",
         status: Status = "secondary") -> ServingStack:
    return ServingStack("ngc-tensorrt", release, tensorrt, cuda, f"nvcr.io/nvidia/tensorrt:{release}-py3", source,
                        status, note)


_TRITON_COMMIT = "https://github.com/triton-inference-server/server/commit/"
_WINDOWS_PIN = ("NVIDIA's Triton repository pins TENSORRT_VERSION={} in Dockerfile.win10.min {} ({}); NVIDIA bumps "
                "that file to the month's release, but it is Triton's Windows build, not this Linux image")
_DL4AGX = ("https://github.com/NVIDIA/DL4AGX/pull/110 (NVIDIA's repository, merged as 482b3f53e7b7: \"TRT docker ... "
           "upgraded from 24.08 (TRT 10.3.0.26) to 25.04 (TRT 10.9.0.34)\")")

# nvcr.io/nvidia/tensorrt:YY.MM-py3 rows. Each says what its TensorRT version rests on:
# - confirmed: NVIDIA's own publication names that image's (or that month's framework stack's) TensorRT: release
#   notes, a file or pull request in an NVIDIA repository, NVIDIA staff in an NVIDIA issue;
# - primary-proxy: an NVIDIA file that pins the release next to the image: the Windows build of Triton that NVIDIA
#   bumps "post-YY.MM release" (its CUDA sometimes differs from the Linux image's, so CUDA is not taken from it);
# - secondary: other projects' pins, users' dpkg output.
# Left out: every month no source names (23.06, 23.10, 24.01, 24.03, 24.06, 24.11, 25.05, 25.07, 25.09, 25.11, 26.01);
# the 2023 8.6.1 months whose only NVIDIA source is Triton's Windows pin (8.6.1.6) while the Linux images report
# 8.6.1.2 (https://github.com/NVIDIA/TensorRT/issues/4676, dpkg in 23.04); 23.11 (NVIDIA staff name only "TRT 8.6");
# 24.10, 25.06, 25.10 (secondary sources with a 2- or 3-part version only); 25.08 and 25.12 (only CUDA is known:
# 13.0.0 and 13.1.0, so TensorRT >= 10.13.2, the first CUDA 13 build).
_NGC_ROWS = (
    _ngc("23.01", "8.5.2", "12.0.1", "https://forums.developer.nvidia.com/t/nvidia-release-versions-compatibility/"
         "265643 (a user's forum post)", "3-part version only"),
    _ngc("23.02", "8.5.3", None, "https://github.com/autonomi-ai/nos/pull/19", "3-part version only"),
    _ngc("23.04", "8.6.1", None, "https://github.com/NVIDIA/TensorRT/issues/4676 (quotes NVIDIA's 23.04 release "
         "notes)", "dpkg inside the image shows 8.6.1.2"),
    _ngc("24.02", "8.6.3", None, "https://github.com/triton-inference-server/server/issues/6959 (NVIDIA maintainer: "
         "\"Triton base image includes installation of the TensorRT version 8.6.3\"; Triton is part of the month's "
         "framework stack, which the TensorRT image shares)", "3-part version only", "confirmed"),
    _ngc("24.05", "10.0.1.6", "12.4.1", "https://docs.nvidia.com/deeplearning/frameworks/mxnet-release-notes/"
         "rel-24-05.html (NVIDIA's 24.05 framework release notes: CUDA 12.4.1, TensorRT 10.0.1.6); "
         "https://github.com/NVIDIA/TensorRT/issues/3796 (NVIDIA staff: \"TRT 10 will be in the 24.05 docker image\")",
         "the first TensorRT 10 image", "confirmed"),
    _ngc("24.07", "10.2.0.19", None, _WINDOWS_PIN.format("10.2.0.19", "after the 24.07 release",
                                                          _TRITON_COMMIT + "2bb9020d7da96818f411aef0b0d2bf53c2663a86"),
         "Triton's matrix, an earlier revision, gave 10.2.0.19 for the trtllm image too", "primary-proxy"),
    _ngc("24.08", "10.3.0.26", None, _DL4AGX, "", "confirmed"),
    _ngc("24.09", "10.4.0.26", None, _WINDOWS_PIN.format("10.4.0.26", "of 2024-09-24",
                                                          _TRITON_COMMIT + "8cfb3b00c98783959ec417b7ca8098d984e68c36"),
         "weak: that commit names no release", "primary-proxy"),
    _ngc("24.12", "10.7.0.23", "12.6.3",
         _WINDOWS_PIN.format("10.7.0.23", "after the 24.12 release",
                             _TRITON_COMMIT + "38520f6d04795363a8c76288863f4fabd59a58d1"),
         "a public note on the NGC PyTorch 24.12 image agrees (TensorRT 10.7.0.23, CUDA 12.6.3)", "primary-proxy"),
    _ngc("25.01", "10.8.0.43", "12.8", "https://github.com/NVIDIA/TensorRT/issues/4346 (TensorRT 10.8 \"available in "
         "the 25.01\" containers); NVIDIA's Triton compatibility matrix lists 10.8.0.43 / CUDA 12.8.0 for the 25.01 "
         "trtllm image; three independent repositories pin libnvinfer 10.8.0.43-1+cuda12.8 for this image", "",
         "primary-proxy"),
    _ngc("25.02", "10.8.0.43", "12.8",
         _WINDOWS_PIN.format("10.8.0.43", "when advancing to 25.02",
                             _TRITON_COMMIT + "ababbeb64be57417e96af69f572c570357b681f8"),
         "the Triton compatibility matrix lists 10.8.0.43 / CUDA 12.8.0 for the 25.02 trtllm image", "primary-proxy"),
    _ngc("25.03", "10.9.0.34", "12.8.1", "https://github.com/NVIDIA/TensorRT-LLM/blob/"
         "0237cabd8564e20bf7790db5df17bb631412011c/docker/common/install_tensorrt.sh (TRT_VER=\"10.9.0.34\", \"Align "
         "with the pre-installed ... versions\" of NVIDIA's 25.03 PyTorch image); Triton's 25.03 release notes: "
         "\"based on CUDA 12.8.1\"", "", "primary-proxy"),
    _ngc("25.04", "10.9.0.34", None, _DL4AGX + "; its Dockerfile starts FROM nvcr.io/nvidia/tensorrt:25.04-py3", "",
         "confirmed"),
    _ngc("26.02", "10.15.1", None, "https://github.com/NVIDIA/Model-Optimizer/pull/1112 (NVIDIA author, merged as "
         "8f4c11aa44bd: \"Upgraded the TensorRT container version to 26.02 - This supports TensorRT 10.15.1\")",
         "3-part version only", "confirmed"),
    _ngc("26.08", "11.2.1.2", "13.3", "several public projects pin it as TensorRT 11.2.1.2 (an RF-DETR TensorRT "
         "backend's versions.env spec: TENSORRT_VERSION=11.2.1.2, CUDA_VERSION=13.3, NGC_CONTAINER_TAG=26.08; an "
         "rfdetr export note of 2026-10-07: \"nvcr.io/nvidia/tensorrt:26.08-py3 (TensorRT 11.2.1.2)\")",
         "not confirmed against NVIDIA's container release notes"),
)

_JETPACK_TORCH_TRT = "https://docs.pytorch.org/TensorRT/_sources/getting_started/jetpack.rst.txt"
# JetPack -> TensorRT; all secondary (device dpkg output, Torch-TensorRT docs).
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
        hint += (" (a month whose TensorRT version no public source names, or whose sources disagree, is left out: "
                 "this tool does not guess)")
    raise UsageError(message, hint=hint + "; or name the TensorRT version itself (builder_version: \"10.13.3.9\", "
                                        "--runtime trt10.13.3.9)")
