"""Journey (issue 22.2): a GPU the user declares never silently receives a CPU engine.

The published demo has TensorRT-RTX engines (sm86; sm89 + sm120) and onnxruntime CPU engines. A Hopper GPU (sm90)
runs none of the RTX engines (TensorRT-RTX does not support CC 9.0), so before this fix `pull --gpu sm90` wrote the
onnxruntime CPU model to a `.engine` path with exit 0, and `pull --all --gpus sm90` wrote `model.sm90.onnx`. A CPU
engine is now taken for a declared GPU only when the user says so (`pull --allow-cpu`; `none` among `--gpus`);
otherwise exit 4, nothing written, every candidate with its reason.
"""

from __future__ import annotations

import json

from tests.journeys.conftest import Demo

CPU_REFUSAL = "a CPU engine, and the deployment declares GPU sm90"


def _published(demo: Demo, model: str) -> set[str]:
    listing, _ = demo.run_json("ls", "--registry", str(demo.store), "--model", model)
    return {a["address"] for a in listing["artifacts"]}


def test_pull_for_a_declared_gpu_refuses_the_cpu_engine_and_lists_every_candidate(demo_published, tmp_path):
    out = tmp_path / "det.engine"
    proc = demo_published.run("pull", "ocr-det", "--gpu", "sm90", "-o", str(out), "--registry",
                              str(demo_published.store), check=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert not out.exists() and not list(tmp_path.iterdir())
    for address in _published(demo_published, "ocr-det"):
        assert address in proc.stderr  # every candidate, with its reason
    assert "TensorRT-RTX runtimes do not support compute capability 9.0" in proc.stderr
    assert proc.stderr.count(CPU_REFUSAL) == 2  # the fp32 and the fp16 onnxruntime CPU engines
    assert "--allow-cpu" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_pull_for_a_declared_gpu_takes_a_cpu_engine_only_when_asked(demo_published, tmp_path):
    out = tmp_path / "det.onnx"
    chosen, proc = demo_published.run_json("pull", "ocr-det", "--gpu", "sm90", "--allow-cpu", "--precision", "fp32",
                                           "-o", str(out), "--registry", str(demo_published.store))
    assert chosen["address"] == "ocr-det/fp32/default@cpu+ort1.31"
    assert chosen["metadata"]["target"]["device"] == "cpu"
    assert "accepted for the declared GPU sm90 (--allow-cpu)" in chosen["reason"]
    assert out.stat().st_size == chosen["metadata"]["engine"]["size"]

    # a GPU engine the declared GPU runs is still chosen first, --allow-cpu or not
    rtx, _ = demo_published.run_json("pull", "ocr-det", "--gpu", "sm86", "--allow-cpu", "--precision", "fp32",
                                     "--registry", str(demo_published.store))
    assert rtx["address"] == "ocr-det/fp32/default@sm86+rtx1.7"
    # a machine declared without a GPU takes the CPU engine as before
    cpu, _ = demo_published.run_json("pull", "ocr-det", "--gpu", "none", "--precision", "fp32", "--registry",
                                     str(demo_published.store))
    assert cpu["address"] == "ocr-det/fp32/default@cpu+ort1.31"


def test_pull_all_for_a_declared_gpu_writes_nothing_unless_none_is_declared_too(demo_published, tmp_path):
    out = tmp_path / "models"
    proc = demo_published.run("pull", "--all", "ocr-det", "--gpus", "sm90", "-o", str(out), "--registry",
                              str(demo_published.store), check=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert not out.exists()
    assert "ocr-det on sm90" in proc.stderr and CPU_REFUSAL in proc.stderr
    assert "--gpus sm90,none" in proc.stderr

    # `none` among the GPUs: the deployment accepts CPU engines; one CPU file serves the CPU and the sm90 machines
    filled, _ = demo_published.run_json("pull", "--all", "ocr-det", "--gpus", "sm90,none", "--precision", "fp32",
                                        "-o", str(out), "--registry", str(demo_published.store))
    (engine,) = filled["engines"]
    assert engine["address"] == "ocr-det/fp32/default@cpu+ort1.31"
    assert engine["gpus"] == ["cpu", "sm90"]
    assert sorted(p.name for p in (out / "ocr-det").iterdir()) == ["model.cpu-sm90.onnx"]

    # GPUs an RTX engine serves get it; the one that has none is refused the CPU engine
    mixed = demo_published.run("pull", "--all", "ocr-det", "--gpus", "sm86,sm90", "--precision", "fp32", "-o",
                               str(tmp_path / "mixed"), "--registry", str(demo_published.store), check=False)
    assert mixed.returncode == 4 and "ocr-det on sm90" in mixed.stderr and "ocr-det on sm86" not in mixed.stderr
    assert not (tmp_path / "mixed").exists()


def test_export_triton_for_a_declared_gpu_refuses_the_cpu_engine(demo_published, tmp_path):
    repo = tmp_path / "repo"
    base = ("export", "triton", "ocr-det", "--repo", str(repo), "--precision", "fp32", "--runtime", "ort1.31",
            "--registry", str(demo_published.store))
    proc = demo_published.run(*base, "--gpus", "sm90", "--json", check=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert CPU_REFUSAL in error["message"]
    assert not repo.exists()

    # the CPU engine for the GPUs too, when asked: Triton's onnxruntime backend on its CPU instance kind
    done, _ = demo_published.run_json(*base, "--gpus", "sm90,none")
    (model,) = done["models"]
    assert model["backend"] == "onnxruntime"
    assert "kind: KIND_CPU" in (repo / "ocr-det" / "config.pbtxt").read_text()
