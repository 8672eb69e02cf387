"""`orchestrate ls` and `orchestrate show` on a terminal and as JSON: published records, the caches published with
them, a record's caches and attachments. Registry text is data, never markup: every value goes through ``clean``
(control characters escaped, one line) into a ``rich.text.Text``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.app.registry import CalibrationCache, Listing, TimingCache, WeightsBlob, record_key_of
from orchestrator.cli.render.report import cpu_text
from orchestrator.core.fingerprint import RunnerFingerprint


def _short(digest: object) -> str:
    return str(digest or "-")[:19]


def _size(n: object) -> str:
    return f"{n} B" if isinstance(n, int) and not isinstance(n, bool) else "-"


def record_row(meta: Mapping[str, Any]) -> list[str]:
    gates = meta.get("gates") or {}
    return [str(meta["address"]), str(meta["model"]["version"]),
            f"{meta['builder']['name']} {meta['builder']['version']}",
            str(gates.get("status", "?")) + (" (published ungated)" if gates.get("ungated_publish_allowed") else ""),
            f"{meta['engine']['size'] / 1e6:.1f} MB", _short(meta["engine"]["digest"]), record_key_of(meta)[:12],
            str(meta.get("published_at", ""))]


def record_json(meta: Mapping[str, Any]) -> dict[str, Any]:
    gates = meta.get("gates") or {}
    weights = meta.get("weights") or {}
    return {"address": meta["address"], "version": meta["model"]["version"], "digest": meta["engine"]["digest"],
            "size": meta["engine"]["size"], "builder": meta["builder"], "gates": gates.get("status"),
            "build_key": meta["build_key"], "gate_key": gates.get("key") or None,
            "record_key": record_key_of(meta), "published_at": meta.get("published_at"),
            "caches": _record_caches(meta),
            "weights": {"mode": weights.get("mode", "embedded"), "stripped": bool(weights.get("stripped")),
                        "blob": (weights.get("blob") or {}).get("digest")}}


def _weights_row(w: WeightsBlob) -> list[str]:
    j = w.to_json()
    source = j["source"] or {}
    where = "model" if source.get("kind") != "transform" else f"{source.get('transform')} transform"
    return [str(j["address"]), str(j["version"]), where, f"{j['size'] / 1e6:.1f} MB", _short(j["digest"]),
            f"{j['tensors']} tensors", f"{len(w.engines)} engine(s)", str(j.get("published_at") or "")]


def _record_caches(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Which caches a record links: the calibration cache's digest, the timing cache's scope and digest."""
    caches = meta.get("caches") or {}
    calib = caches.get("calibration") if isinstance(caches.get("calibration"), Mapping) else None
    timing = caches.get("timing") if isinstance(caches.get("timing"), Mapping) else None
    attached = {a.get("name"): a.get("digest") for a in meta.get("attachments") or () if isinstance(a, Mapping)}
    return {"calibration": calib.get("digest") if calib else None,
            "timing": {"scope": timing.get("scope"),
                       "digest": attached.get(timing.get("name")) or timing.get("written") or timing.get("read")}
            if timing else None}


