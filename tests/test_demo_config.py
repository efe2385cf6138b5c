"""The demo's settings and their checks (moeprof.demo.config): jax-free, in the user's words."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from moeprof.demo.config import (
    OPTION_NAMES,
    DemoConfig,
    DemoConfigError,
    checked,
    config_problems,
    from_fields,
    learning_rate_of,
)

from .helpers import ROOT as REPO


def test_importing_the_config_starts_no_jax() -> None:
    code = "import sys, moeprof.demo.config; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_learning_rate_keeps_adams_step_a_fixed_fraction_of_the_initial_weights() -> None:
    # Adam moves each weight by about the learning rate; the weights start at 1/sqrt(fan-in)
    assert learning_rate_of(DemoConfig(hidden=64)) == pytest.approx(0.01)  # the CPU demo's rate, as before
    assert learning_rate_of(DemoConfig(hidden=2048)) == pytest.approx(0.08 / math.sqrt(2048))
    for hidden in (64, 512, 2048):
        assert learning_rate_of(DemoConfig(hidden=hidden)) * math.sqrt(hidden) == pytest.approx(0.08)
    assert learning_rate_of(DemoConfig(hidden=2048, learning_rate=0.5)) == 0.5  # what was given wins


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"expert_ffn": -4}, "--expert-ffn must be a whole number >= 1 (got -4)"),
        ({"hidden": 0}, "--hidden must be a whole number >= 1 (got 0)"),
        ({"experts": 1}, "--top-k (2) must be at most --experts (1)"),
        ({"top_k": 0}, "--top-k must be a whole number >= 1 (got 0)"),
        ({"top_k": 99}, "--top-k (99) must be at most --experts (16)"),
        ({"layers": 0}, "--layers must be a whole number >= 1 (got 0)"),
        ({"steps": 0}, "--steps must be a whole number >= 1 (got 0)"),
        ({"tokens_per_device": 0}, "--tokens must be a whole number >= 1 (got 0)"),
        (
            {"capacity_factor": 0.0},
            "--capacity-factor must be a number > 0 (got 0.0; leave it out for dropless routing)",
        ),
        ({"capacity_factor": math.inf}, "--capacity-factor must be a number > 0 (got inf; leave it out for dropless"),
        ({"dtype": "int8"}, "--dtype must be float32 or bfloat16 (got 'int8')"),
        ({"expert_compute": "dense"}, "--expert-compute must be auto, ragged_dot or tiled (got 'dense')"),
        ({"permute_backward": "x"}, "--permute-backward must be scatter or gather (got 'x')"),
        ({"router_skew": -1.0}, "--router-skew must be a finite number >= 0 (got -1.0)"),
        ({"warmup_steps": -1}, "--warmup must be a whole number >= 0 (got -1)"),
    ],
)
def test_each_bad_option_is_named_as_the_command_spells_it(given: dict, said: str) -> None:
    problems = config_problems(from_fields(given), names=OPTION_NAMES)
    assert len(problems) == 1 and problems[0].startswith(said), problems


def test_device_checks_wait_for_the_device_count() -> None:
    cfg = DemoConfig(experts=6, hidden=64, expert_ffn=128)
    assert config_problems(cfg) == []  # the parent does not know the devices
    assert config_problems(cfg, 4, OPTION_NAMES) == ["--experts (6) must be a multiple of the devices (4)"]
    with pytest.raises(DemoConfigError, match="must be multiples of the devices"):
        checked(DemoConfig(hidden=66), 4)


def test_the_library_keeps_its_field_names() -> None:
    assert config_problems(DemoConfig(top_k=0)) == ["top_k must be a whole number >= 1 (got 0)"]
    assert from_fields({"hidden": 128, "not_a_field": 1}) == DemoConfig(hidden=128)
