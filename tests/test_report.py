"""``moeprof report``: one self-contained HTML file, its embedded data matching the analysis, drawn by a browser."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core.events import concat
from moeprof.pipeline import analyze_job, load
from moeprof.pipeline import analyze_paths as _analyze_paths

from .conftest import ROOT, SAMPLES

runner = CliRunner()
TWO_HOST = SAMPLES / "synthetic_2host_4gpu"
CPU = SAMPLES / "cpu_moe_8dev"
CHROMIUM = next(
    (
        p
        for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
        if p and Path(p).exists()
    ),
    None,
)


def analyze_paths(*args: object, **kwargs: object) -> SimpleNamespace:
    """The analysis in its JSON form (the contract the renderers' output is checked against)."""
    return SimpleNamespace(**_analyze_paths(*args, **kwargs).to_json())  # type: ignore[arg-type]


def device_activity(traces: list) -> object:
    return concat([t.events for t in traces])


def make(tmp: Path, name: str, *args: str) -> tuple[Path, str]:
    out = tmp / f"{name}.html"
    res = runner.invoke(app, ["report", *args, "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out, out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    tmp = tmp_path_factory.mktemp("reports")
    return {
        "two_host": make(tmp, "two_host", str(TWO_HOST)),
        "cpu": make(tmp, "cpu", str(CPU)),
        "binned": make(tmp, "binned", str(CPU), "--max-events", "1000"),
        "stream": make(tmp, "stream", str(TWO_HOST), "--lanes", "stream"),
        "compare": make(tmp, "compare", str(TWO_HOST), str(SAMPLES / "synthetic_1host_8gpu")),
    }


def embedded(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="moeprof-data">(.*?)</script>', text, re.S)
    assert m, "no embedded data"
    return json.loads(m.group(1))


def decode(b64: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype=dtype)


@pytest.mark.parametrize("name", ["two_host", "cpu", "binned", "stream", "compare"])
def test_one_file_nothing_from_the_network(reports, name):
    path, text = reports[name]
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    # no resource may come from elsewhere: no src/href/url() pointing anywhere but inside the page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?!#)[a-z]*:?//""", text, re.I)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?!#)[^"'#\s>]+\.(?:js|css)""", text, re.I)
    assert "url(" not in text and "@import" not in text and "<link" not in text.lower()
    assert "http://" not in text and "https://" not in text
    assert 10_000 < path.stat().st_size < 2_000_000


def test_embedded_timeline_matches_the_analysis(reports):
    _, text = reports["two_host"]
    data = embedded(text)
    result = analyze_paths([TWO_HOST])
    (tl,) = data["inputs"]
    assert [lane["label"] for lane in tl["lanes"]] == [d["device"] for d in result.devices]
    assert tl["unit"] == 1 and "bins" not in tl
    assert tl["events"] == len(device_activity(load([TWO_HOST])))
    for lane, dev in zip(tl["lanes"], result.devices):
        tracks = {t["name"]: t for t in lane["tracks"]}
        sums = {}
        for t in lane["tracks"]:
            d, c = decode(t["d"], "<u4"), decode(t["c"], "u1")
            for code in np.unique(c):
                sums[int(code)] = sums.get(int(code), 0) + int(d[c == code].sum())
        # durations are whole ns: they add up to the figures exactly
        assert sums.get(0, 0) == dev["compute_ns"]
        assert sums.get(1, 0) + sums.get(2, 0) + sums.get(3, 0) == dev["comm_ns"]
        assert sums.get(4, 0) == dev["memcpy_ns"] and sums.get(5, 0) == dev["other_ns"]
        assert int(decode(lane["exposed"]["d"], "<u4").sum()) == dev["exposed_comm_ns"]
        assert set(tracks) == {"compute", "comm", "copy / other"}
        starts = decode(tracks["compute"]["s"], "<u4")
        assert (np.diff(starts.astype(np.int64)) >= 0).all(), "tracks are sorted by start (the viewer bisects)"
    assert len(tl["lanes"][0]["steps"]) == len([s for s in result.steps if s["device"] == result.devices[0]["device"]])


def test_bars_tables_and_headline(reports):
    _, text = reports["two_host"]
    result = analyze_paths([TWO_HOST])
    share = f"comm share {100 * result.total['comm_share']:.1f}%"
    assert share in re.search(r"<title>(.*?)</title>", text).group(1)
    assert text.count('<figure class="bars">') == 2  # per device, per step
    assert all(f">{c['name']}<" in text for c in result.collectives)
    assert text.count("<li><b>") == min(len(result.opportunities), 12)
    assert "Run manifest" not in text  # not a run folder


def test_run_folder_shows_its_manifest(reports):
    _, text = reports["cpu"]
    assert "Run manifest" in text and "--xla_force_host_platform_device_count=8" in text
    assert "tokens/s" in text


def test_binned_past_the_cap(reports):
    _, text = reports["binned"]
    (tl,) = embedded(text)["inputs"]
    result = analyze_paths([CPU])
    bins = tl["bins"]
    assert 0 <= bins["w0"] < bins["w1"] <= tl["span"]
    raw = sum(t["n"] for lane in tl["lanes"] for t in [*lane["tracks"], lane["exposed"]])
    assert raw <= 1000, "raw events only inside the detail window, within the cap"
    width = tl["span"] * tl["unit"] / bins["n"]
    for lane, dev in zip(tl["lanes"], result.devices):
        coverage = decode(lane["exposed"]["b"]["6"], "u1").astype(float) / 255 * width
        # 8-bit coverage per bin: within half a level per bin of the exact exposed time
        assert abs(coverage.sum() - dev["exposed_comm_ns"]) <= bins["n"] * width / 510 + 1


def test_stream_lanes(reports):
    _, text = reports["stream"]
    (tl,) = embedded(text)["inputs"]
    events = device_activity(load([TWO_HOST]))
    streams = events.groupby("device", observed=True)["stream"].nunique()
    assert len(tl["lanes"]) == int(streams.sum()) + len(streams)  # one per stream, one exposed band per device
    assert sum(t["n"] for lane in tl["lanes"] for t in lane["tracks"]) == len(events)


def test_comparison(reports):
    _, text = reports["compare"]
    data = embedded(text)
    assert len(data["inputs"]) == 2
    assert '<section id="compare">' in text
    for path in (TWO_HOST, SAMPLES / "synthetic_1host_8gpu"):
        share = analyze_paths([path]).total["comm_share"]
        assert f"{100 * share:.1f}%" in text.split('<section class="input"')[0]


def test_merge_makes_one_job_of_several_files(tmp_path):
    files = sorted(str(f) for f in TWO_HOST.glob("*.xplane.pb"))
    _, text = make(tmp_path, "merged", *files, "--merge")
    data = embedded(text)
    assert len(data["inputs"]) == 1 and len(data["inputs"][0]["lanes"]) == 8
    assert '<section id="compare">' not in text


def test_many_devices_keep_the_most_exposed(monkeypatch):
    import moeprof.reports.html as html_report

    monkeypatch.setattr(html_report, "MAX_LANES", 3)
    analysis, traces = analyze_job([TWO_HOST])
    result = SimpleNamespace(**analysis.to_json())
    item = html_report.ReportInput("x", analysis, traces)
    tl = html_report.timeline_data(item, "device", 1_000_000, 100_000)
    worst = sorted(result.devices, key=lambda d: -d["exposed_comm_ns"])[:3]
    assert {lane["label"] for lane in tl["lanes"]} == {d["device"] for d in worst}
    assert (tl["devices"], tl["devices_total"]) == (3, 8)


def test_step_selection_narrows_the_timeline(tmp_path):
    _, text = make(tmp_path, "sel", str(TWO_HOST), "--skip-first", "1")
    (tl,) = embedded(text)["inputs"]
    steps = [s for s in analyze_paths([TWO_HOST]).steps if s["step"] >= 1]
    assert tl["t0"] == min(s["start_ns"] for s in steps)
    assert tl["span"] == max(s["end_ns"] for s in steps) - tl["t0"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lanes", "kernel"], "--lanes"),
        (["-o", "x.txt"], "HTML"),
        (["--steps", "nonsense"], ""),
    ],
)
def test_bad_usage_is_one_line(tmp_path, args, message):
    out = ["-o", str(tmp_path / "r.html")] if "-o" not in args else []
    res = runner.invoke(app, ["report", str(TWO_HOST), *out, *args])
    assert res.exit_code == 2
    assert message in res.output and "Traceback" not in res.output


def test_missing_input(tmp_path):
    res = runner.invoke(app, ["report", str(tmp_path / "nope"), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 2 and "no such file" in res.output


def test_docs_screenshot_is_small():
    shot = ROOT / "docs" / "img" / "report.png"
    assert shot.exists() and shot.stat().st_size < 300_000


# ---------------------------------------------------------------- a real browser


def read_png(data: bytes) -> tuple[int, int, np.ndarray]:
    """Width, height and the RGB pixels of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color in (2, 6)
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1).astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prev) & 0xFF
        else:  # Sub, Average, Paeth depend on the pixel to the left: one pass along the line
            cur = np.zeros(stride, dtype=np.int32)
            for x in range(stride):
                a = cur[x - bpp] if x >= bpp else 0
                b = prev[x]
                c = prev[x - bpp] if x >= bpp else 0
                if kind == 1:
                    pred = a
                elif kind == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + pred) & 0xFF
        out[y] = cur
        prev = cur
    return width, height, out.reshape(height, width, bpp)[:, :, :3]


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        f"--user-data-dir={tmp / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")


@needs_chromium
@pytest.mark.parametrize("name, timelines, lanes", [("cpu", 1, 8), ("binned", 1, 8), ("compare", 2, 16)])
def test_browser_draws_without_errors(reports, tmp_path, name, timelines, lanes):
    path, _ = reports[name]
    # "#selftest" makes the page drive its own zoom, pan, hover and reset and write the outcome into the DOM
    res = chromium(tmp_path, "--dump-dom", f"{path.as_uri()}#selftest")
    dom = res.stdout
    status = re.search(r'<span id="moeprof-status"([^>]*)>', dom)
    assert status, f"page did not render: {res.stderr[-2000:]}"
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', status.group(1)))
    errors = re.search(r'<ul id="moeprof-errors"[^>]*>(.*?)</ul>', dom, re.S).group(1)
    assert "data-errors" not in dom.split("<head", 1)[0], errors
    assert attrs["data-ok"] == "1", errors
    assert attrs["data-timelines"] == str(timelines)
    assert attrs["data-lanes"] == str(lanes)
    assert int(attrs["data-inked"]) > 10_000, "the canvas stayed blank"
    assert attrs["data-selftest"] == "ok", attrs.get("data-selftest-detail")
    assert "Uncaught" not in res.stderr


@needs_chromium
def test_browser_screenshot_is_not_blank(reports, tmp_path):
    path, _ = reports["cpu"]
    shot = tmp_path / "shot.png"
    res = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,1000", path.as_uri())
    assert shot.exists(), res.stderr[-2000:]
    width, height, rgb = read_png(shot.read_bytes())
    assert (width, height) == (1400, 1000)
    # the timeline's colours are on screen: compute green, NVLink cyan and exposed red (from the legend and lanes)
    for color in ((0x43, 0xA0, 0x47), (0x00, 0xAC, 0xC1), (0xE5, 0x39, 0x35)):
        close = (np.abs(rgb.astype(int) - np.array(color)).sum(axis=2) < 30).sum()
        assert close > 2_000, f"too few pixels of {color}"
