"""``moeprof events``' writer: what Arrow writes reads back as the event table, field by field."""

from __future__ import annotations

import csv
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeprof.core.events import distinct_rows, make_table
from moeprof.reports.event_table import write_events

NAMES = [
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",  # commas
    'fusion "quoted" name',
    "line\nbreak",
    "µs-kernel",
    "",
]


def _table() -> pd.DataFrame:
    n = 12
    rng = np.random.default_rng(0)
    start = 1_733_011_200_000_000_000 + np.arange(n, dtype=np.int64) * 1_000_003  # past 2**53: exact ints
    return make_table(
        {
            "host": "node0",
            "device": [f"node0/GPU:{i % 3}" for i in range(n)],
            "global_id": np.arange(n) % 3,
            "gpus_per_domain": 8,
            "stream": pd.Categorical([None if i % 5 == 0 else f"Stream #{i % 2}" for i in range(n)]),  # missing
            "name": [NAMES[i % len(NAMES)] for i in range(n)],
            "start_ns": start,
            "end_ns": start + rng.integers(1, 10**6, n),
            "activity": "kernel",
            "bytes": [np.nan if i % 2 else 1.5 * i for i in range(n)],
            "ib_fraction": [np.nan, 0.0, 1.0, 0.25] * 3,
            "p2p": [i % 2 == 0 for i in range(n)],
            "source": "nsys",
        }
    )


def _expected(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    return str(value)


@pytest.mark.parametrize("batch_rows", [5, 1 << 16])
def test_csv_fields_read_back_as_the_table(tmp_path, monkeypatch, batch_rows):
    from moeprof.reports import event_table

    monkeypatch.setattr(event_table, "CSV_BATCH_ROWS", batch_rows)  # rows written in batches or at once
    table = _table()
    out = tmp_path / "events.csv"
    write_events(table, out)
    with out.open(newline="", encoding="utf-8") as fh:
        header, *rows = list(csv.reader(fh))
    assert header == list(table.columns)
    assert len(rows) == len(table)
    for row, (_, want) in zip(rows, table.astype(object).iterrows(), strict=True):
        for column, field in zip(header, row, strict=True):
            value = want[column]
            if isinstance(value, float) and not math.isnan(value):
                assert float(field) == value, column  # the same double, however it is spelled
            else:
                assert field == _expected(value), column


def test_parquet_reads_back_the_same_frame(tmp_path):
    table = _table()
    out = tmp_path / "events.parquet"
    write_events(table, out)
    back = pd.read_parquet(out)
    assert list(back.dtypes.astype(str)) == list(table.dtypes.astype(str))  # categoricals stay categoricals
    pd.testing.assert_frame_equal(back.astype(object), table.astype(object))


def test_other_suffixes_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"parquet or \.csv"):
        write_events(_table(), tmp_path / "events.json")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from(["x", "y", "z"])), max_size=40))
def test_distinct_rows_are_pandas_drop_duplicates(rows: list[tuple[str | None, str]]) -> None:
    """Each distinct tuple's first row, in row order with its index label, as drop_duplicates gives it (a missing
    value in a categorical column is a value of its own)."""
    frame = pd.DataFrame(
        {"host": pd.Categorical([r[0] for r in rows]), "device": np.array([r[1] for r in rows], dtype=object)}
    )
    want = frame[["host", "device"]].drop_duplicates()
    got = distinct_rows(frame, ["host", "device"])
    assert got.equals(want) and got.index.tolist() == want.index.tolist()
