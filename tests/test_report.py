"""``moeprof report``: one self-contained HTML file, its embedded data matching the analysis, drawn by a browser.

The page encodes each device's timeline view; these tests check what it embeds
against the analysis figures, against the views, and against the event table read
independently (exact ns sums for single activities, one 8-bit level per bin).
"""

from __future__ import annotations

import base64
import functools
import html
import json
import re
import struct
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core import intervals as iv
from moeprof.core.analysis import Analysis
from moeprof.core.events import concat
from moeprof.core.summary import ArrivalSkew, ledger_summary
from moeprof.core.timeline import Grid, TimelineOptions, coverage_bins
from moeprof.options import StepOptions
from moeprof.pipeline import Request, analyze_paths, load, run
from moeprof.pipeline.pages import report_inputs
from moeprof.reports import html as html_report

from .helpers import ROOT, SAMPLES, chromium, needs_chromium, shared_trace
from .ledger_brute import comm_instances, instances, stragglers

runner = CliRunner()
TWO_HOST = SAMPLES / "synthetic_2host_4gpu"
CPU = SAMPLES / "cpu_moe_8dev"
# category codes of the page, from the event table's own columns (not the library's mapping)
BUCKET_CODES = {"compute": 0, "memcpy": 4, "other": 5}


def measured(paths: list[Path], lanes: str = "device", max_events: int = html_report.RAW_EVENTS_CAP) -> Analysis:
    """The analysis a one-input page of these options shows (as ``moeprof report`` measures it)."""
    return measured_item(paths, lanes, max_events).analysis


def page_settings() -> tuple[tuple[str, object], ...]:
    """The page module's settings as they are now (a test may patch one): part of what a cached reading is of."""
    return tuple((k, v) for k, v in sorted(vars(html_report).items()) if k.isupper() and isinstance(v, int | float))


def measured_item(
    paths: list[Path], lanes: str = "device", max_events: int = html_report.RAW_EVENTS_CAP
) -> html_report.ReportInput:
    """The page's input: the analysis with the views a one-input page of these options holds beside it."""
    return _measured_item(tuple(paths), lanes, max_events, page_settings())


@functools.cache
def _measured_item(
    paths: tuple[Path, ...], lanes: str, max_events: int, settings: tuple[tuple[str, object], ...]
) -> html_report.ReportInput:
    """Computed once per module run and settings: several tests check one page's input against their own view."""
    (item,) = report_inputs([list(paths)], lanes=lanes, max_events=max_events, what_if=[])
    return item


def device_activity(paths: list[Path]) -> pd.DataFrame:
    """Every activity as read, with its page category code computed here from bucket and IB share (a copy of
    the module's one reading of ``paths``)."""
    return _device_activity(tuple(paths)).copy()


@functools.cache
def _device_activity(paths: tuple[Path, ...]) -> pd.DataFrame:
    events = concat([t.events for t in load(list(paths))])
    bucket = events["bucket"].to_numpy(dtype=object)
    ib = events["ib_fraction"].to_numpy(dtype=np.float64)
    code = np.array([BUCKET_CODES.get(b, 5) for b in bucket], dtype=np.int64)
    comm = bucket == "comm"
    code[comm] = np.where(np.isnan(ib[comm]), 3, np.where(ib[comm] > 0, 2, 1))
    return events.assign(code=code)


def covered_per_bin(seg_s: np.ndarray, seg_e: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """ns of the disjoint segments inside each bin ``[edges[i], edges[i + 1])``, one segment at a time."""
    out = np.zeros(edges.size - 1)
    for s, e in zip(seg_s.tolist(), seg_e.tolist()):
        out += np.clip(edges[1:], s, e) - np.clip(edges[:-1], s, e)
    return out


def make(tmp: Path, name: str, *args: str) -> tuple[Path, str]:
    """A report of the measured timeline alone (the projection beside it: tests/test_projection_surfaces.py)."""
    out = tmp / f"{name}.html"
    if "--what-if" not in args:
        args = (*args, "--no-projection")
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
        "stream_binned": make(tmp, "stream_binned", str(CPU), "--lanes", "stream", "--max-events", "1000"),
        "compare": make(tmp, "compare", str(TWO_HOST), str(SAMPLES / "synthetic_1host_8gpu"), "--compare"),
    }


def embedded(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="moeprof-data">(.*?)</script>', text, re.S)
    assert m, "no embedded data"
    return json.loads(m.group(1))


def decode(b64: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype=dtype)


def raw_sums(tracks: list[dict]) -> dict[int, int]:
    """Per category code, the summed durations of the single activities of these tracks."""
    sums: dict[int, int] = {}
    for t in tracks:
        d, c = decode(t["d"], "<u4"), decode(t["c"], "u1")
        for code in np.unique(c):
            sums[int(code)] = sums.get(int(code), 0) + int(d[c == code].sum())
    return sums


def bin_edges(tl: dict) -> np.ndarray:
    bins, unit = tl["bins"], tl["unit"]
    width = round(bins["w"] * unit)
    origin = tl["t0"] + round(bins["o"] * unit)
    return origin + width * np.arange(bins["n"] + 1, dtype=np.int64)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["two_host", "cpu", "binned", "stream", "stream_binned", "compare"])
def test_one_file_nothing_from_the_network(reports, name):
    path, text = reports[name]
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    # no resource may come from elsewhere: no src/href/url() pointing anywhere but inside the page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?!#)[a-z]*:?//""", text, re.I)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?!#)[^"'#\s>]+\.(?:js|css)""", text, re.I)
    assert "url(" not in text and "@import" not in text and "<link" not in text.lower()
    assert "http://" not in text and "https://" not in text
    assert 10_000 < path.stat().st_size < 2_000_000


