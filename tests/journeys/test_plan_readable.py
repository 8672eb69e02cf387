"""Journey (issue 22, point 7): a re-gate's plan, read on an 80-column terminal.

A new user loosens the orientation classifier's fp16 `atol`. Each of its fp16 cells must be re-gated, and `plan`
says so with one line for the one setting that changed, named as the manifest field, not once per resolved copy
of the tolerance plus a `source:` trail; on an 80-column terminal no line is wider than the terminal and the
reason is not squeezed into a column a few letters wide.
"""

from __future__ import annotations

ORIENTATION_FP16 = {"orientation/fp16/default@cpu+ort1.31", "orientation/fp16/default@sm86+rtx1.7",
                    "orientation/fp16/default@sm89-sm120+rtx1.7"}
CHANGE = "gate.parity.tolerances.fp16.atol: 0.01 -> 0.02"


def loosen_fp16_atol(demo, override: str = "{atol: 0.02, rtol: 0.01}") -> None:
    """The orientation model's own gate: its fp16 parity tolerance (a YAML flow mapping)."""
    text = demo.manifest.read_text()
    anchor = "    classifier_outputs: {fetch_name_0: 1}"
    assert text.count(anchor) == 1
    line = next(ln for ln in text.splitlines() if ln.startswith(anchor))
    demo.manifest.write_text(text.replace(line, f"{line}\n    gate: {{parity: {{tolerances: {{fp16: {override}}}}}}}"))


def test_a_regate_names_each_changed_setting_once(published_copy):
    demo = published_copy
    loosen_fp16_atol(demo)
    plan, _ = demo.run_json("plan", str(demo.manifest))
    regate = {c["address"]: c for c in plan["cells"] if c["status"] == "regate"}
    assert set(regate) == ORIENTATION_FP16
    for cell in regate.values():
        assert cell["changes"] == [CHANGE], cell["changes"]
        assert cell["reason"] == CHANGE


def test_the_plan_reads_at_80_columns(published_copy):
    demo = published_copy
    loosen_fp16_atol(demo)
    out = demo.run("plan", str(demo.manifest), env_extra={"COLUMNS": "80"}).stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(ln for ln in lines if len(ln) > 80)
    assert "source" not in out
    for address in ORIENTATION_FP16:
        at = next(i for i, line in enumerate(lines) if address in line)
        assert "re-gate" in lines[at]
        # its reason, whole, beside the cell or on the next line
        assert lines[at].endswith(CHANGE) or lines[at + 1].strip() == CHANGE, lines[at:at + 3]
    assert out.count(CHANGE) == len(ORIENTATION_FP16)
    assert "Plan: 0 to build, 0 to rebuild, 3 to re-gate, 15 up to date, 0 blocked" in out
