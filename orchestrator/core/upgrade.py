"""Upgrade rehearsal, the pure parts: how one engine's answers on the old and the new stack classify it, how a
rebuild's duration is predicted from recorded builds, and how a target is re-targeted at the new stack.

Whether an engine loads on a stack is never decided here: each engine's own runtime plugin answers (``can_run``,
through ``app.judge``), once per GPU the deployment runs it on, for the old stack and for the new one. This module
only reads those answers:

- ``stops``: it loads on the old stack on some GPU and not on the new one there (the rebuild set's engines);
- ``keeps``: it loads on the old stack, and on the new one wherever it loaded before;
- ``starts``: it does not load on the old stack, but does on the new one;
- ``never``: it loads on neither;
- ``other-runtime``: the upgrade does not move the runtime it runs on (not judged);
- ``unknown``: a deployed engine (``--inventory``) whose record is not in the registry (cannot be judged).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from orchestrator.core.model import Target

UpgradeStatus = Literal["stops", "keeps", "starts", "never", "other-runtime", "unknown"]
STATUSES: tuple[UpgradeStatus, ...] = ("stops", "keeps", "starts", "never", "other-runtime", "unknown")
SYMBOL: dict[str, str] = {"stops": "✗", "keeps": "=", "starts": "+", "never": "·", "other-runtime": "-",
                          "unknown": "?"}


@dataclass(frozen=True)
class GpuAnswer:
    """One GPU of a deployment: whether the engine loads there on the old stack and on the new one, and why
    (the runtime's own words)."""

    gpu: str  # "sm86", or "cpu" for a machine without a GPU
    old_ok: bool
    old_reason: str
    new_ok: bool
    new_reason: str


def classify(answers: Sequence[GpuAnswer]) -> tuple[UpgradeStatus, str]:
    """An engine's status over the GPUs it was judged on, and the reason that decides it: the first GPU where it
    stops loading (``stops``), else where it keeps loading (``keeps``), starts (``starts``), or the old stack's
    refusal (``never``)."""
    stopping = [a for a in answers if a.old_ok and not a.new_ok]
    if stopping:
        first = stopping[0]
        return "stops", f"{first.gpu}: {first.new_reason}"
    keeping = [a for a in answers if a.old_ok]
    if keeping:
        return "keeps", f"{keeping[0].gpu}: {keeping[0].new_reason}"
    starting = [a for a in answers if a.new_ok]
    if starting:
        first = starting[0]
        return "starts", f"{first.gpu}: not on the old stack ({first.old_reason}); loads on the new one"
    if not answers:
        return "never", "judged on no GPU"
    return "never", f"{answers[0].gpu}: {answers[0].old_reason}"


# -- predicted build time -------------------------------------------------------------------------------------

EstimateBasis = Literal["same cell", "same builder and CCs", "no record"]


@dataclass(frozen=True)
class BuildRecord:
    """What a published record says about one build: who built it, for what, and how long it took."""

    model: str
    precision: str
    profile_set: str
    builder: str
    builder_version: str
    where: str  # the target's place: its CCs ("8.6,8.9"), its compatibility level, or its device
    seconds: float


@dataclass(frozen=True)
class BuildEstimate:
    """A rebuild's predicted duration: the median of the recorded builds it rests on (``records`` of them).
    ``basis``: the same cell (model, precision, profile set, builder and place, any builder version), else the
    same builder and place (any model), else no record (``seconds`` None)."""

    seconds: float | None
    records: int
    basis: EstimateBasis

    def to_json(self) -> dict[str, object]:
        return {"seconds": None if self.seconds is None else round(self.seconds, 3), "records": self.records,
                "basis": self.basis}

    def text(self) -> str:
        if self.seconds is None:
            return "no record"
        return f"~{duration_text(self.seconds)} ({self.records} record{'s' if self.records != 1 else ''}, " \
               f"{self.basis})"


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_build(model: str, precision: str, profile_set: str, builder: str, where: str,
                   records: Sequence[BuildRecord]) -> BuildEstimate:
    """The predicted duration of building ``model``/``precision``/``profile_set`` with ``builder`` for ``where``,
    from recorded builds (see ``BuildEstimate``). The median, so one build on a loaded runner does not decide it."""
    same_place = [r for r in records if r.builder == builder and r.where == where and r.seconds > 0]
    same_cell = [r for r in same_place if (r.model, r.precision, r.profile_set) == (model, precision, profile_set)]
    if same_cell:
        return BuildEstimate(statistics.median(r.seconds for r in same_cell), len(same_cell), "same cell")
    if same_place:
        return BuildEstimate(statistics.median(r.seconds for r in same_place), len(same_place), "same builder and CCs")
    return BuildEstimate(None, 0, "no record")


def place_of(compute_capabilities: Sequence[str], hardware_compatibility: str, device: str) -> str:
    """How a build record's or a target's place compares: its sorted CCs, else its compatibility level, else its
    device."""
    if compute_capabilities:
        return ",".join(sorted(compute_capabilities))
    if hardware_compatibility not in ("", "none"):
        return hardware_compatibility
    return device


# -- re-targeting -------------------------------------------------------------------------------------------

def retarget(target: Target, version: str, serve: str | None, platform: str | None = None) -> Target:
    """``target`` built for the new stack: its builder version is the new stack's exact one, and ``serve`` the new
    serving stack (None when the new stack is a runtime release, ``ort1.31``); ``platform``: the new stack's
    platform when the deployment moves too (JetPack 6 -> 7 moves L4T R36 -> R38). Only the builder version (and the
    platform, for platform-specific builders) reach the build key (``core.keyspec``: ``targets[].serve`` does not),
    so the keys are those of a manifest that declares either."""
    return replace(target, builder_version=version, serve=serve, platform=platform or target.platform)
