"""Every HTML report draws in a browser (issue 49): a TPU capture's page said "the timeline script reported
errors" (``TypeError: Cannot read properties of undefined (reading '0') at Timeline.paint``: a chip with no
exposed communication has an exposed-comm track with no category to paint), while the browser tests drew only
CPU and GPU pages. Each page here is drawn by headless chromium, which runs the page's own self-test (zoom, pan,
hover, reset) and writes the outcome into the status element the test reads back."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeprof.cli.main import app

from .helpers import SAMPLES, chromium, needs_chromium

runner = CliRunner()

PAGES = {
    # committed TPU v5e captures (one chip each): the demo step, an ablation's base, the MoE step of the xprof check
    "tpu_v5e_demo": ([SAMPLES / "tpu_v5e_demo"], 1),
    "tpu_v5e_ablation_base": ([SAMPLES / "tpu_v5e_ablation" / "base"], 1),
    "tpu_v5e_moe_step": ([SAMPLES / "tpu_v5e_moe_step" / "a"], 1),
    # the generator's two slices of 4 chips: ICI and DCN, collectives exposed
    "synthetic_tpu_2slice": ([SAMPLES / "synthetic_tpu_2slice"], 8),
    # a GPU job beside them
    "synthetic_1host_8gpu": ([SAMPLES / "synthetic_1host_8gpu"], 8),
}


def _page(tmp_path: Path, name: str) -> Path:
    paths, _ = PAGES[name]
    out = tmp_path / f"{name}.html"
    res = runner.invoke(app, ["report", *map(str, paths), "-o", str(out), "--no-projection"])
    assert res.exit_code == 0, res.output
    return out


def status_of(dom: str) -> dict[str, str]:
    """The page's status element's attributes, as its script left them."""
    status = re.search(r'<span id="moeprof-status"([^>]*)>', dom)
    assert status, dom[-2000:]
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', status.group(1))}


@needs_chromium
@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_draws_without_a_script_error(tmp_path, name):
    path = _page(tmp_path, name)
    res = chromium(tmp_path, "--dump-dom", f"{path.as_uri()}#selftest")
    dom = res.stdout
    attrs = status_of(dom)
    errors = re.search(r'<ul id="moeprof-errors"[^>]*>(.*?)</ul>', dom, re.S)
    assert errors is not None and not errors.group(1).strip(), errors.group(1) if errors else dom[-2000:]
    assert "data-errors" not in dom.split("<head", 1)[0]
    assert attrs["data-ok"] == "1", attrs
    assert attrs["data-timelines"] == "1" and attrs["data-lanes"] == str(PAGES[name][1]), attrs
    assert int(attrs["data-inked"]) > 1_000, "the canvas stayed blank"
    assert attrs["data-selftest"] == "ok", attrs.get("data-selftest-detail")
    (selftest,) = json.loads(attrs["data-selftest-detail"])
    assert selftest["hovered"], selftest  # a kernel's tip under the pointer
    said = re.search(r'<span id="moeprof-status"[^>]*>(.*?)</span>', dom, re.S)
    assert said is not None and said.group(1).startswith("timeline: "), said.group(1) if said else dom[-2000:]
    assert "Uncaught" not in res.stderr


@needs_chromium
def test_a_tpu_page_with_nothing_exposed_paints_its_empty_exposed_track(tmp_path):
    """The cause, kept in view: the demo chip's exposed-comm track holds no activity and no category."""
    path = _page(tmp_path, "tpu_v5e_demo")
    data = json.loads(re.search(r'<script type="application/json" id="moeprof-data">(.*?)</script>',
                                path.read_text(), re.S).group(1))  # fmt: skip
    (lane,) = data["inputs"][0]["lanes"]
    assert lane["exposed"]["n"] == 0 and lane["exposed"]["c"] == "" and "b" not in lane["exposed"]
    res = chromium(tmp_path, "--dump-dom", path.as_uri())
    assert status_of(res.stdout)["data-ok"] == "1"
