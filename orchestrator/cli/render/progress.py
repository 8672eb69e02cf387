"""Progress for long runs: a rich live view on a terminal, one plain line per finished node otherwise."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from orchestrator.cli.common import console_err
from orchestrator.core.graph import Node
from orchestrator.run.executor import NodeReport, RunSummary

_MARK = {"done": "[green]✓[/]", "cached": "[dim]=[/]", "failed": "[red]✗[/]", "skipped": "[yellow]-[/]",
         "pending": "[cyan]…[/]", "interrupted": "[red]![/]"}


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
            self.overall = self.progress.add_task(title, total=total)

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
                self.tasks[node.id] = self.progress.add_task(f"  {node.id}", total=None)
            return
        if self.progress:
            task = self.tasks.pop(node.id, None)
            if task is not None:
                self.progress.remove_task(task)
            self.progress.advance(self.overall)
        if self.quiet or report is None:
            return
        line = f"{_MARK[report.status]} {node.id}"
        if report.status in ("done",):
            line += f" [dim]({report.seconds:.1f}s)[/]"
        if report.reason and report.status != "cached":
            first = report.reason.splitlines()[0]
            line += f" [dim]— {first}[/]"
        self.console.print(line, highlight=False)


def render_summary(summary: RunSummary, verb: str) -> str:
    c = summary.counts()
    parts = [f"{c.get(k, 0)} {k}" for k in ("done", "cached", "failed", "skipped", "pending") if c.get(k)]
    state = "interrupted" if summary.interrupted else ("ok" if summary.ok else "FAILED")
    return f"{verb} {state}: {', '.join(parts) or 'nothing to do'} in {summary.seconds:.1f}s"
