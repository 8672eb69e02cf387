"""Version and compute-capability parsing (pure). One reading of ``"10.13.3.9"`` and ``"sm89"`` for everyone."""

from __future__ import annotations

import re


def parse_version(text: str | None) -> tuple[int, ...]:
    """``"10.13.3.9"`` -> (10, 13, 3, 9); trailing non-numeric parts (``.post1``, ``+cu13``) are ignored."""
    if not text:
        return ()
    parts: list[int] = []
    for piece in re.split(r"[.+-]", str(text)):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in version)


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """``"8.6"`` / ``"sm86"`` / ``"86"`` -> (8, 6); None when unreadable."""
    if text is None:
        return None
    t = str(text).strip().lower()
    if t.startswith("sm"):
        t = t[2:]
    if "." in t:
        major, _, minor = t.partition(".")
    elif t.isdigit() and len(t) >= 2:
        major, minor = t[:-1], t[-1]
    else:
        return None
    if not (major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def cc_text(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"