@pytest.mark.slow
def test_embedded_timeline_matches_the_analysis(reports):
    _, text = reports["two_host"]
    data = embedded(text)
    result = measured([TWO_HOST])
    (tl,) = data["inputs"]
    assert [lane["label"] for lane in tl["lanes"]] == [d.device for d in result.devices]
    assert tl["unit"] == 1 and "bins" not in tl
    assert tl["events"] == len(device_activity([TWO_HOST]))
    for lane, dev in zip(tl["lanes"], result.devices):
        tracks = {t["name"]: t for t in lane["tracks"]}
        sums = raw_sums(lane["tracks"])
        # durations are whole ns: they add up to the figures exactly
        assert sums.get(0, 0) == dev.compute_ns
        assert sums.get(1, 0) + sums.get(2, 0) + sums.get(3, 0) == dev.comm_ns
        assert sums.get(4, 0) == dev.memcpy_ns and sums.get(5, 0) == dev.other_ns
        assert int(decode(lane["exposed"]["d"], "<u4").sum()) == dev.exposed_comm_ns
        assert set(tracks) == {"compute", "comm", "copy / other"}
        starts = decode(tracks["compute"]["s"], "<u4")
        assert (np.diff(starts.astype(np.int64)) >= 0).all(), "tracks are sorted by start (the viewer bisects)"
    assert len(tl["lanes"][0]["steps"]) == len([s for s in result.steps if s.device == result.devices[0].device])


def test_hover_labels_name_each_activity(reports):
    _, text = reports["two_host"]
    (tl,) = embedded(text)["inputs"]
    events = device_activity([TWO_HOST])
    labels = np.array(tl["labels"], dtype=object)
    for lane in tl["lanes"]:
        rows = events[events["device"] == lane["label"]]
        want = sorted(f"{n}\t{k}" for n, k in zip(rows["name"].astype(str), rows["kind"].astype(str)))
        got = sorted(str(x) for t in lane["tracks"] for x in labels[decode(t["l"], "<u2")])
        assert got == want


@pytest.mark.slow
def test_bars_tables_and_headline(reports):
    _, text = reports["two_host"]
    result = measured([TWO_HOST])
    share = f"comm share {100 * result.total.comm_share:.1f}%"
    assert share in re.search(r"<title>(.*?)</title>", text).group(1)
    assert text.count('<figure class="bars">') == 2  # per device, per step
    assert all(f">{c.name}<" in text for c in result.collectives)
    assert text.count("<li><b>") == min(len(result.opportunities), 12)
    assert "Run manifest" not in text  # not a run folder


@pytest.mark.slow
def test_run_folder_shows_its_manifest(reports):
    _, text = reports["cpu"]
    assert "Run manifest" in text and "--xla_force_host_platform_device_count=8" in text
    assert "tokens/s" in text


@pytest.mark.slow
def test_binned_past_the_cap(reports):
    _, text = reports["binned"]
    (tl,) = embedded(text)["inputs"]
    item = measured_item([CPU], max_events=1000)
    result = item.analysis
    views = {v.device: v for v in item.timeline}
    events = device_activity([CPU])
    bins = tl["bins"]
    assert 0 <= bins["w0"] < bins["w1"] <= tl["span"]
    raw = sum(t["n"] for lane in tl["lanes"] for t in [*lane["tracks"], lane["exposed"]])
    assert raw <= 1000, "raw events only inside the detail window, within the cap"
    edges = bin_edges(tl)
    width = int(edges[1] - edges[0])
    assert edges[0] <= tl["t0"] and edges[-1] >= tl["t0"] + tl["span"] * tl["unit"]
    level = width / 255  # one 8-bit level of a bin, in ns: each device's grid rounds, then the common one
    for lane, dev in zip(tl["lanes"], result.devices):
        view = views[dev.device]
        # exposed comm per bin: against the view's exposed segments, exactly measured here, and the figure
        got = decode(lane["exposed"]["b"]["6"], "u1") / 255 * width
        exact = covered_per_bin(*view.exposed, edges)
        assert np.abs(got - exact).max() <= level + 1
        assert abs(got.sum() - dev.exposed_comm_ns) <= bins["n"] * (level + 1)
        # each category per bin: against the union of that category's activities in the event table
        rows = events[events["device"] == dev.device]
        for track in lane["tracks"]:
            for code, b64 in track["b"].items():
                sel = rows[rows["code"] == int(code)]
                union = iv.union(sel["start_ns"].to_numpy(np.int64), sel["end_ns"].to_numpy(np.int64))
                got = decode(b64, "u1") / 255 * width
                assert np.abs(got - covered_per_bin(*union, edges)).max() <= level + 1
    assert_detail_is_exact(tl, events)


def assert_detail_is_exact(tl: dict, events: pd.DataFrame) -> None:
    """Single activities inside the detail window: per device and category their clipped durations, to the ns."""
    unit = tl["unit"]
    w0, w1 = tl["t0"] + tl["bins"]["w0"] * unit, tl["t0"] + tl["bins"]["w1"] * unit
    assert unit == 1 and w1 > w0
    for lane in tl["lanes"]:
        rows = events[events["device"] == lane["label"]]
        start = np.clip(rows["start_ns"].to_numpy(np.int64), w0, w1)
        end = np.clip(rows["end_ns"].to_numpy(np.int64), w0, w1)
        want = pd.Series(end - start).groupby(rows["code"].to_numpy()).sum()
        assert raw_sums(lane["tracks"]) == {int(c): int(v) for c, v in want.items() if v > 0}


