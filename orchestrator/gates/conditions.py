"""The GPU's state around each benchmark block: SM clock, temperature and NVML's clock event reasons, read through
NVML (nvidia-ml-py, the ``gpu`` extra) just before and just after the block.

Why: a benchmark block that ran while the GPU clocked down (power or thermal capping, an idle clock still ramping)
is slow for a reason the engine has nothing to do with, and the verdict should say so. The readings are taken
between blocks, outside every timed loop, so they add no work to what is timed; NVML answers from the driver
without touching the CUDA context (one read is tens of microseconds: nothing like polling ``nvidia-smi``, which
starts a process and perturbs a short step). Where NVML is missing (no driver, no ``nvidia-ml-py``, a Jetson) the
probe is None and the verdict notes that the conditions were not recorded.

Which GPU: the first of ``CUDA_VISIBLE_DEVICES`` when it names one (an index, as NVML numbers GPUs in PCI bus order
like ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; or a ``GPU-…`` UUID), else NVML's device 0: the device the runtimes use.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# nvmlClocksEventReason* bits (nvml.h; "ClocksThrottleReasons" before driver 535) worth naming in a verdict
_REASONS = {0x1: "gpu idle", 0x2: "application clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
            0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown", 0x80: "hardware power brake",
            0x100: "display clocks setting"}


@dataclass(frozen=True)
class DeviceSample:
    """One NVML reading; None where the driver does not report the value."""

    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    clock_event_reasons: int | None = None  # bitmask of nvmlClocksEventReason*

    def reasons(self) -> tuple[str, ...]:
        """The slowdown reasons set in ``clock_event_reasons`` (idle excluded: a block starts from idle)."""
        bits = self.clock_event_reasons or 0
        return tuple(name for bit, name in _REASONS.items() if bits & bit and bit != 0x1)

    def to_json(self) -> dict[str, Any]:
        return {"sm_clock_mhz": self.sm_clock_mhz, "temperature_c": self.temperature_c,
                "clock_event_reasons": self.clock_event_reasons}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DeviceSample:
        return cls(d.get("sm_clock_mhz"), d.get("temperature_c"), d.get("clock_event_reasons"))


@dataclass(frozen=True)
class BlockConditions:
    """The GPU just before and just after one timed block (one ``Session.benchmark`` call)."""

    before: DeviceSample
    after: DeviceSample

    def to_json(self) -> dict[str, Any]:
        return {"before": self.before.to_json(), "after": self.after.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BlockConditions:
        return cls(DeviceSample.from_json(d.get("before") or {}), DeviceSample.from_json(d.get("after") or {}))

    def text(self) -> str:
        """``1980->1980 MHz, 31->33 °C`` (plus the slowdown reasons seen after the block)."""
        def pair(a: int | None, b: int | None, unit: str) -> str:
            return f"{'-' if a is None else a}->{'-' if b is None else b} {unit}"
        out = f"{pair(self.before.sm_clock_mhz, self.after.sm_clock_mhz, 'MHz')}, " \
              f"{pair(self.before.temperature_c, self.after.temperature_c, '°C')}"
        reasons = self.after.reasons()
        return out + (f" ({', '.join(reasons)})" if reasons else "")


Probe = Callable[[], DeviceSample]


def _device_handle(pynvml: Any) -> Any:
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")[0].strip()
    if first.startswith("GPU-"):
        return pynvml.nvmlDeviceGetHandleByUUID(first)
    return pynvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)


def nvml_probe() -> Probe | None:
    """A reader of the benchmarked GPU's clock, temperature and clock event reasons, or None without NVML. NVML is
    initialised once here and stays so for the process (nvmlInit is reference-counted; the readings are cheap)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = _device_handle(pynvml)
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded / InvalidArgument: no usable GPU here
        return None
    reasons_of = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)

    def read(fn: Callable[..., Any], *args: Any) -> int | None:
        try:
            return int(fn(handle, *args))
        except Exception:  # NVMLError_NotSupported on some boards: that value stays unknown
            return None

    def sample() -> DeviceSample:
        return DeviceSample(sm_clock_mhz=read(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
                            temperature_c=read(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU),
                            clock_event_reasons=read(reasons_of) if reasons_of else None)

    return sample
