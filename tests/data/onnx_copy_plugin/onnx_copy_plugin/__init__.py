"""A third-party trt-orchestrator plugin pair (a test fixture that only uses the public contracts).

- ``builder`` (entry point ``onnx-copy`` in ``trt_orchestrator.builders``): its "engine" is a byte copy of the
  ONNX model it is given; fp32 only, ``device: cpu`` targets; address slug ``copy`` (``...@cpu+copy1.0``).
- ``runtime`` (entry point ``onnx-copy-ort`` in ``trt_orchestrator.runtimes``): runs those copies on
  onnxruntime's CPU execution provider; ``pull --runtime copyort1.0``.
- ``tidy_builder`` (entry point ``onnx-tidy`` in ``trt_orchestrator.builders``): a builder with no runtime of its own;
  its engines (the model tidied) run on trt-orchestrator's ``onnxruntime`` runtime, so it speaks onnxruntime's
  versions (``tidy.py`` says why).

Versions: the builder's version is this package's version, and the runtime reports the same version, so
``target.builder_version`` (e.g. "1.0"), the engine's recorded ``builder_version`` (e.g. "1.0.0") and the
runner's installed ``onnx-copy-ort`` version live in one namespace and ``can_run`` compares major.minor.

Only ``orchestrator.core.*``, ``orchestrator.contracts.*`` and ``orchestrator.errors`` are imported from the
project; onnx/onnxruntime are imported inside methods.
"""

from __future__ import annotations

from onnx_copy_plugin.builder import OnnxCopyBuilder
from onnx_copy_plugin.runtime import OnnxCopyRuntime
from onnx_copy_plugin.tidy import OnnxTidyBuilder
from onnx_copy_plugin.versions import plugin_version

builder = OnnxCopyBuilder()
runtime = OnnxCopyRuntime()
tidy_builder = OnnxTidyBuilder()

__version__ = plugin_version()
__all__ = ["builder", "runtime", "tidy_builder", "OnnxCopyBuilder", "OnnxCopyRuntime", "OnnxTidyBuilder",
           "plugin_version"]