@pytest.mark.slow
def test_views_capped_to_their_first_steps_share_one_detail_window():
    state = run(Request([CPU], timeline=TimelineOptions(raw_cap=150)))
    analysis = state.analysis
    assert not any(v.complete for v in state.timeline)  # each view holds only its first ~150 activities
    tl = html_report.timeline_data(
        html_report.ReportInput("x", analysis, state.timeline, state.instances), "device", 1_000_000, 3_000_000
    )
    assert tl["events"] == len(device_activity([CPU])) < 1_000_000  # under the page's cap, yet binned:
    w0, w1 = tl["t0"] + tl["bins"]["w0"], tl["t0"] + tl["bins"]["w1"]
    assert all(v.detail[0] <= w0 < w1 <= v.detail[1] for v in state.timeline)  # inside every view's window
    assert_detail_is_exact(tl, device_activity([CPU]))


def test_stream_lanes(reports):
    _, text = reports["stream"]
    (tl,) = embedded(text)["inputs"]
    events = device_activity([TWO_HOST])
    streams = events.groupby("device", observed=True)["stream"].nunique()
    assert len(tl["lanes"]) == int(streams.sum()) + len(streams)  # one per stream, one exposed band per device
    assert sum(t["n"] for lane in tl["lanes"] for t in lane["tracks"]) == len(events)
    for lane in tl["lanes"]:
        if lane["tracks"]:
            rows = events[(events["device"] == lane["device"]) & (events["stream"] == lane["stream"])]
            want = (rows["end_ns"] - rows["start_ns"]).groupby(rows["code"].to_numpy()).sum()
            assert raw_sums(lane["tracks"]) == {int(c): int(v) for c, v in want.items() if v > 0}


@pytest.mark.slow
def test_stream_lanes_past_the_cap(reports):
    _, text = reports["stream_binned"]
    (tl,) = embedded(text)["inputs"]
    events = device_activity([CPU])
    streams = events.groupby("device", observed=True)["stream"].nunique()
    assert len(tl["lanes"]) == int(streams.sum()) + len(streams)
    edges = bin_edges(tl)
    level = (edges[1] - edges[0]) / 255
    for lane in tl["lanes"]:
        if not lane["tracks"]:
            continue
        rows = events[(events["device"] == lane["device"]) & (events["stream"] == lane["stream"])]
        (track,) = lane["tracks"]
        assert set(track["b"]) == {str(c) for c in rows["code"].unique()}
        for code, b64 in track["b"].items():
            sel = rows[rows["code"] == int(code)]
            union = iv.union(sel["start_ns"].to_numpy(np.int64), sel["end_ns"].to_numpy(np.int64))
            got = decode(b64, "u1") / 255 * (edges[1] - edges[0])
            assert np.abs(got - covered_per_bin(*union, edges)).max() <= level + 1


@pytest.mark.slow
def test_comparison(reports):
    _, text = reports["compare"]
    data = embedded(text)
    assert len(data["inputs"]) == 2
    assert '<section id="compare">' in text
    for path in (TWO_HOST, SAMPLES / "synthetic_1host_8gpu"):
        share = analyze_paths([path]).total.comm_share
        assert f"{100 * share:.1f}%" in text.split('<section class="input"')[0]


@pytest.mark.slow
def test_merge_makes_one_job_of_several_files(tmp_path):
    files = sorted(str(f) for f in TWO_HOST.glob("*.xplane.pb"))
    assert len(files) > 1
    _, text = make(tmp_path, "merged", *files, "--jobs", "2")  # several files: one job, as analyze reads them
    data = embedded(text)
    assert len(data["inputs"]) == 1 and len(data["inputs"][0]["lanes"]) == 8
    assert '<section id="compare">' not in text
    # files measured in worker processes: the same page as measured one after the other
    _, serial = make(tmp_path, "serial", *files, "--jobs", "1")
    assert embedded(serial) == data


@pytest.mark.slow
def test_many_devices_keep_the_most_exposed(monkeypatch):
    monkeypatch.setattr(html_report, "MAX_LANES", 3)
    item = measured_item([TWO_HOST])
    analysis = item.analysis
    tl = html_report.timeline_data(item, "device", 1_000_000, 100_000)
    worst = sorted(analysis.devices, key=lambda d: -d.exposed_comm_ns)[:3]
    assert {lane["label"] for lane in tl["lanes"]} == {d.device for d in worst}
    assert (tl["devices"], tl["devices_total"]) == (3, 8)


@pytest.mark.slow
def test_bin_budget_coarsens_the_common_grid():
    item = measured_item([CPU], max_events=1000)
    fine = html_report.timeline_data(item, "device", 1000, html_report.BIN_BUDGET_BYTES)
    small = html_report.timeline_data(item, "device", 1000, 20_000)
    channels = sum(len(t["b"]) for lane in small["lanes"] for t in [*lane["tracks"], lane["exposed"]])
    assert small["bins"]["n"] * channels <= 20_000 or small["bins"]["n"] <= html_report.MIN_BINS
    assert small["bins"]["w"] > fine["bins"]["w"] and small["bins"]["n"] < fine["bins"]["n"]
    # coarser, still the same exposed time in all (within a level per bin)
    for a, b, dev in zip(fine["lanes"], small["lanes"], item.analysis.devices):
        for tl, lane in ((fine, a), (small, b)):
            width = tl["bins"]["w"] * tl["unit"]
            got = decode(lane["exposed"]["b"]["6"], "u1").sum() / 255 * width
            assert abs(got - dev.exposed_comm_ns) <= tl["bins"]["n"] * (width / 255 + 1)


