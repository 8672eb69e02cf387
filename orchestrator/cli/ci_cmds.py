"""ci github, ci k8s: the same shards, emitted for GitHub Actions or a Kubernetes Indexed Job."""

from __future__ import annotations

import os

import click
from rich.markup import escape

from orchestrator.app import ci as ci_verbs
from orchestrator.app.project import load_project
from orchestrator.cli.common import cache_option, console, manifests_argument

WORKFLOW_PATH = ".github/workflows/engines.yml"


@click.group()
def ci() -> None:
    """Generate CI that fans the plan's shards out to runners."""


def _report(written: list[str]) -> None:
    for dest in written:
        console().print(f"wrote {escape(os.path.relpath(dest))}")


@ci.command()
@manifests_argument
@click.option("-o", "--out", default=None, help=f"Workflow path [default: {WORKFLOW_PATH}].")
@click.option("--tool-spec", default="trt-orchestrator", show_default=True,
              help="What the jobs `pip install` (a version pin, a git URL, or `.` for this repository).")
@click.option("--python", "python_version", default="3.11", show_default=True)
@click.option("--repo-root", default=".", type=click.Path(file_okay=False, exists=True), show_default=True)
def github(manifests, out, tool_spec, python_version, repo_root):
    """Write a GitHub Actions workflow (and .github/actionlint.yaml with the runner labels)."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    files = ci_verbs.workflow_files("github", list(manifests), repo_root, tool_spec=tool_spec,
                                    python=python_version)
    _report(ci_verbs.write_files(files, repo_root, out, WORKFLOW_PATH))


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
    project = load_project(manifests, cache_dir=cache_dir)
    files = ci_verbs.plan_files("k8s-indexed-job", project, image=image, namespace=namespace, output_path=out)
    _report(ci_verbs.write_files(files, ".", None, out))
