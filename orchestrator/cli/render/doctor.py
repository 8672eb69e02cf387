"""`orchestrate doctor` on a terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def render_doctor(report: dict[str, Any], console: Console) -> None:
    fp = report["fingerprint"]
    console.print(f"[bold]runner[/] {escape(fp['os'])}/{escape(fp['arch'])}  "
                  f"driver {escape(str(fp['driver_version'] or '-'))}  "
                  f"CUDA (driver) {escape(str(fp['cuda_driver_version'] or '-'))}")
    if fp["gpus"]:
        for g in fp["gpus"]:
            console.print(f"  GPU {g['index']}: {escape(str(g['name']))}  CC {escape(str(g['compute_capability']))}  "
                          f"{g['memory_mib']} MiB")
    else:
        console.print("  no NVIDIA GPU (NVML found no driver)")
    cpu = fp.get("cpu")
    if isinstance(cpu, dict):  # what a CPU engine's verdict holds for (docs/gates.md, "CPU instruction sets")
        isa = " ".join(str(f) for f in cpu.get("features") or ()) or "none of the kernel-selecting features"
        where = f" (from {cpu['source']})" if cpu.get("source") else ""
        console.print(f"  CPU: {escape(str(cpu.get('model') or '-'))}  ISA "
                      f"{escape(isa) if cpu.get('source') else 'unknown'}{escape(where)}")
    installed = [f"{escape(name)} {escape(str(rt['version']))}" + (f" {escape(str(rt['features']))}"
                                                                   if rt["features"] else "")
                 for name, rt in fp["runtimes"].items()]
    console.print("  " + ("  ".join(installed) if installed else "no runtime installed"), markup=True)
    table = Table("builder", "version", "build here?", "precisions (native / via transform)", "engines run on",
                  box=None, header_style="bold")
    for b in report["builders"]:
        ok = "[green]yes[/]" if b["can_build"] else f"[red]no[/] — {escape(str(b['reason']))}"
        prec = (f"{', '.join(b.get('precisions_native', [])) or '-'} / "
                f"{', '.join(b.get('precisions_via_transform', [])) or '-'}") if "precisions_native" in b else ""
        table.add_row(escape(b["name"]), escape(b["installed_version"] or "-"), ok, escape(prec),
                      escape(b.get("engines_run_on", "")))
    console.print(table)
    table = Table("runtime", "version", "run here?", box=None, header_style="bold")
    for r in report["runtimes"]:
        table.add_row(escape(r["name"]), escape(r.get("installed_version") or "-"),
                      "[green]yes[/]" if r["can_run"] else f"[red]no[/] — {escape(str(r['reason']))}")
    console.print(table)
