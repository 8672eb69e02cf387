"""Journey (issue 22.8): lookups meet users halfway.

- `show` takes what `ls` prints: the short engine digest (`sha256:` + 12 hex) and the short record key (12 hex), by
  unique prefix; a prefix several records share is an error that lists them.
- A mistyped command gets "did you mean" (the lazy command table had hidden the commands from click's suggester),
  still without importing every command's module.
- A refused `pull --json` carries a machine-readable candidate list: each candidate's address, record key, version,
  precision, target, runtime and the reason it was refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

from tests.journeys.conftest import Demo


def _ls_rows(demo: Demo) -> list[list[str]]:
    """The rows `ls` prints on a terminal: address, version, builder (2 words), gates..., size (2), digest, record,
    published."""
    proc = demo.run("ls", "--registry", str(demo.store), env_extra={"COLUMNS": "250"})
    rows = [line.split() for line in proc.stdout.splitlines() if "@" in line]
    assert len(rows) == 18, proc.stdout
    return rows


def test_show_takes_the_short_digest_and_the_record_key_ls_prints(demo_published):
    listing, _ = demo_published.run_json("ls", "--registry", str(demo_published.store))
    by_address = {a["address"]: a for a in listing["artifacts"]}
    for row in _ls_rows(demo_published)[:3]:
        address, digest, record = row[0], row[-3], row[-2]
        assert digest.startswith("sha256:") and len(digest) == 19 and len(record) == 12
        for ref in (digest, digest.removeprefix("sha256:"), record):
            shown, proc = demo_published.run_json("show", ref, "--registry", str(demo_published.store))
            assert shown["address"] == address, (ref, proc.stderr)
            assert shown["engine"]["digest"] == by_address[address]["digest"]
            assert shown["record_key"] == by_address[address]["record_key"]
        human = demo_published.run("show", record, "--registry", str(demo_published.store))
        assert address in human.stdout


def test_show_of_an_ambiguous_prefix_lists_the_matches(demo_published):
    listing, _ = demo_published.run_json("ls", "--registry", str(demo_published.store))
    # 18 records, 36 hex keys, 16 hex digits: some first digit starts the keys of at least two records
    owners: dict[str, set[str]] = defaultdict(set)
    for a in listing["artifacts"]:
        owners[a["digest"].removeprefix("sha256:")[0]].add(a["address"])
        owners[a["record_key"][0]].add(a["address"])
    prefix, addresses = next((p, a) for p, a in sorted(owners.items()) if len(a) >= 2)
    proc = demo_published.run("show", prefix, "--registry", str(demo_published.store), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"'{prefix}' is ambiguous" in proc.stderr
    for address in addresses:
        assert address in proc.stderr
    assert "Traceback" not in proc.stderr

    keys = [a["digest"].removeprefix("sha256:") for a in listing["artifacts"]] + \
        [a["record_key"] for a in listing["artifacts"]]
    unused = next(f"{a}{b}" for a in "0123456789abcdef" for b in "0123456789abcdef"
                  if not any(k.startswith(f"{a}{b}") for k in keys))
    missing = demo_published.run("show", unused, "--registry", str(demo_published.store), check=False)
    assert missing.returncode == 1 and f"no artifact '{unused}'" in missing.stderr


def test_a_mistyped_command_gets_did_you_mean(demo_published):
    for typo, meant in (("pul", "pull"), ("shwo", "show"), ("publsh", "publish")):
        proc = demo_published.run(typo, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"No such command '{typo}'" in proc.stderr and f"Did you mean '{meant}'" in proc.stderr, proc.stderr
    # suggesting does not import the command modules (the lazy table stays lazy)
    code = ("import sys\nfrom orchestrator.cli import main\ntry:\n    main(['pul'])\nexcept SystemExit as e:\n"
            "    assert e.code == 2, e.code\n"
            "print(sorted(m for m in sys.modules if m.startswith('orchestrator.cli.') and m.endswith('_cmds')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_a_refused_pull_json_carries_the_candidates(demo_published):
    proc = demo_published.run("pull", "ocr-det", "--gpu", "sm90", "--json", "--registry", str(demo_published.store),
                              check=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == "NoCompatibleEngineError"
    listing, _ = demo_published.run_json("ls", "--registry", str(demo_published.store), "--model", "ocr-det")
    published = {a["record_key"]: a for a in listing["artifacts"]}
    candidates = error["candidates"]
    assert {c["record_key"] for c in candidates} == set(published)
    for c in candidates:
        record = published[c["record_key"]]
        assert c["address"] == record["address"] and c["digest"] == record["digest"]
        assert c["version"] == "4.0.0" and c["precision"] in ("fp32", "fp16")
        assert c["address"].split("/")[1] == c["precision"]
        assert c["target"] in ("rtx-sm86", "rtx-sm89-sm120", "cpu")
        assert c["runtime"] == {"rtx-sm86": "tensorrt-rtx", "rtx-sm89-sm120": "tensorrt-rtx",
                                "cpu": "onnxruntime"}[c["target"]]
        assert c["reason"] and c["reason"] in error["message"]