def test_grids_of_different_widths_combine_by_coarsening():
    rng = np.random.default_rng(7)
    grids, segments = [], []
    for lo, hi in ((1_000, 9_000), (3_000, 70_000), (500, 2_100)):  # spans that give three bin widths
        s = np.sort(rng.integers(lo, hi, 60))
        e = np.minimum(s + rng.integers(1, 400, s.size), hi)
        grid = Grid.covering(lo, hi, 64)
        grids.append((grid, coverage_bins(s, e, grid)))
        segments.append(iv.union(s, e))
    assert len({g.width for g, _ in grids}) == 3
    common = html_report.common_grid([g for g, _ in grids])
    assert all(
        common.origin <= g.origin and g.origin + g.n * g.width <= common.origin + common.n * common.width
        for g, _ in grids
    )
    for (grid, values), seg in zip(grids, segments):
        got = html_report.coarsen(values, grid, common).astype(float) / 255 * common.width
        exact = covered_per_bin(*seg, common.edges)
        assert np.abs(got - exact).max() <= common.width / 255 + 1


@pytest.mark.slow
def test_step_selection_narrows_the_timeline(tmp_path):
    _, text = make(tmp_path, "sel", str(TWO_HOST), "--skip-first", "1")
    (tl,) = embedded(text)["inputs"]
    steps = [s for s in analyze_paths([TWO_HOST]).steps if s.step >= 1]
    assert tl["t0"] == min(s.start_ns for s in steps)
    assert tl["span"] == max(s.end_ns for s in steps) - tl["t0"]
    # only what the figures measured: each device's activities clipped to its selected steps
    result = analyze_paths([TWO_HOST], step_options=StepOptions(skip_first=1))
    events = device_activity([TWO_HOST])
    pieces = 0
    for lane, dev in zip(tl["lanes"], result.devices):
        mine = [s for s in result.steps if s.device == dev.device]
        seg_s, seg_e = iv.union(np.array([s.start_ns for s in mine]), np.array([s.end_ns for s in mine]))
        rows = events[events["device"] == dev.device]
        overlap = np.minimum(rows["end_ns"].to_numpy()[:, None], seg_e) - np.maximum(
            rows["start_ns"].to_numpy()[:, None], seg_s
        )
        pieces += int((overlap > 0).sum())
        sums = raw_sums(lane["tracks"])
        assert sums.get(0, 0) == dev.compute_ns
        assert sums.get(1, 0) + sums.get(2, 0) + sums.get(3, 0) == dev.comm_ns
        assert int(decode(lane["exposed"]["d"], "<u4").sum()) == dev.exposed_comm_ns
    assert tl["events"] == pieces


def test_names_from_a_trace_are_text_not_markup(tmp_path):
    def kernel(name: str, ts: float, dur: float, corr: int, stream: int) -> dict:
        args = {"device": 0, "stream": stream, "correlation": corr}
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}

    nasty = "ncclDevKernel_AllReduce</script><b>x & y"
    doc = {
        "schemaVersion": 1,
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
            kernel(nasty, 100.0, 50.0, 1, 9),
            kernel("gemm<i>", 120.0, 100.0, 2, 7),
        ],
    }
    trace = tmp_path / "nasty.json"
    trace.write_bytes(orjson.dumps(doc))
    _, text = make(tmp_path, "nasty", str(trace))
    assert "&lt;/script&gt;&lt;b&gt;x &amp; y" in text  # in the collectives table and the opportunities
    body = text.split('<script type="application/json"')[0]
    assert "<b>x" not in body and "<i>" not in body
    data = embedded(text)  # "</" escaped inside the script element, the JSON still the names as read
    assert sorted(data["inputs"][0]["labels"]) == sorted([f"{nasty}\tall-reduce", "gemm<i>\t"])


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


@pytest.mark.slow
def test_unwritable_output_is_one_line(tmp_path):
    res = runner.invoke(app, ["report", str(TWO_HOST), "-o", str(tmp_path / "no" / "such" / "r.html")])
    assert res.exit_code == 2 and "cannot write" in res.output and "Traceback" not in res.output


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


@pytest.fixture(scope="module")
def selftest(reports, tmp_path_factory) -> Callable[[str], subprocess.CompletedProcess]:
    """Chromium's run of a page of ``reports`` with "#selftest", which makes the page drive its own zoom, pan,
    hover and reset and write the outcome into the DOM: one run per page, which two tests read."""
    runs: dict[str, subprocess.CompletedProcess] = {}

    def run(name: str) -> subprocess.CompletedProcess:
        if name not in runs:
            path, _ = reports[name]
            runs[name] = chromium(tmp_path_factory.mktemp("chromium"), "--dump-dom", f"{path.as_uri()}#selftest")
        return runs[name]

    return run


@needs_chromium
@pytest.mark.parametrize(
    "name, timelines, lanes",
    [("cpu", 1, 8), ("binned", 1, 8), ("compare", 2, 16), ("stream_binned", 1, None)],
)
def test_browser_draws_without_errors(reports, selftest, name, timelines, lanes):
    _, text = reports[name]
    if lanes is None:  # stream lanes: as many as the page embeds (their count is checked above)
        lanes = sum(len(tl["lanes"]) for tl in embedded(text)["inputs"])
    res = selftest(name)
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


def test_views_hold_fewer_single_activities_the_more_files_a_job_has():
    one = html_report.timeline_options("device", 250_000, 1, files=1)
    many = html_report.timeline_options("device", 250_000, 1, files=1000)
    assert one.raw_cap == 250_000 and not one.streams
    assert many.raw_cap == 250_000 // html_report.MAX_LANES  # enough for the most devices a page shows
    assert html_report.timeline_options("stream", 250_000, 2, files=4).raw_cap == 125_000 // 4


