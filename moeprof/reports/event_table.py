"""``moeprof events``: the classified event table as parquet or CSV, both written by Arrow.

CSV goes through ``pyarrow.csv`` (multi-threaded C++), not ``DataFrame.to_csv`` (several times faster:
docs/performance.md). Strings are quoted, a missing
value is an empty field (an empty string is ``""``), booleans read ``true``/``false``.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd

from .._version import __version__
from ..outputs import replacing
from ..readers.marks import EVENTS_SCHEMA, PARQUET_KEY

FORMATS = (".parquet", ".csv")
CSV_BATCH_ROWS = 1 << 16


def output_format(out: Path) -> str:
    """The format ``out``'s suffix names (one of :data:`FORMATS`); ValueError, naming them, for any other."""
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{out}: output must end in .parquet or .csv")
    return suffix


def write_events(events: pd.DataFrame, out: Path) -> None:
    """Write ``events`` to ``out`` in the format its suffix names (one of :data:`FORMATS`)."""
    import pyarrow as pa

    suffix = output_format(out)
    table = pa.Table.from_pandas(events, preserve_index=False)
    if suffix == ".parquet":
        # the mark that keeps the table from ever being read as a trace (readers.marks)
        mark = orjson.dumps({"schema": EVENTS_SCHEMA, "producer": f"moeprof {__version__}"})
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), PARQUET_KEY: mark})
        import pyarrow.parquet as pq

        with replacing(out) as into:
            pq.write_table(table, into)
        return
    import pyarrow.csv as pcsv

    # categorical columns arrive as dictionaries, which the CSV writer does not take: their strings, a
    # batch of rows at a time (10M rows of kernel names as strings at once would be gigabytes)
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_dictionary(f.type) else f for f in table.schema])
    with replacing(out) as into, pcsv.CSVWriter(into, schema) as writer:
        for batch in table.to_batches(max_chunksize=CSV_BATCH_ROWS):
            columns = [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in batch.columns]
            writer.write_batch(pa.record_batch(columns, schema=schema))
