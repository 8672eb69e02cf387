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


# ---------------------------------------------------------------------------------------------------------------
# THE version rule (issue 13): one comparison for every "does this installed version satisfy that version" check.
#
# Two versions are the same when they agree on the parts BOTH carry. ``trt.__version__`` is 3-part in the 8.6.1
# and 10.0-10.7 wheels ("8.6.1", "10.7.0") and 4-part from 10.8.0.43; trtexec's banner carries the build number
# only from 10.13.3; targets usually name the full release ("8.6.1.6", "10.13.3.9"). So:
#
#   8.6.1      == 8.6.1.6     (the installed module has no build number to disagree with)
#   10.7.0     == 10.7.0.23
#   10.13.3.9  != 10.13.3.10  (both carry the build number: it must agree)
#   10.13.3    != 10.13.2.6   (patch differs)
#   "" / None  matches nothing (an unreadable version is never "the same")
#
# A side that carries fewer parts cannot tell builds apart: the rule trusts it, and the engine's own plan header
# (its 4-part version) is checked again before a byte is deserialized (``_trt.plan_header``). Only the INSTALLED
# side may be the shorter one: a target or an engine record names a release exactly (TensorRT-family builders
# refuse a looser builder_version at validate), so "does this runner have the release the target names" is
# ``same_release(wanted, installed)``, never a prefix match.


def common_parts(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many leading parts both versions carry."""
    return min(len(a), len(b))


def same_version(a: str | tuple[int, ...] | None, b: str | tuple[int, ...] | None) -> bool:
    """True when ``a`` and ``b`` agree on every part both carry (see THE version rule above); False when either
    is empty or unreadable."""
    va = a if isinstance(a, tuple) else parse_version(a)
    vb = b if isinstance(b, tuple) else parse_version(b)
    n = common_parts(va, vb)
    return n > 0 and va[:n] == vb[:n]



def same_release(wanted: str | tuple[int, ...] | None, installed: str | tuple[int, ...] | None) -> bool:
    """Is ``installed`` the release that ``wanted`` (a target's builder version, an engine's recorded one) names?
    The version rule, one way round: they agree on every part both carry, and ``wanted`` carries at least as many
    parts as ``installed``. An installed module that reports fewer parts (``10.7.0``) cannot tell builds apart and
    is trusted, but a looser ``wanted`` (``10.13``, ``10``) names no release at all: against ``10.13.3.9`` it
    would equally accept ``10.13.0.35``, which does not load that engine (issue 23.17)."""
    va = wanted if isinstance(wanted, tuple) else parse_version(wanted)
    vb = installed if isinstance(installed, tuple) else parse_version(installed)
    return same_version(va, vb) and len(va) >= len(vb)
