"""Parquet folders (``nsys export --type parquetdir``): one file per table, joined in pandas where the SQLite
route joins in SQL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .columns import ints, numeric, texts
from .tables import (
    DOMAIN_CREATE,
    KERNEL,
    MEMCPY,
    MEMSET,
    NAME_COLUMNS,
    NVTX,
    PID_SHIFT,
    RUNTIME,
    STRINGS,
    Frames,
    beside_activities,
    matching_calls,
    placing_columns,
)


class ParquetTables:
    """``nsys export --type parquetdir``: one ``<TABLE>.parquet`` file (or folder) per table."""

    def __init__(self, folder: Path) -> None:
        self.paths: dict[str, Path] = {}
        for p in folder.iterdir():
            name = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name
            if p.name.endswith(".parquet") or (p.is_dir() and any(p.glob("*.parquet"))):
                self.paths[name] = p
        self.names = set(self.paths)
        self._cols: dict[str, list[str]] = {}

    def columns(self, table: str) -> list[str]:
        if table not in self.paths:
            return []
        if table not in self._cols:
            import pyarrow.dataset as ds

            self._cols[table] = list(ds.dataset(self.paths[table], format="parquet").schema.names)
        return self._cols[table]

    def rows(self, table: str) -> int:
        if table not in self.paths:
            return 0
        import pyarrow.dataset as ds

        return int(ds.dataset(self.paths[table], format="parquet").count_rows())

    def frame(self, table: str, cols: list[str]) -> pd.DataFrame:
        have = [c for c in cols if c in self.columns(table)]
        if not have:
            return pd.DataFrame()
        return pd.read_parquet(self.paths[table], columns=have, dtype_backend="numpy_nullable")


def parquet_frames(t: ParquetTables) -> Frames:
    strings = t.frame(STRINGS, ["id", "value"])
    lookup = None
    if {"id", "value"} <= set(strings) and len(strings):
        ids, null, bad = numeric(strings["id"])
        keep = ~(null | bad)
        lookup = pd.Series(texts(strings["value"])[keep], index=ids[keep])
        lookup = lookup[~lookup.index.duplicated(keep="first")]

    def resolve(col: pd.Series) -> pd.Series:
        # ids into StringIds (NULL ids stay NULL); text columns pass through
        if lookup is None or col.dtype == object or pd.api.types.is_string_dtype(col):
            return pd.Series(texts(col), index=col.index)
        out = np.full(len(col), None, dtype=object)
        ids = ints(col, len(col))
        known = col.notna().to_numpy()
        out[known] = lookup.reindex(ids[known]).to_numpy(dtype=object)
        return pd.Series(out, index=col.index)

    runtime = t.frame(RUNTIME, ["correlationId", "globalTid", "start", "end", "nameId", "name"])
    sync_calls = pd.DataFrame()
    if {"globalTid", "start", "end"} <= set(runtime) and ("nameId" in runtime or "name" in runtime):
        name_col = runtime["nameId"] if "nameId" in runtime else runtime["name"]
        calls = pd.DataFrame(
            {
                "start": runtime["start"],
                "end": runtime["end"],
                "tid": runtime["globalTid"],
                "corr": runtime["correlationId"] if "correlationId" in runtime else np.nan,
            }
        )
        # names resolved once per distinct id
        codes, uniques = pd.factorize(name_col, use_na_sentinel=True)
        names = np.array([*resolve(pd.Series(uniques)).tolist(), None], dtype=object)  # code -1 (NULL): None
        sync_calls = matching_calls(calls, names[codes])
    runtime = runtime.drop(columns=[c for c in ("nameId", "name") if c in runtime])
    if {"correlationId", "globalTid", "start"} <= set(runtime):
        runtime = runtime.rename(columns={"globalTid": "launch_tid", "start": "launch_start", "end": "launch_end"})
        if "launch_end" not in runtime:
            runtime["launch_end"] = np.nan
        runtime["pid"] = ints(runtime["launch_tid"], len(runtime)) >> PID_SHIFT
        # join keys as int64: a NULL id matches nothing (as in SQL: -2 here, -1 on the activity side)
        runtime["correlationId"] = ints(runtime["correlationId"], len(runtime), -2)
    else:
        runtime = pd.DataFrame()

    def activity(table: str, extra: list[str]) -> pd.DataFrame:
        if not placing_columns(t, table):
            return pd.DataFrame()
        frame = t.frame(
            table, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", *NAME_COLUMNS, *extra]
        )
        if "streamId" not in frame:
            frame["streamId"] = -1
        frame["pid"] = ints(frame["globalPid"], len(frame)) >> PID_SHIFT if "globalPid" in frame else -1
        if table == KERNEL:
            name = pd.Series(np.full(len(frame), None, dtype=object), index=frame.index)
            for c in NAME_COLUMNS:
                if c in frame:
                    text = resolve(frame[c]).replace("", None)
                    name = name.where(name.notna(), text)
            frame["name"] = name.fillna("")
        for c in extra:
            if c not in frame:
                frame[c] = np.nan
        if "correlationId" in frame:
            frame["correlationId"] = ints(frame["correlationId"], len(frame))
        if len(runtime) and "correlationId" in frame:
            keys = ["correlationId", "pid"] if "globalPid" in frame else ["correlationId"]
            launches = runtime.drop_duplicates(keys, keep="first")[[*keys, "launch_tid", "launch_start", "launch_end"]]
            frame = frame.merge(launches, on=keys, how="left", sort=False)
        else:
            frame["launch_tid"] = np.nan
            frame["launch_start"] = np.nan
            frame["launch_end"] = np.nan
        keep = [
            "start",
            "end",
            "deviceId",
            "streamId",
            "pid",
            *(["name"] if table == KERNEL else []),
            *extra,
            "launch_tid",
            "launch_start",
            "launch_end",
        ]
        return frame[keep]

    kernels = activity(KERNEL, [])
    memcpys = activity(MEMCPY, ["copyKind", "bytes", "srcDeviceId", "dstDeviceId"])
    memsets = activity(MEMSET, ["bytes"])

    nv = t.frame(
        NVTX,
        [
            "start",
            "end",
            "eventType",
            "globalTid",
            "domainId",
            "text",
            "textId",
            "jsonText",
            "jsonTextId",
            "binaryData",
        ],
    )
    domains: dict[int, str] = {}
    nvtx = pd.DataFrame()
    if len(nv) and "start" in nv and "end" in nv:
        text = pd.Series(np.full(len(nv), None, dtype=object), index=nv.index)
        if "text" in nv:
            text = pd.Series(texts(nv["text"]), index=nv.index)
        if "textId" in nv:
            text = text.where(text.notna(), resolve(nv["textId"]))
        if "eventType" in nv and "domainId" in nv:
            created = ints(nv["eventType"], len(nv)) == DOMAIN_CREATE
            ids = ints(nv["domainId"], len(nv))[created]
            domains = {int(d): v if isinstance(v, str) else "" for d, v in zip(ids, text[created])}
        js = (
            pd.Series(texts(nv["jsonText"]), index=nv.index)
            if "jsonText" in nv
            else pd.Series(None, index=nv.index, dtype=object)
        )
        if "jsonTextId" in nv:
            js = js.where(js.notna(), resolve(nv["jsonTextId"]))
        nvtx = pd.DataFrame(
            {
                "start": nv["start"],
                "end": nv["end"],
                "tid": nv["globalTid"] if "globalTid" in nv else 0,
                "domain": nv["domainId"] if "domainId" in nv else 0,
                "text": text,
                "json": js,
                "blob": nv["binaryData"] if "binaryData" in nv else None,
            }
        )
        nvtx = nvtx[nvtx["end"].notna()]
    return Frames(
        kernels,
        memcpys,
        memsets,
        nvtx,
        domains,
        **beside_activities(t.frame, sync_calls),
    )
