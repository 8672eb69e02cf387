"""trt-orchestrator: YAML manifests in, gated and fingerprinted TensorRT engines out.

The public Python API (the ``orchestrator.app`` verbs, resolved on first use so ``import orchestrator`` stays
cheap)::

    project = orchestrator.load_project(["manifests/demo.yaml"])
    plan = orchestrator.plan(project)
    orchestrator.build(project, plan); orchestrator.gate(project, plan); orchestrator.publish(project, plan)
    result = orchestrator.pull("ocr-det", registry=RegistryConfig(path="artifacts"), precision="fp16", out="det.plan")
    result.path, result.metadata
    # a deployment directory for a mixed fleet (an init container), and a Triton model repository
    filled = orchestrator.pull_all(["ocr-det"], registry=..., gpus=["sm75", "sm86", "sm89"], out="/models")
    repo = orchestrator.export_triton(["ocr-det"], registry=..., repo="/triton", runtime="triton:25.01",
                                      gpus=["sm75", "sm86", "sm89", "sm90"])
    repo.models[0].files  # ExportedFile(path, status, digest, ...)
    orchestrator.resolve_serving("triton:25.01").tensorrt  # '10.8.0.43'
    # upgrade rehearsal: which engines stop loading on the new stack, the rebuild set; build and gate it
    report = orchestrator.upgrade_check(project, from_="triton:25.11", to="triton:26.03")
    orchestrator.rehearse(report)
"""

from __future__ import annotations

import importlib
from typing import Any

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
}
__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
