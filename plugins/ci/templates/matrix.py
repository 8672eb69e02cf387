"""plan.json -> the engine workflow's job matrices, written to $GITHUB_OUTPUT.

Run by the generated workflow's `plan` job (included verbatim into its `run:` block) and loaded by
`trt_orchestrator_plugins.ci.github` for ``runs_on``, so the two can never disagree. Standard library only.

Outputs: ``matrix`` / ``gate_matrix`` = ``{"include": [{"shard": ID, "labels": [...], ...toolchain}, ...]}``
holding shard ids, runner labels and the shard's toolchain (data for `runs-on`, `container:` and step `env:`,
never interpolated into a script), ``has_changes`` and ``has_gate`` (``true``/``false``).

Toolchain fields of an entry: ``toolchain`` (runner | container | pip), ``image`` (the container image; "" runs
on the host), ``requirements`` (pip pins, space-separated), ``index_url``, ``toolchain_key`` (keys the cached pip
environment) and ``cache_key`` (keys the timing/calibration caches: builder, exact version, CCs).
"""
import hashlib
import json
import os
import sys

MAX_MATRIX = 256  # GitHub Actions' limit of jobs per matrix
# GitHub-hosted runner labels: a label set made of exactly one of these runs on GitHub's machines and gets no
# `self-hosted` prefix. Everything else is a self-hosted runner's label.
HOSTED_LABELS = frozenset({
    "ubuntu-latest", "ubuntu-24.04", "ubuntu-22.04", "ubuntu-24.04-arm", "ubuntu-22.04-arm",
    "windows-latest", "windows-2025", "windows-2022", "windows-11-arm",
    "macos-latest", "macos-15", "macos-14", "macos-13", "macos-latest-large", "macos-15-large",
    "macos-14-large", "macos-13-large", "macos-latest-xlarge", "macos-15-xlarge", "macos-14-xlarge",
})


def runs_on(labels):
    """The `runs-on` list of one label set: `self-hosted` first, unless it is one GitHub-hosted label."""
    labels = list(labels)
    if len(labels) == 1 and labels[0] in HOSTED_LABELS:
        return labels
    return ["self-hosted"] + [label for label in labels if label != "self-hosted"]


def toolchain_fields(shard):
    tc = shard.get("toolchain") or {}
    kind = tc.get("kind") or "runner"
    requirements = list(tc.get("requirements") or ())
    text = "\n".join([kind, tc.get("image") or "", *requirements, tc.get("index_url") or ""])
    return {"toolchain": kind, "image": (tc.get("image") or "") if kind == "container" else "",
            "requirements": " ".join(requirements), "index_url": tc.get("index_url") or "",
            "toolchain_key": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16],
            "cache_key": shard.get("cache_key") or shard["id"]}


def matrices(plan):
    build, gate = [], []
    for shard in sorted(plan["shards"], key=lambda s: s["id"]):
        build_on = runs_on(shard["build_labels"])
        gate_on = runs_on(shard["gate_labels"] or shard["build_labels"])
        fields = toolchain_fields(shard)
        build.append({"shard": shard["id"], "labels": build_on, **fields})
        if gate_on != build_on:
            gate.append({"shard": shard["id"], "labels": gate_on, **fields})
    return {"include": build}, {"include": gate}


def outputs(plan):
    build, gate = matrices(plan)
    if len(build["include"]) > MAX_MATRIX:
        sys.exit(f"plan.json has {len(build['include'])} shards, more than the {MAX_MATRIX} jobs one matrix "
                 "can hold: give targets on the same machines the same runner labels, or split the manifests")
    counts = plan["summary"]
    changed = bool(counts["build"] or counts["rebuild"] or counts.get("refit") or counts.get("regate")
                   or counts.get("publish")) and bool(build["include"])

    def dump(value):  # one line, ASCII only: safe for the name=value form of $GITHUB_OUTPUT
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    return {"matrix": dump(build), "gate_matrix": dump(gate),
            "has_changes": "true" if changed else "false",
            "has_gate": "true" if changed and gate["include"] else "false"}


def main(plan_path="plan.json"):
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    values = outputs(plan)
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
        for name in sorted(values):
            out.write(f"{name}={values[name]}\n")
    print(json.dumps(values, indent=2, sort_keys=True))


if __name__ == "__main__":
    main(*sys.argv[1:])
