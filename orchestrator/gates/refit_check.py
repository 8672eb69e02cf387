"""A refitted engine against the outputs its gate recorded (``targets[].weights``, docs/refit.md).

Every parity gate records the engine's outputs on its drift case with the digest of each sample's inputs
(``outputs.npz``, published with the engine; ``gates.drift``). A deployment that refits a stripped engine checks the
result on exactly those samples: the gate's random inputs are drawn again from what its record says (the parity
data's seed and sample count, the model's declared inputs and constraints, each profile's shapes), each sample's
inputs must hash to the digest the gate recorded (else they are not the inputs the gate saw, and nothing is
compared), and the engine's outputs must agree with the recorded ones within the parity tolerance the gate was
given (``gate.key_inputs.parity.tolerances``). A gate that read a dataset cannot be replayed where the dataset is not:
that is said, never passed over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.contracts.runtime import Session
from orchestrator.core.model import (
    DataSource,
    DimConstraint,
    GateSettings,
    InputSpec,
    Model,
    ParityGate,
    ProfileShapes,
    SourceModel,
)
from orchestrator.core.tolerances import ResolvedTolerance
from orchestrator.gates.drift import INPUTS_KEY, drift_case, inputs_digest
from orchestrator.gates.inputs import random_cases
from orchestrator.gates.metrics import compare_output


@dataclass(frozen=True)
class RefitCheck:
    """What the refitted engine reproduced: samples compared, per output the worst max abs error, and why not."""

    compared: int
    outputs: dict[str, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.problems and self.compared > 0

    def to_json(self) -> dict[str, Any]:
        return {"compared": self.compared, "max_abs_error": dict(self.outputs), "problems": list(self.problems),
                "passed": self.passed}


def _model_of(meta: Mapping[str, Any], parity: Mapping[str, Any]) -> Model:
    """The gate's view of the model, rebuilt from the record: declared inputs, constraints, each profile's shapes
    and the parity data (enough for ``gates.inputs.random_cases`` to draw the very samples the gate drew)."""
    declared = (parity.get("model") or {}).get("inputs") or {}
    profiles = (meta.get("key_inputs") or {}).get("profiles") or []
    inputs = []
    for name, spec in declared.items():
        shapes = {str(p["name"]): ProfileShapes(tuple(p["shapes"][name]["min"]), tuple(p["shapes"][name]["opt"]),
                                                tuple(p["shapes"][name]["max"]))
                  for p in profiles if name in (p.get("shapes") or {})}
        inputs.append(InputSpec(str(name), tuple(spec.get("shape") or ()), str(spec.get("dtype") or "float32"),
                                shapes))
    constraints = tuple(DimConstraint(str(dim), c.get("multiple_of"), c.get("min"), c.get("max"))
                        for dim, c in ((parity.get("model") or {}).get("constraints") or {}).items())
    data = parity.get("data") or {}
    source = DataSource(None, None, int(data.get("samples") or 1), int(data.get("seed") or 0))
    return Model(name=str(meta["model"]["name"]), version=str(meta["model"]["version"]), source=SourceModel(""),
                 inputs=tuple(inputs), constraints=constraints, precisions=(), profile_sets={}, calibration=None,
                 gate=GateSettings(parity=ParityGate(data=source)))


def _tolerance(parity: Mapping[str, Any], output: str, tf32: bool) -> ResolvedTolerance:
    tolerances = parity.get("tolerances") or {}
    chosen = (tolerances.get("per_output") or {}).get(output) or tolerances.get("engine_tf32" if tf32 else "engine")
    return ResolvedTolerance.from_json(dict(chosen or {"atol": 1e-4, "rtol": 1e-3}))


def check_refitted(meta: Mapping[str, Any], recorded: Mapping[str, np.ndarray],
                   session_for: Callable[[int], Session]) -> RefitCheck:
    """``session_for(profile_index)``: a session of the refitted engine on that optimization profile."""
    parity = ((meta.get("gates") or {}).get("key_inputs") or {}).get("parity")
    if not isinstance(parity, Mapping):
        return RefitCheck(0, problems=("its parity gate was off: no recorded outputs to check the refit against",))
    if not (parity.get("data") or {}).get("random", True):
        return RefitCheck(0, problems=("its gate ran on a dataset, which is not published with the engine: the "
                                       "recorded outputs cannot be replayed here",))
    model = _model_of(meta, parity)
    profiles = [str(p) for p in (meta.get("profiles") or ())] or [str(meta.get("profile_set"))]
    worst: dict[str, float] = {}
    problems: list[str] = []
    compared = 0
    for index, profile in enumerate(profiles):
        cases = random_cases(model, profile, model.gate.parity.data)
        kept = drift_case([c.label for c in cases])
        case = next((c for c in cases if c.label == kept), None)
        if case is None:
            continue
        session = session_for(index)
        try:
            for n, sample in enumerate(case.samples):
                prefix = f"{profile}/{case.label}/{n}/"
                if prefix + INPUTS_KEY not in recorded:
                    continue
                if str(recorded[prefix + INPUTS_KEY]) != inputs_digest(sample):
                    problems.append(f"{prefix.rstrip('/')}: the inputs drawn again do not hash to the ones the gate "
                                    "recorded; not compared")
                    continue
                out = session.run(sample)
                for name, value in out.items():
                    want = recorded.get(prefix + name)
                    if want is None:
                        continue
                    verdict = compare_output(name, iter([(value, want)]), _tolerance(parity, name, session.tf32))
                    error = float(verdict.max_abs_error) if verdict.max_abs_error is not None else float("nan")
                    worst[name] = max(worst.get(name, 0.0), error) if error == error else error
                    if verdict.status == "failed":
                        problems += [f"{prefix}{name}: {r}" for r in verdict.reasons]
                compared += 1
        finally:
            session.close()
    if not compared and not problems:
        problems.append("no sample of its recorded outputs could be replayed (gate pending, or drift off when it "
                        "was gated)")
    return RefitCheck(compared, worst, tuple(problems))
