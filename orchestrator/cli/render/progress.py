"""Progress for long runs: a rich live view on a terminal, one plain line per finished node otherwise.

Every node id, reason and path printed here is escaped: they carry manifest names and tool messages such as
``pip install 'trt-orchestrator[ort]'``, which rich would otherwise read as markup (and drop ``[ort]``).

A gate node that ran but whose engine failed the gate is a finished node with a failed verdict: it gets a red
✗ and its first reason, not the ✓ of a node that merely completed. A noisy benchmark (no verdict: the timing
blocks disagreed past the spread limit) gets ``~``.
"""

from __future__ import annotations

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from orchestrator.cli.common import console_err
from orchestrator.core.graph import Node
from orchestrator.run.executor import NodeReport, RunSummary

_MARK = {"done": "[green]✓[/]", "cached": "[dim]=[/]", "failed": "[red]✗[/]", "skipped": "[yellow]-[/]",
         "pending": "[cyan]…[/]", "interrupted": "[red]![/]"}
GATE_FAILED_MARK = "[red]✗[/]"
NOISY_MARK = "[yellow]~[/]"


def verdict_of(report: NodeReport) -> str | None:
    """A gate node's verdict ("passed", "failed", "noisy"), None for other nodes and gates without one."""
    if not report.kind.startswith("gate:"):
        return None
    status = report.data.get("status") if isinstance(report.data, dict) else None
    return str(status) if status in ("passed", "failed", "noisy") else None


def first_reason(report: NodeReport) -> str:
    reasons = report.data.get("reasons") if isinstance(report.data, dict) else None
    if reasons:
        return str(reasons[0])
    return report.reason.splitlines()[0] if report.reason else ""


def node_line(node_id: str, report: NodeReport) -> str:
    """One finished node as rich markup (every user- or tool-given text escaped)."""
    verdict = verdict_of(report)
    if verdict == "failed" and report.status in ("done", "cached"):
        line = f"{GATE_FAILED_MARK} {escape(node_id)} [red]gate failed[/]"
        if report.status == "cached":
            line += " [dim](cached verdict)[/]"
        reasons = report.data.get("reasons") or []
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        first = first_reason(report)
        return line + (f" — {escape(first)}{more}" if first else "")
    if verdict == "noisy":
        return f"{NOISY_MARK} {escape(node_id)} [yellow]noisy[/] — {escape(first_reason(report))}"
    line = f"{_MARK.get(report.status, '?')} {escape(node_id)}"
    if report.status == "done":
        line += f" [dim]({report.seconds:.1f}s)[/]"
    if report.reason and report.status != "cached":
        line += f" [dim]— {escape(report.reason.splitlines()[0])}[/]"
    return line


class ProgressView:
    def __init__(self, total: int, title: str, *, quiet: bool = False) -> None:
        self.console = console_err()
        self.live = self.console.is_terminal and not quiet
        self.quiet = quiet
        self.total = total
        self.progress = None
        self.tasks: dict[str, TaskID] = {}
        if self.live:
            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(), console=self.console,
                                     transient=True)
            self.overall = self.progress.add_task(escape(title), total=total)

    def __enter__(self) -> ProgressView:
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress:
            self.progress.stop()

    def event(self, event: str, node: Node, report: NodeReport | None) -> None:
        if event == "start":
            if self.progress:
                self.tasks[node.id] = self.progress.add_task(f"  {escape(node.id)}", total=None)
            return
        if self.progress:
            task = self.tasks.pop(node.id, None)
            if task is not None:
                self.progress.remove_task(task)
            self.progress.advance(self.overall)
        if self.quiet or report is None:
            return
        self.console.print(node_line(node.id, report), highlight=False)


def gate_counts(summary: RunSummary) -> dict[str, int]:
    """Gate verdicts in a run: passed / failed / noisy (pending and skipped gates have none)."""
    counts: dict[str, int] = {}
    for r in summary.reports:
        verdict = verdict_of(r)
        if verdict is not None:
            counts[verdict] = counts.get(verdict, 0) + 1
    return counts


def render_summary(summary: RunSummary, verb: str, *, failed_gates: int = 0, noisy_gates: int = 0) -> str:
    """The closing line (plain text: escape it before printing through rich). It never says "ok" when a node
    failed or a gate ran and the engine failed it."""
    c = summary.counts()
    parts = [f"{c.get(k, 0)} {k}" for k in ("done", "cached", "failed", "skipped", "pending", "interrupted")
             if c.get(k)]
    if summary.interrupted:
        state = "interrupted"
    elif not summary.ok or failed_gates:
        state = "FAILED"
    else:
        state = "ok"
    line = f"{verb} {state}: {', '.join(parts) or 'nothing to do'} in {summary.seconds:.1f}s"
    if summary.interrupted:
        kept = c.get("done", 0) + c.get("cached", 0)
        line += (f"; kept the {kept} finished node(s), nothing partial: the same command resumes from them"
                 if kept else "; nothing finished, nothing partial kept")
    if failed_gates:
        line += f"; {failed_gates} gate(s) failed"
    if noisy_gates:
        line += (f"; {noisy_gates} benchmark(s) noisy (no verdict, not cached: run `orchestrate gate` again, "
                 "ideally on a quieter runner)")
    return line
