"""trt-orchestrator: YAML manifests in, gated and fingerprinted TensorRT engines out.

The public Python API (the ``orchestrator.app`` verbs, resolved on first use so ``import orchestrator`` stays
cheap)::

    project = orchestrator.load_project(["manifests/demo.yaml"])
    plan = orchestrator.plan(project)
    orchestrator.build(project, plan); orchestrator.gate(project, plan); orchestrator.publish(project, plan)
    # registry=: a local store directory ("artifacts": relative to the working directory), a path, an
    # "oci://host[:port]/prefix" URL, or a RegistryConfig
    result = orchestrator.pull("ocr-det", registry="artifacts", precision="fp16", out="ocr-det.engine")
    result.path, result.metadata
    # a deployment directory for a mixed fleet (an init container), and a Triton model repository
    filled = orchestrator.pull_all(["ocr-det"], registry="oci://registry.internal/engines",
                                   gpus=["sm75", "sm86", "sm89"], out="/models")
    repo = orchestrator.export_triton(["ocr-det"], registry="artifacts", repo="/triton", runtime="triton:25.01",
                                      gpus=["sm75", "sm86", "sm89", "sm90"])
    repo.models[0].files  # ExportedFile(path, status, digest, ...)
    orchestrator.resolve_serving("triton:25.01").tensorrt  # '10.8.0.43'
    # nothing published fits this machine: build it here with the manifest's recipe, gated before it is written
    built = orchestrator.pull_or_build("ocr-det", manifest="manifests/demo.yaml", out="ocr-det.onnx")
    built.pulled or built.gate.status
    # upgrade rehearsal: which engines stop loading on the new stack, the rebuild set; build and gate it
    report = orchestrator.upgrade_check(project, from_="triton:25.11", to="triton:26.03")
    orchestrator.rehearse(report)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see (the package ships py.typed); at run time __getattr__ imports lazily
    from orchestrator.app.deploy import PullAllResult, PulledEngine, PullResult, pull, pull_all
    from orchestrator.app.doctor import diagnose
    from orchestrator.app.gating import gate
    from orchestrator.app.heal import BuildOnMiss, pull_or_build
    from orchestrator.app.matrix import report_cells
    from orchestrator.app.pipeline import build, plan, publish
    from orchestrator.app.project import Project, load_project
    from orchestrator.app.triton import ExportedFile, TritonExport, TritonModel, export_triton
    from orchestrator.core.model import RegistryConfig
    from orchestrator.core.serving import ServingStack, resolve_serving
    from orchestrator.plugins import RegistryRef

__version__ = "0.1.0"

# public name -> the app module that defines it
_API = {
    "load_project": "orchestrator.app.project",
    "Project": "orchestrator.app.project",
    "plan": "orchestrator.app.pipeline",
    "build": "orchestrator.app.pipeline",
    "gate": "orchestrator.app.gating",
    "publish": "orchestrator.app.pipeline",
    "pull": "orchestrator.app.deploy",
    "PullResult": "orchestrator.app.deploy",
    "pull_all": "orchestrator.app.deploy",
    "pull_or_build": "orchestrator.app.heal",
    "BuildOnMiss": "orchestrator.app.heal",
    "PullAllResult": "orchestrator.app.deploy",
    "PulledEngine": "orchestrator.app.deploy",
    "export_triton": "orchestrator.app.triton",
    "TritonExport": "orchestrator.app.triton",
    "TritonModel": "orchestrator.app.triton",
    "ExportedFile": "orchestrator.app.triton",
    "resolve_serving": "orchestrator.core.serving",
    "ServingStack": "orchestrator.core.serving",
    "upgrade_check": "orchestrator.app.upgrade",
    "UpgradeReport": "orchestrator.app.upgrade",
    "rehearse": "orchestrator.app.upgrade",
    "report_cells": "orchestrator.app.matrix",
    "diagnose": "orchestrator.app.doctor",
    "RegistryConfig": "orchestrator.core.model",
    "RegistryRef": "orchestrator.plugins",
}
# spelled out (not derived from _API) so linters and type checkers read it; a test keeps the two in step
__all__ = [
    "load_project", "Project", "plan", "build", "gate", "publish", "pull", "PullResult", "pull_all", "PullAllResult",
    "pull_or_build", "BuildOnMiss",
    "PulledEngine", "export_triton", "TritonExport", "TritonModel", "ExportedFile", "resolve_serving",
    "ServingStack", "upgrade_check", "UpgradeReport", "rehearse", "report_cells", "diagnose", "RegistryConfig",
    "RegistryRef", "__version__",
]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
