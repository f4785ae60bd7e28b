"""The TF devices a placement plan runs on: GPUs where the process has enough, else logical CPUs.

A plan names devices by index (0, 1, ...). TF pins each op with `tf.device` (see the
interpreter's `Machine.device`) and inserts the transfers where an edge crosses devices. On a
machine without enough GPUs, the host CPU is split into logical devices, which must happen
before TF initialises its runtime: `names` does it when it can and says so when it is too late.
A plan naming a device the process lacks is an error here, before tracing: TF would otherwise
place the op silently elsewhere. A data-parallel mesh (`replicas`) takes its devices the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import tensorflow as tf

from seqc.spec.errors import DeviceError
from seqc.spec.ir import Span


def names(count: int) -> list[str]:
    """TF names of `count` devices: `/device:GPU:i` when there are that many GPUs, else
    `/device:CPU:i` on as many logical CPUs (configured here if TF has not started yet; `check`
    then says whether the devices a plan uses exist)."""
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= count:
        return [f"/device:GPU:{i}" for i in range(count)]
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu) or []
    if len(configured) < count:
        # Once the runtime has started its devices are fixed (RuntimeError): `check` says so.
        with contextlib.suppress(RuntimeError):
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
            )
    return [f"/device:CPU:{i}" for i in range(count)]


def check(devices: Iterable[str]) -> None:
    """Every device named must exist in this process."""
    logical = tf.config.list_logical_devices()
    known = {(d.device_type, int(d.name.rsplit(":", 1)[1])) for d in logical}
    for device in sorted(set(devices)):
        spec = tf.DeviceSpec.from_string(device)
        if (spec.device_type, spec.device_index or 0) not in known:
            raise DeviceError(
                f"the placement needs device {device}, but this TensorFlow process has only "
                f"{', '.join(d.name for d in logical)}",
                code="unknown-device",
                hint="logical CPU devices must be set up before TensorFlow starts: place from a "
                "fresh process (seqc train does), or plan for fewer devices",
            )


def replicas(count: int, span: Span | None = None) -> list[str]:
    """The devices of a `MirroredStrategy` over `count` replicas (as `names` picks them), each
    checked to exist: logical CPUs are fixed once TF has computed anything, and a strategy over
    devices that do not exist fails later with a message about neither the mesh nor the fix."""
    wanted = names(count)
    have = sorted(d.name for d in tf.config.list_logical_devices())  # `/device:CPU:0`, ...
    if set(wanted) - set(have):
        raise DeviceError(
            f"the mesh needs {count} devices for its replicas, but this TensorFlow process has "
            f"only {', '.join(have)}, and TensorFlow had started before its CPU could be split",
            span=span,
            code="mesh-devices",
            expected=f"{count} devices",
            found=str(len(have)),
            hint="train from a fresh process (seqc train does), or set distribution.mesh to the "
            "devices there are",
        )
    return wanted
