"""A small dropless mixture-of-experts training step in JAX, to profile.

``moeprof.demo.model`` imports jax, and XLA reads ``XLA_FLAGS`` once, when jax
creates its CPU client. To get 8 virtual CPU devices the caller must therefore
call :func:`configure_host_devices` *before* anything imports jax::

    from moeprof.demo import configure_host_devices
    configure_host_devices(8)
    from moeprof.demo import DemoConfig, run_demo   # imports jax now

This package's ``__init__`` does not import jax itself (names from ``model`` are
loaded lazily) so that the first line above is safe.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moeprof.demo.model import (
        DemoConfig,
        DemoResult,
        StepRecord,
        dense_reference_moe,
        run_demo,
        sharded_moe,
    )

HOST_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
_COUNT_FLAG = re.compile(re.escape(HOST_DEVICE_COUNT_FLAG) + r"=\S*")

__all__ = [
    "HOST_DEVICE_COUNT_FLAG",
    "DemoConfig",
    "DemoResult",
    "StepRecord",
    "configure_host_devices",
    "dense_reference_moe",
    "run_demo",
    "sharded_moe",
    "xla_flags_with_host_devices",
]


def xla_flags_with_host_devices(count: int, flags: str | None = None) -> str:
    """``flags`` (default: the current ``XLA_FLAGS``) with the host device count set to ``count``."""
    if count < 1:
        raise ValueError(f"host device count must be >= 1, got {count}")
    current = os.environ.get("XLA_FLAGS", "") if flags is None else flags
    # replace rather than append: XLA would take whichever copy it parses last
    kept = _COUNT_FLAG.sub("", current).split()
    return " ".join([*kept, f"{HOST_DEVICE_COUNT_FLAG}={count}"])


def configure_host_devices(count: int = 8) -> bool:
    """Ask XLA for ``count`` virtual CPU devices; call before jax is imported.

    Returns True when ``XLA_FLAGS`` was set, False when jax was already imported
    (the flag would be ignored then, so the environment is left untouched). The
    flag only affects the host (CPU) platform; on a GPU machine the GPUs are used.
    """
    if "jax" in sys.modules:
        return False
    os.environ["XLA_FLAGS"] = xla_flags_with_host_devices(count)
    return True


def __getattr__(name: str) -> Any:
    # lazy: importing the model imports jax, which must wait for configure_host_devices
    if name in {"DemoConfig", "DemoResult", "StepRecord", "dense_reference_moe", "run_demo", "sharded_moe"}:
        from moeprof.demo import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
