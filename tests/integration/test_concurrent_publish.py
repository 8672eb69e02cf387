"""8 publisher processes with overlapping cells, to the local store and to a real registry: the index ends
consistent, with every cell exactly once and nothing lost.

Run as a script, this module is one publisher: ``python test_concurrent_publish.py local|oci TARGET WORKER``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import make_artifact, registry  # noqa: F401
except ImportError:
    from registry_server import make_artifact, registry  # noqa: F401

HERE = Path(__file__).parent
WORKERS = 8
# 12 cells; worker i publishes cells i..i+5 (mod 12), so every cell has 4 publishers racing for it.
CELLS = [dict(model=m, precision=p, version=v)
         for m in ("det", "rec") for p in ("fp16", "int8", "fp32") for v in ("1.0.0", "1.1.0")]


def cells_of(worker: int) -> list[int]:
    return [(worker + k) % len(CELLS) for k in range(6)]


def publish(kind: str, target: str, worker: int, workdir: Path) -> None:
    from orchestrator.core.model import RegistryConfig

    if kind == "local":
        from trt_orchestrator_plugins.stores.local import LocalStore

        store = LocalStore(RegistryConfig(store="local", path=target))
    else:
        from trt_orchestrator_plugins.stores.oci import OciStore

        store = OciStore(RegistryConfig(store="oci", url=target, insecure=True))
    for i in cells_of(worker):
        files = make_artifact(workdir / f"w{worker}" / f"c{i}", size=256 * 1024, **CELLS[i])
        store.put(files)


def run_publishers(kind: str, target: str, workdir: Path) -> None:
    procs = [subprocess.Popen([sys.executable, __file__, kind, target, str(w), str(workdir)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for w in range(WORKERS)]
    outputs = [(p.wait(timeout=300), p.stdout.read().decode()) for p in procs]
    failed = [out for rc, out in outputs if rc != 0]
    assert not failed, failed[0]


def expected(workdir: Path) -> tuple[set[str], set[str]]:
    metas = [make_artifact(workdir / "expect" / f"c{i}", size=256 * 1024, **c).metadata for i, c in enumerate(CELLS)]
    return {m["record_key"] for m in metas}, {m["engine"]["digest"] for m in metas}


@pytest.mark.integration
def test_eight_processes_to_local_store(tmp_path):
    from orchestrator.core.model import RegistryConfig
    from trt_orchestrator_plugins.stores.local import LocalStore

    root = tmp_path / "artifacts"
    run_publishers("local", str(root), tmp_path)
    keys, digests = expected(tmp_path)
    store = LocalStore(RegistryConfig(store="local", path=str(root)))
    index = store.index().data
    assert set(index["artifacts"]) == keys
    assert index["seq"] == len(keys)  # each record key added to the index exactly once
    assert {p.stem for p in (root / "meta").glob("*.json")} == keys
    assert {e.digest for e in store.index().latest_by_address().values()} <= digests
    assert len(store.index().latest_by_address()) == len({m.metadata["address"] for m in store.records()}) == 6
    engine_blobs = {f"sha256:{p.name}" for p in store.blobs.iterdir()} - {
        a["digest"] for bk in keys for a in store._read_meta(bk, index).get("attachments", [])}
    assert engine_blobs == digests  # nothing orphaned, nothing missing
    assert not [p for p in store.blobs.iterdir() if p.name.startswith(".")]  # no temp files left
    for model in ("det", "rec"):
        assert index["models"][model]["latest"] in ("1.0.0", "1.1.0")
        assert sorted(bk for v in index["models"][model]["versions"].values() for bk in v["build_keys"]) == sorted(
            bk for bk, r in index["artifacts"].items() if r["model"] == model)


@pytest.mark.integration
def test_eight_processes_to_registry(registry, tmp_path):
    from orchestrator.core.model import RegistryConfig
    from trt_orchestrator_plugins.stores.oci import OciStore

    url = f"{registry.host}/conc"
    run_publishers("oci", url, tmp_path)
    keys, digests = expected(tmp_path)
    store = OciStore(RegistryConfig(store="oci", url=url, insecure=True))
    entries = store.index().entries()
    assert sorted(e.record_key for e in entries) == sorted(keys)  # exactly once each
    assert {e.digest for e in entries} == digests
    assert len(store.index().latest_by_address()) == 6
    for tag_list in (store._paginated(f"/v2/conc/{m}/tags/list", "tags") for m in ("det", "rec")):
        assert len([t for t in tag_list if t.startswith("bk-")]) == 6
        assert len([t for t in tag_list if not t.startswith("bk-")]) == 6  # readable: version-precision-...


if __name__ == "__main__":
    publish(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
