"""The store check verb: which published records are damaged, and moving them aside (``orchestrate store check``).

A damaged record (``contracts.store.DamagedRecord``: metadata that is not JSON or not the schema, changed since it
was published, a record that names another, an engine or attachment blob missing or no longer hashing to its
digest) never stops the rest of the store from being read: ``ls`` flags it, ``pull`` serves the other records and
``plan`` asks for its cell again. This verb lists every one, engines hashed, and with ``quarantine`` moves them
where no read finds them and nothing deletes them (the store says where); publishing the artifact again then
writes a sound record in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.store import DamagedRecord, Quarantined, Store, StoreChecker
from orchestrator.core.model import RegistryConfig
from orchestrator.errors import ExitCode, IntegrityError, StoreError

REPAIR_HINT = ("publish that artifact again to replace the damaged record, or `orchestrate store check "
               "--quarantine` to move damaged records aside; `orchestrate ls` lists the rest")


def describe(registry: RegistryConfig) -> str:
    """The store as people name it: its directory, or oci://host/prefix."""
    if registry.url:
        return f"oci://{registry.url}"
    return str(registry.path or registry.store or "the default store")


@dataclass(frozen=True)
class StoreCheck:
    store: str  # what was checked (``describe``)
    sound: int  # records read and found sound
    damaged: tuple[DamagedRecord, ...]  # found damaged (before any quarantine)
    quarantined: tuple[Quarantined, ...] = ()
    verified_blobs: bool = True

    @property
    def left(self) -> tuple[DamagedRecord, ...]:
        """Damaged records still in place (not moved aside)."""
        moved = {q.record.key for q in self.quarantined}
        return tuple(d for d in self.damaged if d.key not in moved)

    def exit_code(self) -> ExitCode:
        """0 when no damaged record is left in place (none found, or every one quarantined), else 1."""
        return ExitCode.ERROR if self.left else ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "sound": self.sound, "verified_blobs": self.verified_blobs,
                "damaged": [d.to_json() for d in self.damaged],
                "quarantined": [q.to_json() for q in self.quarantined],
                "left": [d.key for d in self.left], "exit_code": int(self.exit_code())}


def check_store(registry: RegistryConfig, *, quarantine: bool = False, verify_blobs: bool = True) -> StoreCheck:
    """Every damaged record of the store (``verify_blobs``: engines and attachments hashed too); with
    ``quarantine`` each is moved aside and reported where it went."""
    store = plugins.open_existing_store(registry)
    if not isinstance(store, StoreChecker):
        raise StoreError(f"the {store.name!r} store cannot check its records (it does not implement "
                         "orchestrator.contracts.store.StoreChecker)",
                         hint="ask the store plugin's authors for `damaged`, `check` and `quarantine`")
    damaged = tuple(store.check(verify_blobs=verify_blobs))
    moved = tuple(store.quarantine(damaged)) if quarantine and damaged else ()
    flagged = {d.key for d in damaged}
    sound = sum(1 for r in store.records() if str(r.metadata.get("record_key") or r.metadata.get("build_key"))
                not in flagged)
    return StoreCheck(store=describe(registry), sound=sound, damaged=damaged, quarantined=moved,
                      verified_blobs=verify_blobs)


def damaged_matching(store: Store, matches: Callable[[DamagedRecord], bool]) -> list[DamagedRecord]:
    """The store's damaged records ``matches`` accepts, and those too damaged to say what they were (one of them
    may be what was asked for); [] for a store that cannot say."""
    if not isinstance(store, StoreChecker):
        return []
    found = store.damaged()
    return [d for d in found if matches(d)] or [d for d in found if not (d.address or d.model)]


def damage_error(what: str, damaged: list[DamagedRecord]) -> IntegrityError:
    """What a reader says when what it was asked for is only found damaged."""
    first = damaged[0]
    more = f" (and {len(damaged) - 1} more damaged record(s))" if len(damaged) > 1 else ""
    return IntegrityError(f"{what}: the record {first.location} is damaged ({first.problem}){more}",
                          hint=REPAIR_HINT)
