"""Everything user-given or tool-given that the CLI prints through rich is escaped (issue 11): install hints
keep their extras, markup-like names print as written."""

from __future__ import annotations

from rich.console import Console

from orchestrator.cli.render.doctor import render_doctor
from orchestrator.cli.render.progress import node_line, render_summary
from orchestrator.cli.render.report import summary_table
from orchestrator.run.executor import NodeReport, RunSummary

HINT = "pip install 'trt-orchestrator[ort]'"
HOSTILE = "det[/][bold]x[link=https://evil.example]y"


def printed(renderable) -> str:
    console = Console(width=300, record=True, color_system=None, highlight=False)
    console.print(renderable)
    return console.export_text()


def test_progress_lines_keep_hints_and_names():
    skipped = NodeReport(f"build:{HOSTILE}", "build", "skipped", reason=f"onnxruntime is not installed ({HINT})")
    text = printed(node_line(skipped.node, skipped))
    assert HINT in text and HOSTILE in text
    failed = NodeReport(f"gate:parity:{HOSTILE}", "gate:parity", "done", data={
        "status": "failed", "reasons": [f"opt/{HOSTILE}: cosine similarity 0.5 < 0.99", "two"]})
    text = printed(node_line(failed.node, failed))
    assert text.startswith(f"✗ gate:parity:{HOSTILE} gate failed — opt/{HOSTILE}: cosine similarity 0.5 < 0.99")
    assert "(+1 more)" in text
    noisy = NodeReport("gate:benchmark:m", "gate:benchmark", "pending", reason="benchmark noisy: x",
                       data={"status": "noisy", "reasons": ["opt: max_p95_ms: 2 of 5 blocks fail it [x]"]})
    assert printed(node_line(noisy.node, noisy)).startswith("~ gate:benchmark:m noisy — opt: max_p95_ms: 2 of 5 "
                                                            "blocks fail it [x]")


def test_summary_line_never_says_ok_with_a_failed_gate():
    summary = RunSummary([NodeReport("gate:parity:a", "gate:parity", "done", data={"status": "failed"})], 1.0)
    assert render_summary(summary, "gate", failed_gates=1) == "gate FAILED: 1 done in 1.0s; 1 gate(s) failed"
    assert render_summary(summary, "gate").startswith("gate ok: ")
    assert "1 benchmark(s) noisy" in render_summary(summary, "gate", noisy_gates=1)


def test_doctor_and_report_tables_escape():
    report = {"fingerprint": {"os": "linux", "arch": "x86_64", "driver_version": None, "cuda_driver_version": None,
                              "gpus": [], "runtimes": {"onnxruntime": {"version": "1.31.1",
                                                                       "features": ["CPUExecutionProvider"]}}},
              "builders": [{"name": "onnxruntime", "installed_version": None, "can_build": False,
                            "reason": f"onnxruntime 1.31 is not installed ({HINT})"}],
              "runtimes": [{"name": "onnxruntime", "installed_version": None, "can_run": False,
                            "reason": f"not installed: {HINT}"}]}
    console = Console(width=300, record=True, color_system=None, highlight=False)
    render_doctor(report, console)
    text = console.export_text()
    assert text.count(HINT) == 2 and "['CPUExecutionProvider']" in text
    cell = {"address": f"{HOSTILE}/fp16/default@cpu+ort1.31", "model": HOSTILE, "precision": "fp16",
            "profile_set": "[red]p[/]", "target": "cpu+ort1.31", "status": "skipped",
            "note": f"not built: onnxruntime 1.31 is not installed ({HINT})", "parity": None, "benchmark": None}
    text = printed(summary_table([cell]))
    assert HINT in text and HOSTILE in text and "[red]p[/]" in text
