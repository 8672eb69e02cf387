"""The start-up fast path (issue 24.2): a `plan` or no-op `build` whose inputs did not move is answered from the
saved result before click, rich, jsonschema or yaml are imported; and it never serves a stale answer.

The world: a tiny model published through the third-party `onnx-copy` builder (tests/data/onnx_copy_plugin,
pip-installed into a private folder on PYTHONPATH: its dist-info is a plugin version this test can move), a local
store and a cache folder with node results and run summaries. Each check copies that world, moves one input (the
manifest's bytes, a model's bytes with its size and mtime kept, the registry's records, index and engines, the
plugin's version and code, the cache's results and run summaries, environment, working directory, arguments)
and runs the same command twice: as the console script does (the fast path first) and through the full path
alone. Both must print the same bytes and exit alike; where nothing moved, the first must have been the fast one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from orchestrator import fastpath
from orchestrator.manifest.schema import SCHEMA_FILE
from tests.conftest import make_tiny_model
from tests.integration.registry_server import RegistryServer, require_binary

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "tests" / "data" / "onnx_copy_plugin"

MANIFEST = """\
manifest_version: 1
project: fastpath
defaults:
  precisions: [fp32]
  gate:
    parity: {data: {samples: 1, seed: 0}}
    benchmark: {warmup: 1, iterations: 5, shapes: [opt]}
models:
  - name: tiny-a
    version: "1.0.0"
    source: {path: ../models/a.onnx}
    inputs:
      x: {shape: [N, 3, H, W], profiles: {default: {min: [1, 3, 16, 16], opt: [2, 3, 32, 32], max: [4, 3, 64, 64]}}}
  - name: tiny-b
    version: "1.0.0"
    source: {path: ../models/b.onnx}
    inputs:
      x: {shape: [N, 3, H, W], profiles: {default: {min: [1, 3, 16, 16], opt: [2, 3, 32, 32], max: [4, 3, 64, 64]}}}
targets:
  - {name: copy-cpu, builder: onnx-copy, builder_version: "1.0", device: cpu, runners: {build: [ubuntu-latest]}}
registry: {store: local, path: ../registry}
"""

# what ran, written at exit: "fast" when the command was answered without loading click (the full path needs it)
_RUNNER = """\
import atexit, sys
def _report():
    with open({marker!r}, "a") as f:
        f.write(("full" if "click" in sys.modules else "fast") + "\\n")
atexit.register(_report)
from orchestrator.cli{module} import main
main()
"""


@dataclass
class World:
    root: Path
    env: dict[str, str]
    site: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifests" / "m.yaml"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def store(self) -> Path:
        return self.root / "registry"

    def run(self, *args: str, full: bool = False, cwd: Path | None = None, env: dict[str, str] | None = None
            ) -> tuple[str, str, int, str]:
        """stdout, stderr, exit code and "fast"/"full" of one `orchestrate` (``full``: the full path alone)."""
        marker = self.root / "ran.txt"
        marker.unlink(missing_ok=True)
        code = _RUNNER.format(marker=str(marker), module=".entry" if full else "")
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              cwd=cwd or self.root / "manifests", env={**self.env, **(env or {})}, timeout=600)
        return proc.stdout, proc.stderr, proc.returncode, marker.read_text().strip()


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The onnx-copy plugin built and installed by pip into a private folder (as test_third_party_plugin does)."""
    root = tmp_path_factory.mktemp("fastpath-plugin")
    src = root / "src"
    shutil.copytree(PLUGIN_SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                           "--target", str(root / "site"), str(src)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"installing onnx-copy-plugin failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}", pytrace=False)
    return root / "site"


@pytest.fixture(scope="module")
def published(tmp_path_factory, plugin_site) -> World:
    """Both models built, gated and published through onnx-copy, once per module."""
    root = tmp_path_factory.mktemp("fastpath-world")
    (root / "manifests").mkdir()
    (root / "models").mkdir()
    make_tiny_model(root / "models" / "a.onnx", seed=0)
    make_tiny_model(root / "models" / "b.onnx", seed=1)
    (root / "manifests" / "m.yaml").write_text(MANIFEST)
    shutil.copytree(plugin_site, root / "site")
    world = _world(root)
    for verb in ("build", "gate", "publish"):
        out, err, code, _ = world.run(verb, "m.yaml", full=True)
        assert code == 0, f"{verb}: {out}{err}"
    return world


def _world(root: Path) -> World:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATE_")}
    # a change made just before a command is part of these checks: no settling time (test_an_answer_waits...
    # checks the default)
    env.update(PYTHONPATH=str(root / "site"), ORCHESTRATE_CACHE=str(root / "cache"), COLUMNS="150",
               ORCHESTRATE_FASTPATH_SETTLE_S="0")
    return World(root, env, root / "site")


