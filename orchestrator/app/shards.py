"""What a CI shard checks first: the toolchain its plan asked for is the one this runner has.

`orchestrate ci verify-shard` runs as a shard's first step after installing: the exact builder/runtime versions
and the GPU its cells need (``pipeline.verify_shard_runner``), reported with the toolchain the plan resolved for the
shard (a container image, pinned wheels, or the runner's own install), so a job log says what it verified.
"""

from __future__ import annotations

from typing import Any

from orchestrator import plugins
from orchestrator.app.pipeline import verify_shard_runner
from orchestrator.app.project import Project
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.plan import Plan


def verify_shard(project: Project, the_plan: Plan, shard_id: str, fingerprint: RunnerFingerprint, *,
                 role: str = "build") -> dict[str, Any]:
    """Raises RunnerMismatchError naming each mismatched target (version, GPU, platform) and the shard's labels;
    else what was verified."""
    shard = the_plan.shard(shard_id)
    verify_shard_runner(project, the_plan, shard_id, fingerprint, role=role)
    installed: dict[str, str | None] = {}
    wanted: dict[str, str] = {}
    for name in shard.targets:
        target = next((c.target for c in project.graph.cells if c.target.name == name), None)
        if target is None:
            continue
        runtime = plugins.builder(target.builder).runtime
        installed[runtime] = fingerprint.runtime_version(runtime)
        wanted[f"{target.name} ({target.builder})"] = target.builder_version
    labels = shard.build_labels if role == "build" else (shard.gate_labels or shard.build_labels)
    return {"shard": shard.id, "role": role, "labels": list(labels), "toolchain": shard.toolchain.to_json(),
            "toolchain_text": shard.toolchain.describe(), "wanted": wanted, "installed": installed,
            "gpu": fingerprint.gpu_model or ("none" if not fingerprint.has_gpu else "declared"),
            "compute_capability": fingerprint.compute_capability, "platform": fingerprint.platform}
