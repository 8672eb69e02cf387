"""The project's exceptions and the exit codes they carry.

Every error a user can cause or meet derives from :class:`OrchestratorError`; the CLI catches that root in one
place (``orchestrator.cli.main``) and exits with the class's ``exit_code``. Anything else escaping is a bug and
keeps its traceback. Outcomes that are not errors (a gate ran and failed, a plan has changes) are ``ExitCode``
values the commands return.

Tree::

    OrchestratorError                  exit 1
    ├── ManifestError                  exit 1   every manifest problem, all at once (a list of Problem)
    ├── UsageError                     exit 2   the command line asks for something impossible
    ├── PluginError                    exit 1   a plugin failed to load or broke its contract
    ├── PlanError                      exit 1   a saved plan is unreadable, stale, or a shard id is unknown
    ├── RunnerMismatchError            exit 1   this runner's fingerprint cannot do the shard's work
    ├── BuildError                     exit 1   a builder or transform failed on one node
    ├── GateError                      exit 1   a gate could not run (not: a gate that ran and failed)
    ├── RefitError                     exit 1   a deployment's refit failed or does not match its gate's outputs
    ├── StoreError                     exit 1   a registry/store operation failed
    │   ├── InvalidMetadataError       exit 1   artifact metadata does not match the artifact-v1 schema
    │   ├── IntegrityError             exit 1   stored bytes do not match their digest
    │   ├── StoreUnavailableError      exit 1   the registry cannot be reached
    │   └── ArtifactNotFoundError      exit 1   no artifact by that address/digest
    ├── NoCompatibleEngineError        exit 4   pull/export found candidates, none can run there (each with why)
    ├── NoSpaceError                   exit 1   a write ran out of disk space (also an OSError, errno ENOSPC/EDQUOT)
    └── CIError                        exit 1   a CI workflow cannot be generated as asked
"""

from __future__ import annotations

import enum
import errno
from dataclasses import dataclass
from typing import Any


class ExitCode(enum.IntEnum):
    """Every exit status ``orchestrate`` uses."""

    OK = 0
    ERROR = 1  # manifest, build, registry, runner mismatch, ...
    USAGE = 2  # a usage error; also "changes to build" for `plan --detailed-exitcode`
    CHANGES = 2
    GATE_FAILED = 3  # a gate ran and the engine failed it
    NO_COMPATIBLE = 4  # pull / export triton: engines are published, none can run on the declared GPU/runtime
    INTERRUPTED = 130


class OrchestratorError(Exception):
    """Root of every error meant for the user. ``hint`` says how to fix it."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


@dataclass(frozen=True)
class Problem:
    """One manifest problem: where it is (file:line:col and the manifest path), what, and how to fix it."""

    file: str
    line: int | None
    column: int | None
    path: str
    message: str
    hint: str | None = None

    def location(self) -> str:
        if self.line is None:
            return self.file
        return f"{self.file}:{self.line}:{self.column or 1}"

    def render(self) -> str:
        where = f"{self.location()}: {self.path}: " if self.path else f"{self.location()}: "
        text = where + self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
        }


class ManifestError(OrchestratorError):
    """One or more manifest problems, reported together."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(
            problems, key=lambda p: (p.file, p.line or 0, p.column or 0, p.path, p.message)
        )
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in manifest"
        super().__init__(head + ":\n" + "\n".join(p.render() for p in self.problems))

    def __str__(self) -> str:
        return self.message


class UsageError(OrchestratorError):
    exit_code = ExitCode.USAGE


class PluginError(OrchestratorError):
    def __init__(self, plugin: str, problem: str, *, group: str | None = None, hint: str | None = None):
        self.plugin = plugin
        self.group = group
        self.problem = problem
        where = f"plugin {plugin!r}" + (f" (entry point group {group})" if group else "")
        super().__init__(f"{where}: {problem}", hint=hint)


class PlanError(OrchestratorError):
    pass


class RunnerMismatchError(OrchestratorError):
    pass


class BuildError(OrchestratorError):
    def __init__(self, message: str, *, node: str | None = None, log_tail: str | None = None,
                 hint: str | None = None):
        self.node = node
        self.log_tail = log_tail
        text = f"{node}: {message}" if node else message
        if log_tail:
            text += "\n--- log tail ---\n" + log_tail
        super().__init__(text, hint=hint)


class GateError(OrchestratorError):
    pass


class RefitError(OrchestratorError):
    """A stripped engine could not be refitted at deployment, or the refitted engine does not reproduce the outputs
    its gate recorded (``pull``, ``pull --all``, ``export triton``): nothing was written."""


class StoreError(OrchestratorError):
    pass


class InvalidMetadataError(StoreError):
    """Artifact metadata does not match the artifact-v1 schema. ``problems``: (json path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]], *, subject: str = "artifact metadata") -> None:
        self.problems = problems
        lines = [f"{subject} is invalid ({len(problems)} problem{'s' if len(problems) != 1 else ''}):"]
        lines += [f"  {path}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines),
                         hint="build metadata with orchestrator.metadata.new_metadata(); "
                              "schema: orchestrator/schemas/artifact-v1.schema.json")



class IntegrityError(StoreError):
    pass


class StoreUnavailableError(StoreError):
    pass


class ArtifactNotFoundError(StoreError):
    pass


class NoCompatibleEngineError(OrchestratorError):
    exit_code = ExitCode.NO_COMPATIBLE

    def __init__(self, message: str, *, rejections: list[tuple[str, str]], hint: str | None = None,
                 candidates: list[dict[str, Any]] | None = None):
        self.rejections = rejections
        # the same candidates, machine-readable (``--json``): address, record key, version, precision, target,
        # runtime, reason
        self.candidates = candidates or []
        lines = [message] + [f"  - {who}: {why}" for who, why in rejections]
        super().__init__("\n".join(lines), hint=hint)


class NoSpaceError(OrchestratorError, OSError):
    """A write failed for want of space: ``path`` (the folder written to), the bytes still free there (None: not
    known) and what was being written. Also an ``OSError`` (``errno`` ENOSPC or EDQUOT), so code that handles a
    failed write as an OSError still does."""

    def __init__(self, path: str, free_bytes: int | None, *, what: str | None = None, quota: bool = False,
                 hint: str | None = None) -> None:
        self.path = path
        self.free_bytes = free_bytes
        free = f" ({free_bytes / (1024 * 1024):.0f} MiB free)" if free_bytes is not None else ""
        left = "no space left within the disk quota on" if quota else "no space left on"
        super().__init__(f"{left} {path}{free}" + (f" while writing {what}" if what else ""),
                         hint=hint or "free space on that filesystem, or work elsewhere (--cache-dir or "
                                      "ORCHESTRATE_CACHE for the work directory)")
        self.errno = errno.EDQUOT if quota else errno.ENOSPC
        self.strerror = self.message
        self.filename = path


class CIError(OrchestratorError):
    pass