def _copy(world: World, dest: Path) -> World:
    shutil.copytree(world.root, dest, symlinks=True)
    return _world(dest)


# -- the moves --------------------------------------------------------------------------------------------------

def _rewrite_keeping_stat(path: Path, edit: Callable[[bytes], bytes]) -> None:
    """New bytes of the same size, written in place, mtime restored: what only ctime can tell."""
    before = path.stat()
    data = edit(path.read_bytes())
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


def _newest_record(w: World) -> Path:
    return sorted((w.store / "meta").glob("*.json"))[0]


def _dist_info(w: World) -> Path:
    return next(w.site.glob("onnx_copy_plugin-*.dist-info"))


def _bump_plugin_version(w: World) -> None:
    meta = _dist_info(w) / "METADATA"
    _rewrite_keeping_stat(meta, lambda d: d.replace(b"Version: 1.0.0", b"Version: 1.0.1"))


def _failed_run(w: World) -> None:
    address = "tiny-a/fp32/default@cpu+copy1.0"
    report = {"node": f"build:{address}", "kind": "build", "status": "failed", "reason": "out of memory",
              "key": None}
    (w.cache / "runs" / "build-29990101T000000-1.json").write_text(json.dumps(
        {"format_version": 1, "ok": False, "interrupted": False, "seconds": 1.0, "counts": {"failed": 1},
         "nodes": [report]}))


MOVES: dict[str, tuple[Callable[[World], None], bool | None]] = {
    # name: (the move, whether the fast path may still answer: True must, False must not, None either)
    "nothing": (lambda w: None, True),
    "manifest rewritten, same bytes": (lambda w: w.manifest.write_bytes(w.manifest.read_bytes()), True),
    "manifest comment": (lambda w: w.manifest.write_text(w.manifest.read_text() + "# reviewed\n"), False),
    "model version bumped": (lambda w: w.manifest.write_text(
        w.manifest.read_text().replace('version: "1.0.0"', 'version: "1.0.1"', 1)), False),
    "model bytes, same size and mtime": (
        lambda w: _rewrite_keeping_stat(w.root / "models" / "a.onnx", _flip_last_byte), False),
    "model replaced": (lambda w: make_tiny_model(w.root / "models" / "a.onnx", seed=7), False),
    "model touched": (lambda w: os.utime(w.root / "models" / "a.onnx"), False),
    "record edited, same size and mtime": (lambda w: _rewrite_keeping_stat(
        _newest_record(w), lambda d: d.replace(b'"tiny-', b'"tinY-', 1)), False),
    "engine blob removed": (lambda w: next((w.store / "blobs" / "sha256").iterdir()).unlink(), False),
    "index removed": (lambda w: (w.store / "index.json").unlink(), False),
    "store removed": (lambda w: shutil.rmtree(w.store), False),
    "node result removed": (lambda w: shutil.rmtree(next((w.cache / "nodes" / "gate-parity").iterdir())), False),
    "run summary added": (_failed_run, False),
    # a no-op build between two plans leaves a run summary that reports on no node: the plan's answer holds
    "no-op build ran": (lambda w: w.run("build", "m.yaml", "-q", full=True), True),
    "plugin version": (_bump_plugin_version, False),
    "plugin code touched": (lambda w: os.utime(next(w.site.glob("onnx_copy_plugin/__init__.py"))), False),
    # the environment is part of an answer's key: local times in `plan` follow TZ; any other variable may matter
    # to a plugin, so every one counts
    "time zone": (lambda w: w.env.update(TZ="Asia/Tokyo"), False),
    "a variable set": (lambda w: w.env.update(FASTPATH_TEST_VARIABLE="1"), False),
}

CACHE_MOVES = ("node result removed", "run summary added", "no-op build ran")

# (arguments after the manifest, extra environment, working directory below the world: None = manifests/)
INVOCATIONS = [
    ("plan", (), {}, None),
    ("plan", ("--json",), {}, None),
    ("plan", ("--detailed-exitcode",), {}, None),
    ("plan", ("--markdown",), {}, None),
    ("plan", (), {"COLUMNS": "90"}, None),
    ("plan", (), {}, "models"),  # another working directory, the manifest by a relative path
    ("build", ("-q",), {}, None),
    ("build", ("--json",), {}, None),
]


def _args(w: World, verb: str, extra: tuple[str, ...], where: str | None) -> tuple[tuple[str, ...], Path]:
    if where is None:
        return (verb, "m.yaml", *extra), w.root / "manifests"
    return (verb, "../manifests/m.yaml", *extra), w.root / where


