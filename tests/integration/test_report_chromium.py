"""The static HTML report, opened in a real headless Chromium (Debian package ``chromium``).

Set ``ORCHESTRATE_UPDATE_SCREENSHOT=1`` to copy the screenshot to docs/report-screenshot.png.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli.render.report import render_report
from orchestrator.gates.metrics import compare_output
from orchestrator.gates.stats import latency_stats
from orchestrator.gates.tolerances import DEFAULT_TOLERANCES
from orchestrator.gates.verdict import BenchmarkVerdict, CaseVerdict, ParityVerdict, ShapeBenchmark

pytestmark = pytest.mark.integration

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def parity_json(precision: str, scale: float, seed: int, noise: float = 1e-5) -> dict:
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((2, 4, 10))
    eng = ref * scale + rng.standard_normal(ref.shape) * noise
    ref_mask = rng.random((2, 1, 32, 32))
    outputs = (compare_output("logits", zip(eng, ref), DEFAULT_TOLERANCES[precision], classifier_k=5),
               compare_output("mask", zip(ref_mask * scale, ref_mask), DEFAULT_TOLERANCES[precision]))
    return ParityVerdict(precision, (CaseVerdict("opt", {"x": (4, 3, 224, 224)}, 2, outputs),)).to_json()


def bench_json(median_ms: float, seed: int, max_p95_ms: float | None = None) -> dict:
    samples = tuple(np.random.default_rng(seed).lognormal(np.log(median_ms), 0.08, 200).tolist())
    stats = latency_stats(samples, batch=4)
    shape = ShapeBenchmark("opt", {"x": (4, 3, 224, 224)}, 4, "cuda_event", stats, stats, samples, samples)
    reasons = (f"opt: end-to-end p95 {stats.p95_ms:.3f} ms > max_p95_ms {max_p95_ms:g} ms",) \
        if max_p95_ms is not None and stats.p95_ms > max_p95_ms else ()
    return BenchmarkVerdict((shape,), reasons, {"max_p95_ms": max_p95_ms}).to_json()


def cells() -> list[dict]:
    def cell(precision, target, status, parity=None, bench=None, note=None):
        return {"address": f"vision/classifier@1.0/{precision}/default/{target}", "model": "classifier",
                "precision": precision, "profile_set": "default", "target": target, "status": status,
                "parity": parity, "benchmark": bench, "note": note}

    return [
        cell("fp32", "sm89+trt10.13", "passed", parity_json("fp32", 1.0, 1), bench_json(2.1, 1)),
        cell("fp32", "sm120+rtx1.7", "passed", parity_json("fp32", 1.0, 2), bench_json(1.4, 2)),
        cell("fp16", "sm89+trt10.13", "failed", parity_json("fp16", 1.0, 3, noise=2e-3), bench_json(1.234, 3, 1.0)),
        cell("fp16", "sm120+rtx1.7", "pending", note="built on a CPU runner; needs sm120 to gate"),
        cell("int8", "sm89+trt10.13", "failed", parity_json("int8", 1.5, 4), bench_json(0.6, 4)),
    ]


def chromium(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="/usr/bin/chromium not installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(tmp_path):
    page = render_report(cells(), tmp_path / "report.html", title="Engine matrix — demo")
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "<script" not in text

    dom = chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert '<table class="matrix" id="matrix">' in html
    assert html.count('<td class="cell"') == 5 and html.count('class="empty"') == 1  # fp32 row... int8 x rtx
    assert '<th>sm89+trt10.13</th>' in html and '<th>sm120+rtx1.7</th>' in html
    assert html.count('data-status="failed"') == 2 and html.count('data-status="pending"') == 1
    assert "built on a CPU runner; needs sm120 to gate" in html
    assert "max_p95_ms 1 ms" in html
    assert "opt/logits: " in html and "violate |a-b| &lt;= 0.1 + 0.1*|b|" in html
    assert html.count("passed</span>") >= 3
    assert html.count('aria-label="latency histogram"') == 4
    assert html.count('aria-label="parity error per output"') == 4

    shot = tmp_path / "report.png"
    run = chromium(f"--screenshot={shot}", "--window-size=1400,900", page.as_uri(), tmp_path=tmp_path)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank 1400x900 page is ~5 KB
    if os.environ.get("ORCHESTRATE_UPDATE_SCREENSHOT") == "1":
        docs = Path(__file__).resolve().parents[2] / "docs" / "report-screenshot.png"
        shutil.copyfile(shot, docs)