@pytest.mark.slow
def test_render_needs_the_timeline_views():
    analysis = analyze_paths([TWO_HOST])  # measured without a TimelineOptions: figures only
    with pytest.raises(ValueError, match="timeline views"):
        html_report.render([html_report.ReportInput("x", analysis)])


# ---------------------------------------------------------------- the cross-rank ledger (spec §8)


def brute_records(paths: list[Path], key: str) -> pd.DataFrame:
    """Each comm activity with its instance and wait, matched by brute force (one clock, every device a member)."""
    return _brute_records(tuple(paths), key).copy()


@functools.cache
def _brute_records(paths: tuple[Path, ...], key: str) -> pd.DataFrame:
    return comm_instances(device_activity(list(paths)), key)


def brute_wait(records: pd.DataFrame, device: str) -> tuple[np.ndarray, np.ndarray]:
    """The device's wait parts ``[start, start + W)`` as disjoint segments."""
    mine = records[(records["device"] == device) & (records["wait_ns"] > 0)]
    start = mine["start_ns"].to_numpy(np.int64)
    return iv.union(start, start + mine["wait_ns"].to_numpy(np.int64))


def segments(track: dict, tl: dict) -> tuple[np.ndarray, np.ndarray]:
    s = decode(track["s"], "<u4").astype(np.int64) * tl["unit"] + tl["t0"]
    return s, s + decode(track["d"], "<u4").astype(np.int64) * tl["unit"]


