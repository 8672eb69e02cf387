"""`orchestrate doctor`: this runner's fingerprint and, per plugin, what it can build and run here."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from orchestrator import plugins
from orchestrator.errors import PluginError
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import BuilderOptions, RunnerLabels, Target

# Which installed version each builder would use, read from the fingerprint.
_VERSION_OF = {"tensorrt-rtx": "tensorrt_rtx", "tensorrt": "tensorrt", "trtexec": "tensorrt",
               "onnxruntime": "onnxruntime"}


def _probe_target(name: str, fp: RunnerFingerprint) -> Target | None:
    version = getattr(fp, _VERSION_OF.get(name, ""), None)
    if not version:
        return None
    if name == "onnxruntime":
        device = "cuda" if "CUDAExecutionProvider" in fp.onnxruntime_providers else "cpu"
        return Target(name="probe", builder=name, builder_version=version, device=device)
    ccs = (fp.compute_capability,) if fp.compute_capability else ("8.6",)
    return Target(name="probe", builder=name, builder_version=version, compute_capabilities=ccs,
                  runners=RunnerLabels((), ()), options=BuilderOptions())


def diagnose(fp: RunnerFingerprint) -> dict:
    builders = []
    for name in plugins.names(plugins.BUILDERS):
        entry = {"name": name, "installed_version": getattr(fp, _VERSION_OF.get(name, ""), None)}
        try:
            plugin = plugins.builder(name)
        except PluginError as e:
            builders.append({**entry, "can_build": False, "reason": str(e)})
            continue
        target = _probe_target(name, fp)
        if target is None:
            builders.append({**entry, "can_build": False, "reason": f"{name} is not installed"})
            continue
        caps = plugin.capabilities(target.builder_version)
        reason = plugin.available(fp, target)
        builders.append({**entry, "can_build": reason is None, "reason": reason,
                         "probe_target": target.slug, "precisions_native": sorted(caps.native),
                         "precisions_via_transform": sorted(caps.via_transform),
                         "target_kinds": sorted(caps.target_kinds), "needs_gpu": caps.needs_gpu,
                         "engines_run_on": caps.runs_on})
    runtimes = []
    for name in plugins.names(plugins.RUNTIMES):
        try:
            plugin = plugins.runtime(name)
        except PluginError as e:
            runtimes.append({"name": name, "can_run": False, "reason": str(e)})
            continue
        target = _probe_target(name, fp)
        if target is None:
            runtimes.append({"name": name, "can_run": False, "reason": f"{name} is not installed"})
            continue
        meta = {"builder": {"name": name, "version": target.builder_version},
                "target": {"compute_capabilities": list(target.compute_capabilities), "device": target.device,
                           "hardware_compatibility": "none", "version_compatible": False}}
        reason = plugin.can_run(meta, fp)
        runtimes.append({"name": name, "can_run": reason is None, "reason": reason, "probe_target": target.slug})
    return {"fingerprint": fp.to_json(), "builders": builders, "runtimes": runtimes}


def render_doctor(report: dict, console: Console) -> None:
    fp = report["fingerprint"]
    console.print(f"[bold]runner[/] {fp['os']}/{fp['arch']}  driver {fp['driver_version'] or '-'}  "
                  f"CUDA (driver) {fp['cuda_driver_version'] or '-'}")
    if fp["gpus"]:
        for g in fp["gpus"]:
            console.print(f"  GPU {g['index']}: {g['name']}  CC {g['compute_capability']}  {g['memory_mib']} MiB")
    else:
        console.print("  no NVIDIA GPU (NVML found no driver)")
    console.print(f"  tensorrt {fp['tensorrt'] or '-'}  tensorrt-rtx {fp['tensorrt_rtx'] or '-'}  "
                  f"onnxruntime {fp['onnxruntime'] or '-'} {list(fp['onnxruntime_providers']) or ''}")
    table = Table("builder", "version", "build here?", "precisions (native / via transform)", "engines run on",
                  box=None, header_style="bold")
    for b in report["builders"]:
        ok = "[green]yes[/]" if b["can_build"] else f"[red]no[/] — {b['reason']}"
        prec = (f"{', '.join(b.get('precisions_native', [])) or '-'} / "
                f"{', '.join(b.get('precisions_via_transform', [])) or '-'}") if "precisions_native" in b else ""
        table.add_row(b["name"], b["installed_version"] or "-", ok, prec, b.get("engines_run_on", ""))
    console.print(table)
    table = Table("runtime", "run here?", box=None, header_style="bold")
    for r in report["runtimes"]:
        table.add_row(r["name"], "[green]yes[/]" if r["can_run"] else f"[red]no[/] — {r['reason']}")
    console.print(table)
