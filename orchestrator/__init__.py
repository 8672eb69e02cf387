"""trt-orchestrator: YAML manifests in, gated and fingerprinted TensorRT engines out.

The public Python API (imported lazily, so ``import orchestrator`` stays cheap)::

    project = orchestrator.load_project(["manifests/demo.yaml"])
    plan = orchestrator.core.plan(project)
    orchestrator.build(project, plan); orchestrator.gate(project, plan); orchestrator.run.publish(project, plan)
    result = orchestrator.pull("ocr-det", registry=RegistryConfig(path="artifacts"), precision="fp16", out="det.plan")
    result.path, result.metadata
"""

__version__ = "0.1.0"

_API = ("load_project", "plan", "build", "gate", "publish", "pull", "report_cells", "PullResult", "Project")
__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    if name in _API:
        from orchestrator.app import pipeline as api
        return getattr(api, name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
