"""``publish --checksums FILE``: the engines a publish run stored, as a sha256sum-format list (what GitHub's
actions/attest-build-provenance reads as ``subject-checksums``: one ``<hex>  <name>`` per line)."""

from __future__ import annotations

import re
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._@+-]")


def checksums_text(published) -> str:
    lines = []
    for cell in published:
        algorithm, _, hexdigest = str(cell.digest).partition(":")
        if algorithm == "sha256" and len(hexdigest) == 64:
            # a subject name on one line without spaces: the address with / as _ (addresses are model/precision/...)
            lines.append(f"{hexdigest}  {_UNSAFE.sub('_', cell.address)}")
    return "".join(line + "\n" for line in lines)


def write_checksums(path: str, published) -> None:
    """Write the list (nothing published: no file, so a workflow step conditioned on it is skipped)."""
    text = checksums_text(published)
    if text:
        Path(path).write_text(text)