def _check(world: World, invocation, moves: list[str]) -> None:
    verb, extra, env, where = invocation
    args, cwd = _args(world, verb, extra, where)
    full = world.run(*args, full=True, cwd=cwd, env=env)  # keeps the answer
    again = world.run(*args, cwd=cwd, env=env)
    assert again[3] == "fast", f"{args}: nothing moved, yet the full path ran"
    assert again[:3] == full[:3] if verb == "plan" else again[2] == full[2] == 0
    for name in moves:
        # a move after one that removed what it moves (the engine after the store) changes nothing more: the
        # expectation is the earlier move's
        with contextlib.suppress(FileNotFoundError, StopIteration, IndexError):
            MOVES[name][0](world)
    # a no-op build reads no node result or run summary (nothing is in its scope): those moves leave its answer
    mays = [None if verb == "build" and name in CACHE_MOVES else MOVES[name][1] for name in moves]
    if (verb, extra, env, where) == ("build", ("-q",), {}, None) and "no-op build ran" in moves:
        # that move ran this very invocation (`build m.yaml -q`), which saved a fresh answer: the moves before it
        # no longer decide; the output must still equal the full path's (checked below)
        mays = [None] + mays[len(moves) - moves[::-1].index("no-op build ran"):]
    expect = False if False in mays else (None if None in mays else True)
    served = world.run(*args, cwd=cwd, env=env)
    fresh = world.run(*args, full=True, cwd=cwd, env=env)
    if expect is not None:
        assert (served[3] == "fast") == expect, f"{moves}: expected the {'fast' if expect else 'full'} path"
    if verb == "plan" or served[3] == "fast":  # a build that was not answered did its work: the next one differs
        _same(served, fresh, verb, f"{args} after {moves}")


def _same(served, fresh, verb: str, what: str) -> None:
    out, err, code, _ = served
    if verb == "build":  # each build writes its own run summary: its name (time, pid) and timing differ
        out, fresh_out = _normal(out), _normal(fresh[0])
    else:
        fresh_out = fresh[0]
    assert (out, err, code) == (fresh_out, fresh[1], fresh[2]), what


def _normal(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text.replace(text.rsplit(" in ", 1)[-1], "S") if " in " in text else text
    return json.dumps({**data, "summary_file": "F", "seconds": "S"})


@pytest.mark.parametrize("move", sorted(MOVES))
def test_each_input_moved_in_turn(published, tmp_path, move):
    """Every input moved once, under `plan` (the command whose output reads the most inputs)."""
    _check(_copy(published, tmp_path / "w"), INVOCATIONS[0], [move])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(INVOCATIONS), st.lists(st.sampled_from(sorted(MOVES)), min_size=1, max_size=3))
@example(("build", ("-q",), {}, None), ["a variable set", "no-op build ran"])  # the move re-records the answer
def test_served_answers_equal_the_full_path(published, tmp_path_factory, invocation, moves):
    """Any invocation, any moves in turn: what the console script prints is what the full path prints."""
    _check(_copy(published, tmp_path_factory.mktemp("w") / "w"), invocation, moves)


def test_an_answer_waits_for_its_inputs_to_settle(published, tmp_path):
    """With the default settling time, a plan run right after a change keeps no answer: its input may have been
    changing while it was read. The next plan, once settled, keeps one."""
    world = _copy(published, tmp_path / "w")
    env = {"ORCHESTRATE_FASTPATH_SETTLE_S": "30"}
    world.manifest.write_text(world.manifest.read_text() + "# now\n")
    world.run("plan", "m.yaml", full=True, env=env)
    assert world.run("plan", "m.yaml", env=env)[3] == "full"


def test_a_remote_registry_is_read_on_every_plan(published, tmp_path):
    """An OCI registry names no witness (its state can move with no local file moving; telling needs the
    network): every plan reads it, none is answered from a saved result."""
    require_binary()
    server = RegistryServer(tmp_path / "registry").start()
    try:
        world = _copy(published, tmp_path / "w")
        world.manifest.write_text(world.manifest.read_text().replace(
            "registry: {store: local, path: ../registry}", f'registry: {{store: oci, url: "{server.host}/e", '
                                                           "insecure: true}"))
        first = world.run("plan", "m.yaml", full=True)
        second = world.run("plan", "m.yaml")
        assert first[2] == 0 and second[3] == "full" and second[:3] == first[:3]
        assert not (world.cache / "fastpath").exists() or not any((world.cache / "fastpath").iterdir())
    finally:
        server.stop()