def listing_json(listing: Listing, metas: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {"artifacts": [record_json(m) for m in metas], "weights": [w.to_json() for w in listing.weights],
            "caches": {"calibration": [c.to_json() for c in listing.calibration],
                       "timing": [t.to_json() for t in listing.timing]},
            "damaged": [d.to_json() for d in listing.damaged]}


def _calibration_row(c: CalibrationCache) -> list[str]:
    return ["calibration", c.name or "-", _short(c.digest), f"key {c.key[:12] or '-'}", _size(c.size),
            f"{len(c.engines)} engine(s)" + ("" if c.stored else " (file not published)")]


def _timing_row(t: TimingCache) -> list[str]:
    return ["timing", t.name or "-", _short(t.digest), t.scope or "-", _size(t.size),
            f"{len(t.engines)} engine(s)" + (", pinned" if t.pinned else "") + ("" if t.stored else
                                                                                 " (file not published)")]


def render_listing(listing: Listing, metas: list[Mapping[str, Any]], console: Console,
                   clean: Callable[[str], str]) -> None:
    table = Table("address", "version", "builder", "gates", "size", "digest", "record", "published", box=None,
                  header_style="bold")
    for m in metas:
        table.add_row(*(Text(clean(cell)) for cell in record_row(m)))
    console.print(table)
    engines = len({str(m["engine"]["digest"]) for m in metas})
    console.print(f"{len(metas)} artifact(s)" + (f" ({engines} engine(s))" if engines != len(metas) else ""))
    if listing.weights:
        blobs = Table("weights", "version", "from", "size", "digest", "tensors", "needed by", "published", box=None,
                      header_style="bold")
        for w in listing.weights:
            blobs.add_row(*(Text(clean(cell)) for cell in _weights_row(w)))
        console.print()
        console.print(blobs)
        console.print(f"{len(listing.weights)} weights blob(s): stripped engines are refitted from them at "
                      "deployment")
    if listing.damaged:
        console.print()
        for d in listing.damaged:
            what = d.address or f"record {d.key[:12]}"
            console.print(Text(f"! damaged {clean(what)} [{d.kind}]: {clean(d.problem)} ({clean(d.location)})",
                               style="red"))
        console.print(Text(f"{len(listing.damaged)} damaged record(s), not listed above: publish them again to "
                           "replace them, or `orchestrate store check --quarantine` to move them aside"))
    if not (listing.calibration or listing.timing):
        return
    caches = Table("cache", "name", "digest", "key / scope", "size", "linked by", box=None, header_style="bold")
    for row in [_calibration_row(c) for c in listing.calibration] + [_timing_row(t) for t in listing.timing]:
        caches.add_row(*(Text(clean(cell)) for cell in row))
    console.print()
    console.print(caches)
    console.print(f"{len(listing.calibration)} calibration cache(s), {len(listing.timing)} timing cache(s)")


def _caches_lines(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    caches = meta.get("caches") or {}
    out = []
    calib = caches.get("calibration")
    if isinstance(calib, Mapping):
        out.append(("calibration", f"{calib.get('name') or '-'} {calib.get('digest')} (key "
                                   f"{str(calib.get('key') or '-')[:12]}, {calib.get('calibrator') or 'calibrator ?'}, "
                                   f"{_size(calib.get('size'))})"))
    timing = caches.get("timing")
    if isinstance(timing, Mapping):
        out.append(("timing", f"{timing.get('name') or '(not published)'} scope {timing.get('scope') or '-'}; read "
                              f"{_short(timing.get('read'))}, written {_short(timing.get('written'))}"
                              + (", pinned" if timing.get("pinned") else "")))
    return out


def _weights_lines(meta: Mapping[str, Any]) -> list[tuple[str, object]]:
    """An engine's weights mode and blob, or a weights record's blob (``core.weights``)."""
    weights, blob = meta.get("weights"), meta.get("blob")
    out: list[tuple[str, object]] = []
    if isinstance(weights, Mapping):
        pointer = weights.get("blob") or {}
        out.append(("weights", f"{weights.get('mode')}" + (f", stripped: refitted at deployment from weights "
                                                            f"{pointer.get('digest')} (record "
                                                            f"{str(pointer.get('record_key'))[:12]})"
                                                            if weights.get("stripped") else "")))
    if isinstance(blob, Mapping):
        out.append(("blob", f"weights.bin {meta['engine']['digest']}, model.onnx {blob.get('graph_digest')}, "
                            f"{blob.get('tensors')} tensors, from {blob.get('source')}"))
    return out


def target_text(target: Mapping[str, Any]) -> str:
    """A record's target as a reader says it: ``cpu: device cpu; linux/x86_64``, ``rtx: CC 8.6, 8.9; ...``."""
    ccs = [str(c) for c in target.get("compute_capabilities") or ()]
    parts = [f"CC {', '.join(ccs)}" if ccs else f"device {target.get('device') or '?'}"]
    if target.get("hardware_compatibility") not in (None, "none"):
        parts.append(f"hardware-compatible ({target['hardware_compatibility']})")
    if target.get("version_compatible"):
        parts.append("version-compatible")
    if target.get("platform_specific") is False:
        parts.append("any platform")
    elif target.get("platform"):
        parts.append(str(target["platform"]))
    if target.get("gpu_match") == "sku":
        parts.append("only on the GPU model it was built on")
    if target.get("lean_runtime"):
        parts.append(f"needs the TensorRT {target['lean_runtime']} lean runtime")
    return f"{target.get('name') or '?'}: " + "; ".join(parts)


def manifest_text(manifest: Mapping[str, Any]) -> str:
    commit = manifest.get("git_commit")
    where = str(manifest.get("path") or "?")
    return f"{where} at git commit {str(commit)[:12]}" if commit else f"{where} (no git commit recorded)"


def runner_text(runner: Mapping[str, Any]) -> str:
    """The runner that built the engine: GPU, platform, runtimes installed (``RunnerFingerprint.describe``)."""
    try:
        return RunnerFingerprint.from_json(runner).describe()
    except (TypeError, ValueError, KeyError, AttributeError):  # registry data of another shape: its GPU names
        gpus = [str(g.get("name")) for g in runner.get("gpus") or () if isinstance(g, Mapping)]
        return ", ".join(gpus) or "no GPU"


def _gated_on(meta: Mapping[str, Any]) -> list[tuple[str, object]]:
    """A CPU engine's verdicts hold for the CPU instruction set they were given on: which one, and the target's
    cpu_match policy (``any``: any CPU of the platform; ``isa``: that ISA only)."""
    gates = meta.get("gates") or {}
    cpus = {kind: cpu_text(((gates.get(kind) or {}).get("runner") or {}).get("cpu"))
            for kind in ("parity", "benchmark") if isinstance(gates.get(kind), Mapping)}
    found = {k: v for k, v in cpus.items() if v}
    if not found:
        return []
    policy = f"cpu_match: {((gates.get('key_inputs') or {}).get('deploy') or {}).get('cpu_match') or 'any'}"
    if len(set(found.values())) == 1:
        return [("gated on", f"{next(iter(found.values()))}; {policy}")]
    return [(f"{kind} on", f"{text}; {policy}") for kind, text in found.items()]


def render_record(meta: Mapping[str, Any], console: Console, clean: Callable[[str], str]) -> None:
    gates = meta.get("gates") or {}
    target = meta.get("target")
    reused = meta.get("reused_from")
    lines: list[tuple[str, object]] = [
        ("address", meta["address"]), ("model", f"{meta['model']['name']} {meta['model']['version']}"),
        ("engine", f"{meta['engine']['digest']} ({meta['engine']['size']} bytes)"),
        ("builder", f"{meta['builder']['name']} {meta['builder']['version']}"),
        ("target", target_text(target) if isinstance(target, Mapping) else target),
        ("record key", record_key_of(meta)), ("build key", meta["build_key"]),
        ("gate key", gates.get("key") or "(none: published before gate keys)"),
        ("gates", gates.get("status")),
        ("runner", runner_text(meta["runner"]) if isinstance(meta.get("runner"), Mapping) else "?"),
        ("manifest", manifest_text(meta["manifest"]) if isinstance(meta.get("manifest"), Mapping) else "?"),
        *_gated_on(meta), ("published", meta.get("published_at"))]
    if isinstance(reused, Mapping):
        lines.append(("reused", f"the engine and verdicts of version {reused.get('model_version')} (record "
                                f"{str(reused.get('record_key'))[:12]})"))
    device = meta.get("built_on_device")
    if isinstance(device, Mapping):  # pull --build-on-miss built it on a deployment (docs/deploy.md)
        runner = device.get("runner")
        nearest = device.get("nearest_target")
        lines.append(("built on", f"a deployment ({runner_text(runner) if isinstance(runner, Mapping) else '?'}) by "
                                  f"{device.get('by')}, with "
                                  + (f"the builder options of declared target {nearest}" if nearest
                                     else "the builder's default options")
                                  + f"; gate {(device.get('gate') or {}).get('status')} there"))
    lines += _caches_lines(meta) + _weights_lines(meta)
    lines += [("caveat", c) for c in gates.get("caveats") or ()]  # what the verdicts do not show (issue 23.16)
    for label, value in lines:
        console.print(Text.assemble((f"{label:>11}", "bold"), "  ", clean(str(value))), highlight=False)
    for a in meta.get("attachments") or ():
        if isinstance(a, Mapping):
            text = f"{a.get('role')}  {a.get('name')}  {a.get('digest')}  {_size(a.get('size'))}"
            console.print(Text.assemble((f"{'attachment':>11}", "bold"), "  ", clean(text)), highlight=False)
