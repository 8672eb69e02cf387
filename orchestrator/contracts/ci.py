"""The CI emitter port: a plan's shards (and the manifests they came from) in, files to write out.

A CI plugin (entry-point group ``trt_orchestrator.ci``) renders data the app layer already resolved and planned
(``orchestrator.app.ci``): it never loads manifests itself. ``max_shards`` is the emitter's own limit on jobs per
workflow (GitHub Actions caps a matrix at 256; None: no limit), passed to the planner so a plan that cannot fit
is refused before rendering. Options are the emitter's own typed keyword arguments (tool spec, image, ...).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from orchestrator.core.plan import Plan


@runtime_checkable
class CIEmitter(Protocol):
    name: str
    max_shards: int | None

    def render(self, plan: Plan, manifests: list[str], **options: Any) -> dict[str, str]:
        """Relative path -> file text. ``manifests`` are paths relative to the repository root."""
        ...
