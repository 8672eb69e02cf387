"""The commands of ``orchestrate`` (the full path: ``orchestrator.cli.main`` enters here when no saved answer
serves). One place (``main``) catches the project's errors and maps them to exit codes; each command is a few lines
that call an ``orchestrator.app`` verb and render the result.

Commands load lazily: ``orchestrate plan`` imports the plan command's module (and what it needs), not the
report renderer or the registry client. That is click's documented lazy-group pattern: the command table
below names each command's module, imported when the command runs or its help is shown.
"""

from __future__ import annotations

import difflib
import importlib
import sys

import click

from orchestrator import fastpath
from orchestrator.cli.common import (
    console_err,
    emit_json_error,
    finish_recording,
    own_process,
    release_process,
    set_recorder,
)
from orchestrator.errors import ExitCode, ManifestError, OrchestratorError

# command -> "module:attribute"
COMMANDS = {
    "validate": "orchestrator.cli.plan_cmds:validate",
    "plan": "orchestrator.cli.plan_cmds:plan",
    "graph": "orchestrator.cli.plan_cmds:graph",
    "explain": "orchestrator.cli.plan_cmds:explain",
    "schema": "orchestrator.cli.plan_cmds:schema",
    "build": "orchestrator.cli.build_cmds:build",
    "gate": "orchestrator.cli.gate_cmds:gate",
    "doctor": "orchestrator.cli.build_cmds:doctor",
    "publish": "orchestrator.cli.registry_cmds:publish",
    "ls": "orchestrator.cli.registry_cmds:ls_cmd",
    "show": "orchestrator.cli.registry_cmds:show",
    "pull": "orchestrator.cli.deploy_cmds:pull",
    "export": "orchestrator.cli.deploy_cmds:export",
    "retention": "orchestrator.cli.registry_cmds:retention",
    "store": "orchestrator.cli.store_cmds:store",
    "report": "orchestrator.cli.report_cmds:report",
    "ci": "orchestrator.cli.ci_cmds:ci",
    "upgrade-check": "orchestrator.cli.upgrade_cmds:upgrade_check",
    "identify": "orchestrator.cli.trust_cmds:identify",
    "adopt": "orchestrator.cli.trust_cmds:adopt",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        """click suggests close command names from the commands it has loaded (``Group.commands``), which a lazy
        group never fills: an unknown name is refused here with suggestions from the table, no module imported."""
        name = args[0] if args else ""
        if name and name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            close = difflib.get_close_matches(name, COMMANDS)
            suggestion = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{suggestion}")
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="trt-orchestrator", prog_name="orchestrate")
def cli() -> None:
    """Turn YAML manifests into gated, fingerprinted TensorRT engines.

    \b
    Typical flow:
      orchestrate validate manifests/demo.yaml
      orchestrate plan manifests/demo.yaml
      orchestrate build manifests/demo.yaml
      orchestrate gate manifests/demo.yaml
      orchestrate publish manifests/demo.yaml
      orchestrate pull ocr-det --precision fp16 -o ocr-det.engine
    """


def main(argv: list[str] | None = None) -> None:
    """The one catch site: a command returns an ``ExitCode`` (or None for OK); our errors carry theirs. A command
    the fast path answers (``fastpath.COMMANDS``) is recorded: when it says what it read, its answer is kept."""
    own_process()
    try:
        _run(sys.argv[1:] if argv is None else list(argv))
    finally:
        release_process()


def _run(args: list[str]) -> None:
    if args and args[0] in fastpath.COMMANDS:
        set_recorder(fastpath.Recorder(args))
    try:
        code = cli.main(args=args, prog_name="orchestrate", standalone_mode=False)
    except click.exceptions.Abort:
        console_err().print("aborted")
        sys.exit(ExitCode.INTERRUPTED)
    except click.exceptions.Exit as e:  # --help / --version
        sys.exit(e.exit_code)
    except click.ClickException as e:  # usage errors: exit 2 with click's own message
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        console_err().print("interrupted")
        sys.exit(ExitCode.INTERRUPTED)
    except ManifestError as e:
        if not emit_json_error(e):
            for problem in e.problems:
                console_err().print(problem.render(), markup=False, highlight=False, emoji=False)
            console_err().print(f"{len(e.problems)} problem(s) found", style="bold red")
        sys.exit(e.exit_code)
    except OrchestratorError as e:
        if not emit_json_error(e):
            console_err().print(f"error: {e}", markup=False, highlight=False, emoji=False)
        sys.exit(e.exit_code)
    code = int(code) if isinstance(code, int) else ExitCode.OK
    finish_recording(code)
    sys.exit(code)
