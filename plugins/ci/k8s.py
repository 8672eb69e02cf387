"""The Kubernetes emitter, for teams beyond GitHub Actions: a Plan -> one ConfigMap + one Indexed Job per build
label set.

Unlike the GitHub workflow (which plans at run time), this renders a plan that was already made: the ConfigMap
carries plan.json and, per Job, the list of its shard ids, one a line. Pod ``i`` of a Job (``completionMode:
Indexed``, ``completions`` = that label set's shard count) reads line ``i + 1`` of its list, so no shard id,
label or name from a manifest is ever part of a shell script. Runner labels become a node selector
``trt-orchestrator/label-<label>: "true"``: label the nodes that can build for a label set that way.

Each pod builds its shard and gates what that node can run (`orchestrate gate` reports the rest pending).
Collecting engines and publishing are left to the cluster's own storage: see the Job's volume note.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from orchestrator.core.plan import Plan, Shard
from orchestrator.errors import CIError

OUTPUT_PATH = "k8s/engines.yaml"
NODE_LABEL_PREFIX = "trt-orchestrator/label-"
CONFIGMAP_LIMIT = 1024 * 1024  # the API server refuses bigger ConfigMaps (etcd object size)
# Kubernetes label names: the part after the prefix, at most 63 characters.
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Static: reads its shard id from a file by the pod's completion index; no value is interpolated into it.
_SCRIPT = """set -eu
shard="$(sed -n "$((JOB_COMPLETION_INDEX + 1))p" /plan/shards.txt)"
if [ -z "$shard" ]; then
  echo "no shard at index $JOB_COMPLETION_INDEX in /plan/shards.txt" >&2
  exit 1
fi
orchestrate build --plan /plan/plan.json --shard "$shard"
exec orchestrate gate --plan /plan/plan.json --shard "$shard"
"""


def node_selector(labels: Sequence[str]) -> dict[str, str]:
    selector = {}
    for label in labels:
        if label == "self-hosted":  # a GitHub runner convention, meaningless for a node
            continue
        name = "label-" + label
        if len(name) > 63 or not _LABEL_NAME.fullmatch(label):
            raise CIError(f"runner label {label!r} cannot be a Kubernetes node label "
                          f"({NODE_LABEL_PREFIX}{label})",
                          hint="use labels of letters, digits, '-', '_' and '.', starting and ending with a letter "
                               "or digit, at most 57 characters")
        selector[NODE_LABEL_PREFIX + label] = "true"
    return dict(sorted(selector.items()))


def _dns_name(prefix: str, labels: Sequence[str]) -> str:
    """A DNS-1123 label: readable slug of the labels + a hash of them (two label sets never collide)."""
    digest = hashlib.sha256(json.dumps(list(labels)).encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9]+", "-", "-".join(labels).lower()).strip("-") or "any"
    head = f"{prefix}-{slug}"[: 63 - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}"


def _groups(plan: Plan) -> list[tuple[tuple[str, ...], list[Shard]]]:
    groups: dict[tuple[str, ...], list[Shard]] = {}
    for shard in plan.shards:
        groups.setdefault(shard.build_labels, []).append(shard)
    return [(labels, sorted(groups[labels], key=lambda s: s.id)) for labels in sorted(groups)]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the script, plan.json, shard lists) as literal blocks, so the file reads as text."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and all(line == line.rstrip() for line in value.split("\n")) and value.isascii():
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def _dump_all(documents: list[dict]) -> str:
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=True, default_flow_style=False,
                         allow_unicode=False, width=10_000, explicit_start=True)


@dataclass(frozen=True)
class KubernetesEmitter:
    name: str = "k8s-indexed-job"
    max_shards: int | None = None  # one Indexed Job per label set: no matrix limit

    def render(self, plan: Plan, manifests: list[str], *, image: str = "trt-orchestrator:0.1.0",
               name: str = "engines", namespace: str | None = None, output_path: str = OUTPUT_PATH,
               backoff_limit_per_index: int = 1) -> dict[str, str]:
        """{output_path: a multi-document YAML of one ConfigMap and one Indexed Job per build label set}."""
        if not _DNS_LABEL.fullmatch(name) or len(name) > 40:
            raise CIError(f"name {name!r} is not a short DNS label", hint="lowercase letters, digits and '-'")
        if namespace is not None and not _DNS_LABEL.fullmatch(namespace):
            raise CIError(f"namespace {namespace!r} is not a DNS label", hint="lowercase letters, digits and '-'")
        if not image or any(ch.isspace() for ch in image):
            raise CIError(f"image {image!r} is not an image reference", hint="e.g. registry/trt-orchestrator:0.1.0")
        if not plan.shards:
            raise CIError("the plan has no shards: nothing to build", hint="`orchestrate plan` shows why")

        groups = _groups(plan)
        config_name = f"{name}-plan"
        common = {"app.kubernetes.io/name": "trt-orchestrator", "app.kubernetes.io/part-of": name}
        data = {"plan.json": json.dumps(plan.to_json(), indent=2, sort_keys=True) + "\n"}
        jobs = []
        for index, (labels, shards) in enumerate(groups):
            job_name = _dns_name(name, labels)
            key = f"shards-{index}.txt"
            data[key] = "".join(s.id + "\n" for s in shards)
            meta = {"name": job_name, "labels": {**common, "app.kubernetes.io/component": "build"},
                    "annotations": {"trt-orchestrator/runner-labels": json.dumps(list(labels)),
                                    "trt-orchestrator/shards": json.dumps([s.id for s in shards])}}
            if namespace:
                meta["namespace"] = namespace
            pod_spec = {
                "restartPolicy": "Never",  # required by backoffLimitPerIndex
                "containers": [{
                    "name": "orchestrate",
                    "image": image,
                    "command": ["/bin/sh", "-c", _SCRIPT],
                    "workingDir": "/work",
                    "volumeMounts": [{"name": "plan", "mountPath": "/plan", "readOnly": True},
                                     {"name": "work", "mountPath": "/work"}],
                }],
                "volumes": [
                    {"name": "plan", "configMap": {"name": config_name, "items": [
                        {"key": "plan.json", "path": "plan.json"}, {"key": key, "path": "shards.txt"}]}},
                    # Scratch space for .orchestrate/; swap for a PersistentVolumeClaim to keep engines and caches.
                    {"name": "work", "emptyDir": {}},
                ],
            }
            selector = node_selector(labels)
            if selector:
                pod_spec["nodeSelector"] = selector
            jobs.append({
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": meta,
                "spec": {
                    "completionMode": "Indexed",
                    "completions": len(shards),
                    "parallelism": len(shards),
                    # like `fail-fast: false`: one shard failing does not stop the others (Kubernetes >= 1.29)
                    "backoffLimitPerIndex": backoff_limit_per_index,
                    "template": {"metadata": {"labels": {**common, "app.kubernetes.io/component": "build"}},
                                 "spec": pod_spec},
                },
            })
        config = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": config_name, "labels": dict(common),
                               "annotations": {"trt-orchestrator/manifests": json.dumps(sorted(set(manifests)))}},
                  "data": data}
        if namespace:
            config["metadata"]["namespace"] = namespace
        size = sum(len(k) + len(v.encode()) for k, v in data.items())
        if size > CONFIGMAP_LIMIT:
            raise CIError(f"the plan is {size} bytes, more than a ConfigMap can hold ({CONFIGMAP_LIMIT})",
                          hint="split the manifests into several plans and render each")
        return {output_path: _dump_all([config, *jobs])}


emitter = KubernetesEmitter()
