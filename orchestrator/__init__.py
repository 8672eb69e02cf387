"""trt-orchestrator: YAML manifests in, gated and fingerprinted TensorRT engines out."""

__version__ = "0.1.0"
