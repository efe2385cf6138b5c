"""What the screens say, in the words and units that fit the figures (issue 49): the devices a trace names against
those that ran work, the fabric of virtual CPU devices, host copies against the compute that could hide them,
per-step figures whose parts add up to their whole. The figures are computed here from the inputs by other
routes (jax's ProfileData, the JSON's per-device rows, the steps' rows)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from moeprof.cli.main import app

from .helpers import shared_trace

runner = CliRunner()


def _first_lines(*args: str, n: int = 8) -> list[str]:
    res = runner.invoke(app, ["analyze", *args], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines()[:n]


# ---------------------------------------------------------------- the devices a trace names (issue 49)


def test_a_trace_whose_planes_did_not_all_run_work_says_how_many_of_them_did():
    """tf_bert_8xv100_worker: 8 GPU planes, 3 with events (counted by jax's own XPlane reader). The headline said
    "3 devices from 1 trace file" above "GPUs: 8 x NVIDIA ...": now how many of the named GPUs had activity."""
    from jax.profiler import ProfileData

    path = shared_trace("xplane/tf_bert_8xv100_worker.xplane.pb")
    planes = [p for p in ProfileData.from_file(str(path)).planes if p.name.startswith("/device:GPU:")]
    active = [p for p in planes if any(True for line in p.lines for _ in line.events)]
    assert (len(planes), len(active)) == (8, 3)
    text = "\n".join(_first_lines(str(path)))
    assert f"{len(active)} of the {len(planes)} GPUs the trace names had device activity, 1 step" in text, text
    assert f"GPUs: {len(planes)} x NVIDIA" in text
    assert "devices from 1 trace file" not in text


def test_a_trace_whose_every_named_device_ran_work_keeps_its_count():
    text = "\n".join(_first_lines(str(shared_trace("xplane/jax_conv_8xmi300.xplane.pb"))))
    assert "8 devices from 1 trace file, 5 steps" in text and "had device activity" not in text


# ---------------------------------------------------------------- --what-if's help, from the terms' table


@pytest.mark.parametrize("command", ["analyze", "report", "annotate"])
def test_every_term_of_the_table_is_in_each_commands_what_if_help(command):
    """analyze --help left out the tokens term (the help was written by hand three times): every command that
    takes --what-if lists every registered term, one a line, with its forms and its help line."""
    from moeprof.insight.projection.terms import TERMS

    res = runner.invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", res.output).split())
    assert len(TERMS) >= 4
    for term in TERMS:
        line = " ".join(f"{', '.join(term.forms)}: {term.help}.".split())
        assert line in flat, (term.name, flat[flat.find("--what-if") :][:1500])
    # and nothing else lists them: the parser's own message names the same forms
    res = runner.invoke(app, ["analyze", "x.json", "--what-if", "nonsense"])
    assert res.exit_code == 2 and all(form in res.output for term in TERMS for form in term.forms), res.output
