"""ci github, ci k8s: the same shards, emitted for GitHub Actions or a Kubernetes Indexed Job."""

from __future__ import annotations

import os
import sys

import click

from orchestrator import plugins

from orchestrator.app import pipeline as api
from orchestrator.cli.common import cache_option, console, manifests_argument


@click.group()
def ci() -> None:
    """Generate CI that fans the plan's shards out to runners."""


def _write(files: dict[str, str], root: str, out: str | None, default_key: str) -> None:
    for rel, text in sorted(files.items()):
        dest = out if (out and rel == default_key) else os.path.join(root, rel)
        if dest == "-":
            sys.stdout.write(text)
            continue
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        tmp = f"{dest}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, dest)
        console().print(f"wrote {os.path.relpath(dest)}")


@ci.command()
@manifests_argument
@click.option("-o", "--out", default=None, help="Workflow path [default: .github/workflows/engines.yml].")
@click.option("--tool-spec", default="trt-orchestrator", show_default=True,
              help="What the jobs `pip install` (a version pin, a git URL, or `.` for this repository).")
@click.option("--python", "python_version", default="3.11", show_default=True)
@click.option("--repo-root", default=".", type=click.Path(file_okay=False, exists=True), show_default=True)
def github(manifests, out, tool_spec, python_version, repo_root):
    """Write a GitHub Actions workflow (and .github/actionlint.yaml with the runner labels)."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    emitter = plugins.load(plugins.CI, "github")
    module = sys.modules[type(emitter).__module__]
    files = module.generate_files(list(manifests), repo_root, tool_spec=tool_spec, python=python_version)
    _write(files, repo_root, out, module.WORKFLOW_PATH)


@ci.command()
@manifests_argument
@click.option("-o", "--out", default="k8s/engines.yaml", show_default=True)
@click.option("--image", default="trt-orchestrator:0.1.0", show_default=True, help="Container image with orchestrate.")
@click.option("--namespace", default=None)
@cache_option
def k8s(manifests, out, image, namespace, cache_dir):
    """Write the plan's shards as Kubernetes Indexed Jobs (one per runner label set) plus a ConfigMap."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    project = api.load_project(manifests, cache_dir=cache_dir)
    the_plan = api.plan(project)
    emitter = plugins.load(plugins.CI, "k8s-indexed-job")
    files = emitter.render(the_plan, [api.display_path(m.file) for m in project.manifests], image=image,
                           namespace=namespace, output_path=out)
    _write(files, ".", None, out)


COMMANDS = [ci]
