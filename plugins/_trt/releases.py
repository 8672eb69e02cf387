"""Exact TensorRT and TensorRT-RTX releases: what a target's ``builder_version`` must name, and the releases this
tool knows (for the hint when it names none). Pure.

A plain TensorRT engine loads only on the TensorRT release that built it, down to the build number, unless built
version compatible ("By default, TensorRT engines are compatible only with the version of TensorRT used to build
them", https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/advanced.html); a TensorRT-RTX engine
only on the RTX release that built it ("TensorRT-RTX engines are not compatible between different releases",
https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/engine-compatibility.html). A target's
version therefore names one release: major.minor.patch.build. ``10.13`` is three releases (10.13.0.35, 10.13.2.6,
10.13.3.9) whose engines do not load on one another, and a pip pin of ``tensorrt-rtx==1.7`` installs none of them.

The known releases (hints only; an unknown but exact version is accepted, a release newer than this list is no
error):

- TensorRT on PyPI with a 4-part version, 10.8.0.43 onwards (https://pypi.org/project/tensorrt-cu12/#history;
  ``tensorrt-cu13`` from 10.13.2.6). Before 10.8 PyPI versions are 3-part (8.6.1, 10.0.1 ... 10.7.0) and the
  wheels' ``__version__`` too, so the build numbers of those releases come from NVIDIA's other publications:
  8.6.1.6 (the TensorRT 8.6 GA packages; Triton's Windows build pins it after "double checking that value from our
  download page", triton-inference-server/server PR #5826), 10.0.1.6 (NGC 24.05 release notes, e.g.
  https://docs.nvidia.com/deeplearning/frameworks/mxnet-release-notes/rel-24-05.html), 10.2.0.19 and 10.4.0.26 and
  10.7.0.23 (triton-inference-server/server ``Dockerfile.win10.min`` after the 24.07, 24.09 and 24.12 releases),
  10.3.0.26 (NVIDIA/DL4AGX PR #110: "TRT docker ... 24.08 (TRT 10.3.0.26)").
- The exact TensorRT of the serving stacks ``core.serving`` knows (Triton, NGC, JetPack rows with 4 parts).
- TensorRT-RTX on PyPI (https://pypi.org/project/tensorrt-rtx/#history: 1.4.0.76 ... 1.7.1.116) and the earlier
  tags of https://github.com/NVIDIA/TensorRT-RTX (v1.0.0.21, v1.1.1.26).
"""

from __future__ import annotations

from orchestrator.core.serving import STACKS
from orchestrator.core.versions import parse_version, version_text

EXACT_PARTS = 4  # major.minor.patch.build

_TENSORRT_PYPI = ("10.8.0.43", "10.9.0.34", "10.10.0.31", "10.11.0.33", "10.12.0.36", "10.13.0.35", "10.13.2.6",
                  "10.13.3.9", "10.14.1.48", "10.15.1.29", "10.16.0.72", "10.16.1.11", "11.0.0.114", "11.1.0.106",
                  "11.2.1.2", "11.3.0.99", "11.4.0.106")
_TENSORRT_NVIDIA = ("8.6.1.6", "10.0.1.6", "10.2.0.19", "10.3.0.26", "10.4.0.26", "10.7.0.23")
RTX_RELEASES = ("1.0.0.21", "1.1.1.26", "1.4.0.76", "1.5.0.114", "1.6.1.120", "1.7.1.116")


def _sorted(versions: set[str]) -> tuple[str, ...]:
    return tuple(sorted(versions, key=parse_version))


TENSORRT_RELEASES: tuple[str, ...] = _sorted(
    set(_TENSORRT_PYPI) | set(_TENSORRT_NVIDIA)
    | {s.tensorrt for s in STACKS if len(parse_version(s.tensorrt)) == EXACT_PARTS
       and s.tensorrt == version_text(parse_version(s.tensorrt))})

_LABEL = {"tensorrt": "TensorRT", "tensorrt-rtx": "TensorRT-RTX"}


def known(product: str) -> tuple[str, ...]:
    return RTX_RELEASES if product == "tensorrt-rtx" else TENSORRT_RELEASES


def matching(version: str, product: str = "tensorrt") -> tuple[str, ...]:
    """The known releases ``version`` is a prefix of (on whole parts): ``10.13`` -> 10.13.0.35, 10.13.2.6, 10.13.3.9."""
    want = parse_version(version)
    return tuple(r for r in known(product) if want and parse_version(r)[:len(want)] == want)


def nearest(version: str, product: str = "tensorrt", k: int = 4) -> tuple[str, ...]:
    """The ``k`` known releases closest to ``version`` (same major first)."""
    want = parse_version(version) + (0,) * 4

    def distance(release: str) -> tuple[int, ...]:
        have = parse_version(release) + (0,) * 4
        return tuple(abs(a - b) for a, b in zip(have[:4], want[:4], strict=True))

    return tuple(sorted(known(product), key=distance)[:k])


def exact_problem(version: str, product: str = "tensorrt") -> tuple[str, str] | None:
    """None when ``version`` names one release exactly (major.minor.patch.build), else (message, hint) for the
    manifest check: why a looser version cannot be a target's, and the known releases it could mean."""
    parts = parse_version(version)
    if len(parts) >= EXACT_PARTS:
        return None
    label = _LABEL.get(product, product)
    what = ("an engine loads only on the exact release that built it (down to the build number)"
            if product == "tensorrt" else "RTX engines load only on the RTX release that built them")
    message = (f"builder_version {version!r} is not an exact {label} release: {what}, so a {label} target names "
               "one, as major.minor.patch.build")
    candidates = matching(version, product) if parts else ()
    if candidates:
        hint = f"known {version} releases: {', '.join(candidates)}"
    else:
        hint = (f"no {label} {version} release with its build number is known to this tool; nearest known: "
                f"{', '.join(nearest(version, product))}")
    how = ("the exact version of an installed TensorRT: trtexec's banner ([TensorRT v101303] [b9] is 10.13.3.9), "
           "dpkg -l | grep libnvinfer, or trt.__version__ from 10.8 on" if product == "tensorrt"
           else "the exact version of an installed TensorRT-RTX: python -c 'import tensorrt_rtx; "
                "print(tensorrt_rtx.__version__)'")
    return message, f"{hint} ({how})"