def html_table(text: str, cls: str) -> tuple[list[str], list[list[str]]]:
    """Headers and cell texts of the page's ``<table class=cls>``."""
    m = re.search(rf'<table class="{cls}">(.*?)</table>', text, re.S)
    assert m, f"no table {cls}"

    def cells(row: str, tag: str) -> list[str]:
        return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", row, re.S)]

    head, body = m.group(1).split("</thead>")
    return cells(head, "th"), [cells(r, "td") for r in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def skew_rows(tl: dict) -> list[dict]:
    """The arrival-skew rows decoded: per instance first and last arrival (ns) and the straggler."""
    devices = tl["skew"]["devices"]
    out = []
    for row in tl["skew"]["rows"]:
        s = (decode(row["s"], "<u4").astype(np.int64) + row["o"]) * tl["unit"] + tl["t0"]
        d = decode(row["d"], "<u4").astype(np.int64) * tl["unit"]
        who = [devices[i] for i in decode(row["w"], "<u4")]
        out.append(
            {"name": row["name"], "kind": row["kind"], "first": s.tolist(), "last": (s + d).tolist(), "who": who}
        )
    return out


@pytest.mark.slow
def test_wait_segments_are_the_wait_of_each_comm_activity(reports):
    _, text = reports["cpu"]
    (tl,) = embedded(text)["inputs"]
    result = measured([CPU])
    events = device_activity([CPU])
    records = brute_records([CPU], "hlo_op")
    assert "bins" not in tl and len(tl["lanes"]) == len(result.devices)
    for lane, dev in zip(tl["lanes"], result.devices):
        s, e = segments(lane["wait"], tl)
        want_s, want_e = brute_wait(records, dev.device)
        assert np.array_equal(s, want_s) and np.array_equal(e, want_e)
        rows = events[events["device"] == dev.device]
        comm = rows[rows["bucket"] == "comm"].sort_values("start_ns")
        # one comm activity at a time on these devices: the wait parts never overlap, their sum is the figure
        assert (comm["start_ns"].to_numpy()[1:] >= comm["end_ns"].to_numpy()[:-1]).all()
        assert int((e - s).sum()) == dev.ledger["comm_wait_ns"]
        # exposed wait = wait − compute (one comm at a time, none unmatched: transfer never covers a wait part)
        assert dev.ledger["comm_unmatched_ns"] == 0
        compute = rows[rows["bucket"] == "compute"]
        exposed = iv.subtract(s, e, *iv.union(compute["start_ns"].to_numpy(), compute["end_ns"].to_numpy()))
        assert iv.length(*exposed) == dev.ledger["exposed_wait_ns"]


@pytest.mark.slow
def test_wait_parts_lie_inside_comm_where_comm_streams_overlap(reports):
    for name in ("two_host", "stream"):
        _, text = reports[name]
        (tl,) = embedded(text)["inputs"]
        result = measured([TWO_HOST], lanes="device" if name == "two_host" else "stream")
        events = device_activity([TWO_HOST])
        with_wait = [lane for lane in tl["lanes"] if "wait" in lane]
        assert len(with_wait) == len(result.devices)  # once per device, on its exposed lane in stream mode
        for lane, dev in zip(with_wait, result.devices):
            s, e = segments(lane["wait"], tl)
            comm = events[(events["device"] == dev.device) & (events["bucket"] == "comm")]
            outside = iv.subtract(s, e, *iv.union(comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy()))
            assert iv.length(*outside) == 0
            assert (s[1:] >= e[:-1]).all()
            # overlapping comm streams: the union is at most the summed wait of the device's activities
            assert 0 < int((e - s).sum()) <= dev.ledger["comm_wait_ns"]


@pytest.mark.slow
def test_binned_wait_coverage(reports):
    _, text = reports["binned"]
    (tl,) = embedded(text)["inputs"]
    result = measured([CPU], max_events=1000)
    records = brute_records([CPU], "hlo_op")
    edges = bin_edges(tl)
    width = int(edges[1] - edges[0])
    level = width / 255
    w0, w1 = tl["t0"] + tl["bins"]["w0"], tl["t0"] + tl["bins"]["w1"]
    for lane, dev in zip(tl["lanes"], result.devices):
        want_s, want_e = brute_wait(records, dev.device)
        got = decode(lane["wait"]["b"]["7"], "u1") / 255 * width
        assert np.abs(got - covered_per_bin(want_s, want_e, edges)).max() <= level + 1
        assert abs(got.sum() - dev.ledger["comm_wait_ns"]) <= tl["bins"]["n"] * (level + 1)
        # inside the detail window the wait parts themselves, clipped to it
        s, e = segments(lane["wait"], tl)
        clipped = iv.clip(want_s, want_e, np.array([w0]), np.array([w1]))
        assert np.array_equal(s, clipped[0]) and np.array_equal(e, clipped[1])


@pytest.mark.slow
def test_arrival_skew_rows_are_the_instances_recomputed_from_the_comm_activities(reports):
    _, text = reports["cpu"]
    (tl,) = embedded(text)["inputs"]
    item = measured_item([CPU])
    result = item.analysis
    brute = instances(brute_records([CPU], "hlo_op"))
    assert set(brute["members"]) == {len(result.devices)}
    rows = skew_rows(tl)
    # the costliest collectives first (the collectives' order), as many as the page draws
    ranked = [c.name for c in result.collectives if c.name in set(brute["op"])]
    assert [r["name"] for r in rows] == ranked[: html_report.SKEW_ROWS]
    table = item.instances
    assert table is not None
    for row in rows:
        mine = brute[brute["op"] == row["name"]]
        assert row["first"] == mine["first_ns"].tolist() and row["last"] == mine["last_ns"].tolist()
        assert row["who"] == mine["straggler"].tolist() and {row["kind"]} == set(mine["kind"])
        held = table[table["op"] == row["name"]].sort_values("first_ns")  # the instances kept beside the analysis
        assert held["first_ns"].tolist() == row["first"] and held["last_ns"].tolist() == row["last"]
        assert held["straggler"].tolist() == row["who"]
    # the page's skew table: spreads and who is most often last, from the same instances
    _, cells = html_table(text, "skew")
    assert [c[0] for c in cells] == [r["name"] for r in rows]
    for cell, row in zip(cells, rows):
        spread = np.array(row["last"]) - np.array(row["first"])
        last = pd.Series(row["who"]).value_counts()
        top = sorted(d for d, n in last.items() if n == last.max())[0]
        assert cell[2:] == [
            f"{len(spread):,}",
            html_report.duration(float(np.median(spread))),
            html_report.duration(int(spread.max())),
            f"{top} ({last.max():,} of {len(spread):,})",
        ]


fmt_ms = html_report.fmt_ms  # the page's ms: 3 decimals, 1 from 100 ms


@pytest.mark.slow
def test_ledger_section_and_collectives(reports):
    for name, key in (("cpu", "hlo_op"), ("two_host", None)):
        _, text = reports[name]
        path = CPU if name == "cpu" else TWO_HOST
        result = measured([path])
        doc = result.to_json()
        assert "Cross-rank ledger" in text
        steps = max(len({s["step"] for s in doc["steps"]}), 1)  # the page's times are per step (issue 49)
        _, cells = html_table(text, "stragglers")
        want = sorted(doc["ledger"]["stragglers"], key=lambda r: (-r["caused_wait_ns"], r["device"]))
        assert cells == [
            [
                r["device"],
                f"{r['straggler_count']:,}",
                f"{r['instances']:,}",
                f"{100 * r['straggler_count'] / r['instances']:.1f}%",
                fmt_ms(r["caused_wait_ns"] / steps),
            ]
            for r in want
        ]
        # per device: exposed comm by cause, as the JSON rows hold it
        _, rows = html_table(text, "ledger-devices")
        keys = ("exposed_comm_ns", "exposed_wait_ns", "exposed_transfer_ns", "exposed_unmatched_ns", "comm_wait_ns")
        assert rows == [
            [
                d["device"],
                *(fmt_ms(d[k] / steps) for k in keys),
                f"{d['straggler_count']:,}",
                fmt_ms(d["caused_wait_ns"] / steps),
            ]
            for d in doc["devices"]
        ]
        headers, coll = html_table(text, "coll")
        unit = "ms/device/step" if steps > 1 else "ms/device"
        wait_col, transfer_col = headers.index(f"wait {unit}"), headers.index(f"transfer {unit}")
        for c, row in zip(result.collectives, coll):
            assert row[0] == c.name  # times per device and step: the mean over the devices it ran on
            assert (row[wait_col], row[transfer_col]) == (
                fmt_ms(c.wait_ns / c.devices / steps),
                fmt_ms(c.transfer_ns / c.devices / steps),
            )
        if key is None:
            continue
        # independently: who arrives last and the waiting it causes, from the comm activities
        records = brute_records([path], key)
        brute = stragglers(records)
        assert {r[0]: (int(r[1]), int(r[2]), r[4]) for r in cells} == {
            d: (n, of, fmt_ms(w / steps)) for d, (n, of, w) in brute.items()
        }
        wait = records.groupby("op")["wait_ns"].sum() / records.groupby("op")["device"].nunique() / steps
        assert all(row[wait_col] == fmt_ms(wait[row[0]]) for row in coll)
    # the clocks of two hosts: the second aligned to the first by the offset the JSON holds
    _, text = reports["two_host"]
    _, clocks = html_table(text, "clocks")
    offsets = measured([TWO_HOST]).ledger["clock_offsets_ns"]
    assert [c[0] for c in clocks] == sorted(offsets) and len(clocks) == 2
    assert clocks[1][1] == f"+{html_report.duration(offsets[clocks[1][0]])}"


@pytest.mark.slow
def test_real_8rank_dlrm_page(tmp_path):
    folder = shared_trace("kineto/dlrm_8rank_v100")
    _, text = make(tmp_path, "dlrm", str(folder))
    (tl,) = embedded(text)["inputs"]
    result = measured([folder])
    records = brute_records([folder], "name")
    for lane, dev in zip(tl["lanes"], result.devices):
        s, e = segments(lane["wait"], tl)
        assert int((e - s).sum()) == dev.ledger["comm_wait_ns"]
        want_s, want_e = brute_wait(records, dev.device)
        assert np.array_equal(s, want_s) and np.array_equal(e, want_e)
    brute = instances(records)
    for row in skew_rows(tl):
        mine = brute[brute["op"] == row["name"]]
        assert row["first"] == mine["first_ns"].tolist() and row["last"] == mine["last_ns"].tolist()
        assert row["who"] == mine["straggler"].tolist()
    # rank7 arrives last in 5 of the 8 collectives
    _, cells = html_table(text, "stragglers")
    assert cells[0][:3] == ["rank7/GPU:7", "5", "8"]


def test_one_device_page_makes_up_no_wait_split(tmp_path):
    def kernel(name: str, ts: float, dur: float, corr: int) -> dict:
        args = {"device": 0, "stream": 7, "correlation": corr}
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}

    doc = {
        "schemaVersion": 1,
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 100.0, 50.0, 1),
            kernel("gemm", 200.0, 100.0, 2),
        ],
    }
    trace = tmp_path / "one.json"
    trace.write_bytes(orjson.dumps(doc))
    _, text = make(tmp_path, "one", str(trace))
    (tl,) = embedded(text)["inputs"]
    assert "skew" not in tl and not any("wait" in lane for lane in tl["lanes"])
    body = text.split('<script type="application/json"')[0]  # the markup, not the inlined script
    assert "waiting for the last rank" not in body
    # the ledger section says that nothing matched (one device, no process group: its all-reduce is unmatched)
    said = " ".join(html.unescape(body).split())
    assert "0 collective instances matched across ranks" in said and "No collective matched across ranks" in said
    headers, _ = html_table(text, "coll")
    assert "wait ms" not in headers and "transfer ms" not in headers