def test_the_fast_path_imports_nothing_heavy(published, tmp_path):
    """The answer comes before click, rich, jsonschema, yaml and the commands are imported."""
    world = _copy(published, tmp_path / "w")
    world.run("plan", "m.yaml", full=True)
    code = ("import sys\nfrom orchestrator.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('click', 'rich', 'jsonschema', 'yaml', 'orchestrator.cli.entry', "
            "'orchestrator.app') if m in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, "plan", "m.yaml"], capture_output=True, text=True,
                          cwd=world.root / "manifests", env=world.env, timeout=600)
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


def test_a_served_build_writes_its_run_summary(published, tmp_path):
    """A no-op build answered from its saved result still leaves its run summary under runs/, as the full path
    does (`report` and `plan` read them), and a JSON answer names that file."""
    world = _copy(published, tmp_path / "w")
    world.run("build", "m.yaml", "--json", full=True)
    before = set((world.cache / "runs").iterdir())
    out, _, code, ran = world.run("build", "m.yaml", "--json")
    (new,) = set((world.cache / "runs").iterdir()) - before
    assert (ran, code) == ("fast", 0)
    assert json.loads(out)["summary_file"] == str(new)
    assert json.loads(new.read_text())["nodes"] == [] and json.loads(new.read_text())["ok"] is True


def test_other_arguments_are_another_answer(published, tmp_path):
    """An answer is kept for its exact arguments: `plan --json` after `plan` is planned, not served the table."""
    world = _copy(published, tmp_path / "w")
    world.run("plan", "m.yaml", full=True)
    assert world.run("plan", "m.yaml")[3] == "fast"
    served = world.run("plan", "m.yaml", "--json")
    assert served[3] == "full" and json.loads(served[0])["summary"]["up_to_date"] == 2


def test_a_plan_with_changes_is_answered_with_its_exit_code(published, tmp_path):
    """`plan --detailed-exitcode` with changes to make exits 2 from a saved answer too, with the same bytes."""
    world = _copy(published, tmp_path / "w")
    make_tiny_model(world.root / "models" / "a.onnx", seed=7)
    for extra in ((), ("--json",)):
        full = world.run("plan", "m.yaml", "--detailed-exitcode", *extra, full=True)
        served = world.run("plan", "m.yaml", "--detailed-exitcode", *extra)
        assert full[2] == 2 and served[3] == "fast" and served[:3] == full[:3]


@pytest.mark.parametrize("damage", ["truncated", "empty", "not json", "another key"])
def test_a_damaged_answer_is_a_miss(published, tmp_path, damage):
    """A saved answer cut short (a crash on a filesystem that lost the rename's data), emptied, garbled or kept
    under another invocation's key is never served: the full path runs and prints what it always prints."""
    world = _copy(published, tmp_path / "w")
    full = world.run("plan", "m.yaml", full=True)
    (answer,) = (world.cache / "fastpath").glob("*.json")
    text = answer.read_text()
    data = json.loads(text)
    answer.write_text({"truncated": text[: len(text) // 2], "empty": "", "not json": "\x00" * len(text),
                       "another key": json.dumps({**data, "key": {**data["key"], "args": ["plan", "x.yaml"]},
                                                  "stdout": "stale"})}[damage])
    crashed = world.cache / "fastpath" / f"{answer.name}.1234.tmp"  # a writer that crashed two hours ago
    crashed.write_text(text[:10])
    os.utime(crashed, (crashed.stat().st_mtime - 7200,) * 2)
    served = world.run("plan", "m.yaml")
    assert served[3] == "full" and served[:3] == full[:3]
    assert not crashed.exists()  # swept when the next answer was kept
    assert world.run("plan", "m.yaml")[3] == "fast"  # the full path kept a sound answer again


def test_the_tools_package_data_is_witnessed():
    """The manifest's JSON Schema is read as `plan` runs: in an editable install an edit to it moves no version
    and no module file, so the schema file itself is witnessed."""
    assert str(Path(sys.modules["orchestrator.manifest.schema"].__file__).with_name(SCHEMA_FILE)) in \
        fastpath.module_files()


def test_an_answer_is_kept_per_machine_and_boot(monkeypatch):
    """A plan may depend on the machine (a `cpu_match: isa` target's gate key names this CPU's instruction set) and
    a cache folder can move to another machine: another host name (or boot) is another key."""
    key = fastpath.invocation(["plan", "m.yaml"])
    real = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result((real.sysname, real.nodename + "-elsewhere",
                                                               real.release, real.version, real.machine)))
    assert fastpath.invocation(["plan", "m.yaml"]) != key
