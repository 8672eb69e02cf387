"""Build on miss, as data (pure): the target a deployment builds for when no published engine fits it, and the
declared target whose builder options it takes. ``orchestrator.app.heal`` composes the build; docs/deploy.md
("Build on miss") tells the story.

**The target.** A builder installed on the deployment says what it would build there (``Builder.probe_target`` for
the deployment's fingerprint: its exact installed version, the deployment's compute capability or device); the
on-device target is that, on the deployment's platform, with the builder options of the *nearest* target the
manifest declares for the same builder (``NEAREST_RULE``), its weights embedded (the engine is written where it
runs: nothing to refit), matched by compute capability (a CPU engine as the nearest target's ``cpu_match`` says).
A declared target at the same place (same address slug, e.g. one that names the builder's version as ``1.31``
where the deployment has ``1.31.1``) gives way to it in the recipe.

**Nearest.** Among the manifest's targets of the same builder: the same kind of device first (CPU, or a GPU),
then the closest compute capability (the smallest distance between the target's and the deployment's, read as
``major * 10 + minor``; a target or deployment without one is at distance 0), then the newest builder version,
then the manifest's order. No declared target of the builder: its default options.

**As a manifest declares it.** ``manifest_entry`` writes the target as a ``targets[]`` entry; a manifest that
declares it plans the cell the deployment built (same address, build key and gate key), so a published
``built-on-device`` record is ``= up to date`` for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

from orchestrator.core.model import DEFAULT_PLATFORM, BuilderOptions, Target, target_slug
from orchestrator.core.versions import parse_cc, parse_version

NEAREST_RULE = ("the same builder; then the same kind of device (CPU or GPU); then the closest compute "
                "capability; then the newest builder version; then the manifest's order")
NAME_PREFIX = "device-"


def _kind(target: Target) -> str:
    return "cpu" if target.device == "cpu" else "gpu"


def _cc_number(cc: str) -> int | None:
    parsed = parse_cc(cc)
    return None if parsed is None else parsed[0] * 10 + parsed[1]


def cc_distance(target: Target, cc: str | None) -> int:
    """How far ``target``'s compute capabilities are from ``cc`` (0 where either has none)."""
    wanted = _cc_number(cc) if cc else None
    ours = [n for n in (_cc_number(c) for c in target.compute_capabilities) if n is not None]
    if wanted is None or not ours:
        return 0
    return min(abs(n - wanted) for n in ours)


def nearest_target(declared: Sequence[Target], probe: Target) -> Target | None:
    """The declared target of ``probe``'s builder nearest to it (``NEAREST_RULE``), or None when the manifest
    declares none of that builder."""
    cc = probe.compute_capabilities[0] if probe.compute_capabilities else None
    same = [(i, t) for i, t in enumerate(declared) if t.builder == probe.builder]
    if not same:
        return None

    def order(item: tuple[int, Target]) -> tuple[int, int, tuple[int, ...], int]:
        i, t = item
        newest_first = tuple(-p for p in parse_version(t.builder_version))
        return (0 if _kind(t) == _kind(probe) else 1, cc_distance(t, cc), newest_first, i)

    return min(same, key=order)[1]


def target_name(target: Target) -> str:
    """``device-sm89-rtx1.7``, ``device-cpu-ort1.31``: a manifest target name (lowercase, ``[._-]`` between
    letters and digits) made of the place and the builder."""
    text = target_slug(target).lower().replace("+", "-").replace("/", "-")
    parts = ["".join(c for c in piece if c.isalnum() or c == ".").strip(".") for piece in text.split("-")]
    return NAME_PREFIX + "-".join(p for p in parts if p)


def device_target(probe: Target, nearest: Target | None, *, platform: str) -> Target:
    """The target a deployment builds for: ``probe`` (what the builder installed there builds for it) on
    ``platform``, with ``nearest``'s builder options (None: the defaults) and, for a CPU engine, its ``cpu_match``;
    embedded weights, CC matching."""
    built = Target(name="device", builder=probe.builder, builder_version=probe.builder_version,
                   compute_capabilities=tuple(probe.compute_capabilities), device=probe.device,
                   options=nearest.options if nearest is not None else BuilderOptions(),
                   builder_slug=probe.builder_slug, platform=platform,
                   cpu_match=nearest.cpu_match if nearest is not None and probe.device == "cpu" else "any")
    return replace(built, name=target_name(built))


def options_entry(options: BuilderOptions) -> dict[str, Any]:
    """``targets[].options`` as a manifest writes it: the options that differ from the defaults."""
    default = BuilderOptions()
    out: dict[str, Any] = {}
    for f in fields(BuilderOptions):
        value = getattr(options, f.name)
        if f.name == "timing_cache_pin" or value == getattr(default, f.name):
            continue
        out[f.name] = dict(sorted(value.items())) if f.name == "extra" else value
    if options.timing_cache_pin:
        out["timing_cache"] = {"pin": True}
    return out


def manifest_entry(target: Target) -> dict[str, Any]:
    """``target`` as a manifest's ``targets[]`` entry (what ``manifest.convert`` reads back into the same target:
    add it to the manifest and ``plan`` computes the cells it names)."""
    entry: dict[str, Any] = {"name": target.name, "builder": target.builder,
                             "builder_version": target.builder_version}
    if target.hardware_compatibility == "ampere_plus":
        entry["hardware_compatibility"] = "ampere_plus"
    elif target.device in ("cpu", "cuda") and not target.compute_capabilities:
        entry["device"] = target.device
    elif len(target.compute_capabilities) == 1:
        entry["compute_capability"] = target.compute_capabilities[0]
        if target.hardware_compatibility != "none":
            entry["hardware_compatibility"] = target.hardware_compatibility
    else:
        entry["compute_capabilities"] = list(target.compute_capabilities)
    if target.platform != DEFAULT_PLATFORM:
        entry["platform"] = target.platform
    options = options_entry(target.options)
    if options:
        entry["options"] = options
    if target.gpu_match != "cc":
        entry["gpu_match"] = target.gpu_match
    if target.cpu_match != "any":
        entry["cpu_match"] = target.cpu_match
    if target.weights != "embedded":
        entry["weights"] = target.weights
    if target.serve is not None:
        entry["serve"] = target.serve
    return entry