@needs_chromium
@pytest.mark.parametrize("name", ["cpu", "binned", "stream"])
def test_browser_decodes_and_draws_the_ledger(reports, selftest, name):
    """What the page's script decoded and drew, read back from the DOM, against the ledger recomputed here."""
    _, text = reports[name]
    res = selftest(name)
    status = re.search(r'<span id="moeprof-status"([^>]*)>', res.stdout)
    assert status, res.stderr[-2000:]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', status.group(1)))
    assert attrs["data-selftest"] == "ok", attrs.get("data-selftest-detail")
    (got,) = json.loads(html.unescape(attrs["data-selftest-detail"]))
    (tl,) = embedded(text)["inputs"]
    assert got["paled"] > 0, "no comm drawn in the pale (waiting) shade"
    if name == "stream":
        item = measured_item([TWO_HOST], lanes="stream")
        result = item.analysis
        figures = {d.device: d for d in result.devices}
        for view in item.timeline:  # comm streams overlap here: the union of the wait parts
            waited = got["wait"][f"{view.device} exposed comm"]
            assert 0 < waited["raw"] == iv.length(*view.wait) <= figures[view.device].ledger["comm_wait_ns"]
        assert item.instances is not None
        table = item.instances.sort_values(["first_ns", "instance"])
        spans = {op: (g["last_ns"] - g["first_ns"]).to_numpy() for op, g in table.groupby("op", sort=False)}
        last = {op: g["straggler"].tolist() for op, g in table.groupby("op", sort=False)}
    else:
        result = measured([CPU], max_events=1000 if name == "binned" else html_report.RAW_EVENTS_CAP)
        records = brute_records([CPU], "hlo_op")
        for dev in result.devices:
            waited = got["wait"][dev.device]
            want_s, want_e = brute_wait(records, dev.device)
            if name == "cpu":
                assert waited["raw"] == int((want_e - want_s).sum()) == dev.ledger["comm_wait_ns"]
                assert waited["binned"] == 0
            else:
                w0, w1 = tl["t0"] + tl["bins"]["w0"], tl["t0"] + tl["bins"]["w1"]
                assert waited["raw"] == iv.length(*iv.clip(want_s, want_e, np.array([w0]), np.array([w1]))[:2])
                width = tl["bins"]["w"] * tl["unit"]
                assert abs(waited["binned"] - dev.ledger["comm_wait_ns"]) <= tl["bins"]["n"] * (width / 255 + 1)
        brute = instances(records)
        spans = {op: (g["last_ns"] - g["first_ns"]).to_numpy() for op, g in brute.groupby("op", sort=False)}
        last = {op: g["straggler"].tolist() for op, g in brute.groupby("op", sort=False)}
    assert [row["name"] for row in got["skew"]] == [row["name"] for row in tl["skew"]["rows"]]
    assert len(got["skew"]) == min(html_report.SKEW_ROWS, len(spans))
    for row in got["skew"]:
        spread = spans[row["name"]]
        assert row["n"] == spread.size and row["spread"] == int(spread.sum())
        widest = int(np.argmax(spread))  # the first of the widest: the one the page hovered
        assert row["widest"] == widest
        # the tip lists every instance under the pointer (one op's instances on different groups can overlap)
        block = re.search(rf"· instance {widest + 1} of {spread.size}\n.*\nlast to arrive: (\S+)", row["hovered"])
        assert block and block[1] == last[row["name"]][widest], row["hovered"]


