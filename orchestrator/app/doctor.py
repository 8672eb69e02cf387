"""`orchestrate doctor`'s data: this runner's fingerprint and, per installed plugin, what it can build and run
here. Every builder and runtime answers for itself (``probe_target``, ``available``, ``can_run``)."""

from __future__ import annotations

from typing import Any

from orchestrator import plugins
from orchestrator.core.artifact import EngineDescriptor, EngineTarget
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.errors import PluginError


def diagnose(fp: RunnerFingerprint) -> dict[str, Any]:
    builders: list[dict[str, Any]] = []
    runnable: dict[str, EngineDescriptor] = {}  # runtime name -> an engine its builder would make here
    for name in plugins.names(plugins.BUILDERS):
        entry: dict[str, Any] = {"name": name, "installed_version": None}
        try:
            plugin = plugins.builder(name)
            target = plugin.probe_target(fp)
        except PluginError as e:
            builders.append({**entry, "can_build": False, "reason": str(e)})
            continue
        if target is None:
            builders.append({**entry, "can_build": False,
                             "reason": f"{name} is not installed (its runtime {plugin.runtime!r} was not found)"})
            continue
        caps = plugin.capabilities(target.builder_version)
        reason = plugin.available(fp, target)
        builders.append({**entry, "installed_version": target.builder_version, "can_build": reason is None,
                         "reason": reason, "probe_target": target.slug, "runtime": plugin.runtime,
                         "precisions_native": sorted(caps.native),
                         "precisions_via_transform": sorted(caps.via_transform),
                         "target_kinds": sorted(caps.target_kinds), "needs_gpu": caps.needs_gpu,
                         "engines_run_on": caps.runs_on})
        runnable.setdefault(plugin.runtime, EngineDescriptor(
            address=f"probe@{target.slug}", precision="fp32", builder=name, builder_version=target.builder_version,
            runtime=plugin.runtime, target=EngineTarget.of(target)))
    runtimes: list[dict[str, Any]] = []
    for name in plugins.names(plugins.RUNTIMES):
        try:
            runtime = plugins.runtime(name)
        except PluginError as e:
            runtimes.append({"name": name, "can_run": False, "reason": str(e)})
            continue
        installed = fp.runtime_version(name)
        engine = runnable.get(name)
        if installed is None:
            runtimes.append({"name": name, "installed_version": None, "can_run": False,
                             "reason": f"{name} is not installed"})
            continue
        if engine is None:
            runtimes.append({"name": name, "installed_version": installed, "can_run": False,
                             "reason": f"no installed builder makes engines for {name}"})
            continue
        compat = runtime.can_run(engine, fp)
        runtimes.append({"name": name, "installed_version": installed, "can_run": compat.ok,
                         "reason": None if compat.ok else compat.reason,
                         "probe_target": engine.address.split("@", 1)[1]})
    return {"fingerprint": fp.to_json(), "builders": builders, "runtimes": runtimes}
