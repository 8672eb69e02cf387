"""Refit at deployment: a stripped engine becomes the engine its gate judged before a byte reaches the deployment.

``pull``, ``pull --all`` and ``export triton`` hand each engine they write through ``Refitting.install``: an engine
that carries its weights is written as it is published; a stripped one (``core.weights.needs_refit``) is refitted by
its runtime plugin (``contracts.runtime.RefitCapability``) from its model version's weights blob (fetched once per
command, ``app.model_blob.BlobCache``), the result is run on the samples its parity gate recorded and must reproduce
the recorded outputs within the gate's parity tolerance (``gates.refit_check``), and only then is it renamed into
place. A refit that fails, or does not match, writes nothing and raises ``RefitError`` with the reason.
``keep_stripped`` (``--keep-stripped``) writes the stripped engine as published, for deployments that refit it
themselves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.app.judge import descriptor
from orchestrator.app.model_blob import BlobCache
from orchestrator.contracts.runtime import RefitCapability, RefitRequest, RuntimeOptions, Session
from orchestrator.contracts.store import AttachmentReader, Store, StoredArtifact
from orchestrator.core.gatekeys import DRIFT_OUTPUTS_FILE
from orchestrator.core.weights import needs_refit
from orchestrator.errors import ArtifactNotFoundError, OrchestratorError, RefitError
from orchestrator.gates.drift import load_outputs
from orchestrator.gates.refit_check import check_refitted

KEEP_STRIPPED = "--keep-stripped"


@dataclass
class Refitting:
    """One command's refits: its blob cache, whether stripped engines are kept stripped, and what was done."""

    store: Store
    keep_stripped: bool = False
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # engine digest -> refit facts and check
    _blobs: BlobCache | None = None

    @property
    def blobs(self) -> BlobCache:
        if self._blobs is None:
            self._blobs = BlobCache(self.store)
        return self._blobs

    def refits(self, chosen: StoredArtifact) -> bool:
        """This engine is written refitted (not as published): its file's digest is not the record's."""
        return needs_refit(chosen.metadata) and not self.keep_stripped

    def install(self, staged: Path, chosen: StoredArtifact, path: Path) -> None:
        """Move the verified engine file ``staged`` to ``path``: refitted and checked first where it is stripped
        (nothing is written when that fails)."""
        if not self.refits(chosen):
            os.replace(staged, path)
            return
        out = path.with_name(f".{path.name}.refit")
        try:
            facts = refit_and_check(self.store, chosen, staged, out, self.blobs)
            os.replace(out, path)
        finally:
            out.unlink(missing_ok=True)
        self.done[chosen.digest] = facts

    @property
    def blobs_fetched(self) -> int:
        return self._blobs.downloads if self._blobs is not None else 0

    def close(self) -> None:
        if self._blobs is not None:
            self._blobs.close()


def _outputs(store: Store, chosen: StoredArtifact, dest: Path) -> dict[str, Any] | None:
    """The outputs its parity gate recorded (``outputs.npz``, published with it), or None where there are none."""
    if not isinstance(store, AttachmentReader):
        return None
    try:
        store.get_attachment(chosen, DRIFT_OUTPUTS_FILE, dest)
    except ArtifactNotFoundError:
        return None
    return load_outputs(dest)


def refit_and_check(store: Store, chosen: StoredArtifact, staged: Path, out: Path, blobs: BlobCache
                    ) -> dict[str, Any]:
    """Refit the stripped engine ``staged`` into ``out`` and check it on its gate's recorded samples; a
    ``RefitError`` (``out`` removed) when either fails."""
    meta = chosen.metadata
    address = str(meta.get("address"))
    engine = descriptor(meta)
    hint = f"{KEEP_STRIPPED} writes the stripped engine as published, for a deployment that refits it itself"
    try:
        runtime = plugins.runtime_for(engine)
    except OrchestratorError as e:
        raise RefitError(f"{address}: its runtime {engine.runtime!r} is not installed here: {e.message}",
                         hint=hint) from e
    if not isinstance(runtime, RefitCapability):
        raise RefitError(f"{address}: the {engine.runtime} runtime cannot refit its stripped engine", hint=hint)
    folder = blobs.folder(meta)
    try:
        result = runtime.refit(RefitRequest(engine_path=staged, engine=engine, weights=folder, out_path=out))
        recorded = _outputs(store, chosen, out.with_name(out.name + ".outputs.npz"))
        if recorded is None:
            raise RefitError(f"{address}: its gate recorded no outputs to check the refitted engine against (gate "
                             "pending, or drift off when it was gated)", hint=hint)
        device = "cpu" if engine.target.device == "cpu" else "cuda"

        def session_for(index: int) -> Session:
            return runtime.load(out, engine, RuntimeOptions(profile_index=index, device=device))  # type: ignore[arg-type]

        check = check_refitted(meta, recorded, session_for)
    except RefitError:
        out.unlink(missing_ok=True)
        raise
    except OrchestratorError as e:  # the runtime's own reason: no GPU it accepts, weights that do not fit
        out.unlink(missing_ok=True)
        raise RefitError(f"{address}: refit failed: {e.message}", hint=e.hint or hint) from e
    finally:
        out.with_name(out.name + ".outputs.npz").unlink(missing_ok=True)
    if not check.passed:
        out.unlink(missing_ok=True)
        raise RefitError(f"{address}: the refitted engine does not reproduce the outputs its gate recorded: "
                         + "; ".join(check.problems[:5]), hint=hint)
    return {"refit": dict(result.facts), "check": check.to_json()}