@pytest.mark.slow
def test_many_devices_list_those_that_wait_longest(monkeypatch):
    monkeypatch.setattr(html_report, "MAX_TABLE_ROWS", 3)
    result = measured([TWO_HOST])
    section = html_report.ledger_section(result, ledger_summary(result), [])
    waits = {d.device: d.ledger["exposed_wait_ns"] for d in result.devices}
    longest = sorted(waits, key=lambda d: -waits[d])[:3]
    assert [row[0] for row in section.devices.rows] == sorted(longest)  # in device order
    assert "lists the 3 with the most exposed waiting (of 8)" in section.split


def test_skew_instances_may_start_before_the_window():
    """Aligned arrivals of another host can precede the first device's window: starts count from a base <= 0."""
    t0 = 5_000_000
    row = ArrivalSkew(
        "all-reduce.1",
        "all-reduce",
        np.array([t0 - 500, t0 + 100, t0 + 9_000], np.int64),
        np.array([t0 + 200, t0 + 300, t0 + 9_500], np.int64),
        np.array(["h1/GPU:0", "h0/GPU:1", "h1/GPU:0"], dtype=object),
    )
    data = html_report.skew_data([row], t0, t0 + 1_000, 1)  # the third instance lies after the window
    tl = {"t0": t0, "unit": 1, "skew": data}
    (got,) = skew_rows(tl)
    assert got["first"] == [t0 - 500, t0 + 100] and got["last"] == [t0 + 200, t0 + 300]
    assert got["who"] == ["h1/GPU:0", "h0/GPU:1"] and data["rows"][0]["count"] == 3


def test_counts_read_in_the_singular_where_they_are_one(tmp_path):
    """No "device(s)" or "module(s)" in what users read (issue 10's wording)."""
    from moeprof.insight.flops import flops_per_token, load_model_config

    one = analyze_paths([SAMPLES / "synthetic_1host_8gpu.nsys.sqlite"])
    one = one.with_(devices=one.devices[:1])
    assert html_report.headline(one).startswith("1 device from 1 trace file")
    notes = flops_per_token(load_model_config("deepseek-v3"), 4096).notes
    assert "1 multi-token-prediction module in the config not counted" in notes
    assert not [n for n in notes if "(s)" in n]


@pytest.mark.slow
def test_times_on_the_page_are_per_device(reports):
    """The title states exposed comm as the terminal does, per device and step (mean and worst) beside the step,
    never summed over devices (the sum read 46.890 ms where the terminal said 5.86 ms mean) or steps; bars and
    tables follow."""
    from moeprof.reports.text import duration

    _, text = reports["two_host"]
    result = measured([TWO_HOST])
    title = html.unescape(re.search(r"<title>(.*?)</title>", text).group(1))
    per_step: dict[str, list[int]] = {}
    for s in result.steps:
        per_step.setdefault(s.device, []).append(s.exposed_comm_ns)
    exposed = {d: sum(v) / len(v) for d, v in per_step.items()}  # each device's mean over its steps
    worst = max(exposed, key=exposed.__getitem__)
    mean = sum(exposed.values()) / len(exposed)
    assert f"per device and step: exposed comm {duration(mean)} mean, {duration(exposed[worst])} worst ({worst})" in (
        title
    ), title
    total = sum(d.exposed_comm_ns for d in result.devices)
    assert f"{total / 1e6:,.3f}" not in title and duration(total) not in title
    assert "mean device" in text and "all devices summed" not in text
    # a collective's times are the mean over the devices it ran on, per step (issue 49: one unit on the page)
    c = result.collectives[0]
    n = len({s.step for s in result.steps})
    cell = f"<td>{c.total_ns / c.devices / n / 1e6:,.3f}</td>"
    assert "ms/device/step" in text and cell in text.replace(' class="num"', "")


def test_a_one_chip_tpu_capture_reports_and_an_instance_without_a_straggler_names_none(tmp_path):
    """The TPU v5e demo on one chip reports (its ledger section ended the report with a ValueError, NaN to
    integer, where its one-member all-to-all instances had no straggler). An instance nobody waited for
    (one member, spec §8) has no straggler: "" in the instance table, no arrival-skew row, none most often
    last."""
    from moeprof.core.analysis import Figures
    from moeprof.core.summary import arrival_skew
    from moeprof.pipeline.merge import instance_table

    make(tmp_path, "one_chip", str(SAMPLES / "tpu_v5e_demo"))
    matched = pd.DataFrame(
        {"instance": [0, 1, 1], "op": "a2a", "kind": "all-to-all", "device": ["h/TPU:0", "h/TPU:0", "h/TPU:1"],
         "aligned_start_ns": [10, 20, 25], "straggler": [False, False, True]}
    )  # fmt: skip
    table = instance_table(matched)
    assert table["straggler"].tolist() == ["", "h/TPU:1"] and table["members"].tolist() == [1, 2]
    skew = ArrivalSkew("x", "all-to-all", np.array([1, 2]), np.array([1, 2]), np.array(["", ""], dtype=object))
    assert skew.most_often_last() == ("", 0)
    (row,) = arrival_skew(Analysis(("x",), (), Figures()), table)  # the one-member instance draws no row
    assert (row.count, row.most_often_last()) == (1, ("h/TPU:1", 1))
