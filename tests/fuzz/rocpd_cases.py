"""Fuzz cases for rocprofv3's rocpd databases, drawn apart from the other formats' (as the rocprofv3 CSV cases are) so
that earlier campaigns replay as they were: ``generate_rocpd(SEED, INDEX)``; tests/test_rocpd.py runs them.

The seeds are two processes of the synthetic MI300X job (``sample_traces/synthetic_rocpd_mi300x``) as a host folder,
and one process's database given as a file. The mutations follow the Nsight SQLite ones (tests/fuzz/mutators.py),
aimed at rocpd's uuid-suffixed tables and the views over them: hostile cells, times as text, views and columns
dropped, rows deleted, every dispatch and copy deleted, bytes cut or flipped.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import cache

from .mutators import (
    ANY,
    NO_ACTIVITY,
    NO_INT64,
    NOT_A_NUMBER,
    REJECT,
    Case,
    Sqlite,
    _pick,
    _sql,
    _steps,
    drawn_case,
    maybe_byte_mutation,
    update_cell,
)
from .seeds import SAMPLES, Seed

ROCPD = "rocpd"
HOST = SAMPLES / "synthetic_rocpd_mi300x" / "mi300x-node0"
ACTIVITY_VIEWS = ("rocpd_kernel_dispatch", "rocpd_memory_copy")
SEED_WEIGHTS = {"rocpd-2proc": 3, "rocpd-file": 2}


@cache
def seeds() -> dict[str, Seed]:
    two = {f"job/mi300x-node0/{pid}_results.db": (HOST / f"{pid}_results.db").read_bytes() for pid in (41200, 41201)}
    one = {"41203_results.db": (HOST / "41203_results.db").read_bytes()}
    return {
        "rocpd-2proc": Seed("rocpd-2proc", ROCPD, two, "job", tuple(sorted(two)),
                            "synthetic_rocpd_mi300x, the databases of GPUs 0 and 1 in their host folder"),
        "rocpd-file": Seed("rocpd-file", ROCPD, one, "41203_results.db", tuple(one),
                           "synthetic_rocpd_mi300x, GPU 3's process given as a file"),
    }  # fmt: skip


def _table(db: Sqlite, view: str) -> str | None:
    """The uuid-suffixed table under a rocpd view."""
    return next((t for t in db.tables() if t.startswith(view + "_")), None)


def _activity_rows(db: Sqlite) -> int:
    return sum(db.rows(t) for v in ACTIVITY_VIEWS if (t := _table(db, v)) is not None)


def _pick_view(rng: random.Random) -> str:
    views = [*ACTIVITY_VIEWS, "rocpd_info_agent", "rocpd_string", "rocpd_event", "rocpd_region",
             "rocpd_info_kernel_symbol", "rocpd_arg", "rocpd_info_stream"]  # fmt: skip
    return rng.choices(views, [5, 4, 2, 2, 2, 2, 1, 1, 1])[0]


def d_cell(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    view = _pick_view(rng)
    table = _table(db, view)
    if table is None:
        return f"cell: no {view}", ANY
    cell = update_cell(rng, db, table, 0.6)
    note, expect = cell.note, ANY
    timed = view in ACTIVITY_VIEWS and cell.took_a_time
    if timed and cell.label in ("'abc'", "''", "blob x'ff00'", "invalid UTF-8 text", "NULL"):
        expect, note = REJECT, note + f" {NOT_A_NUMBER}"
    elif timed and cell.label in ("1e300", "-1e300"):
        note += f" {NO_INT64}"
    return cell.describe(table, note), expect


def d_drop_view(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    view = _pick_view(rng)
    note = _sql(db, f'DROP VIEW "{view}"')
    return f"view {view} dropped{note}", ANY


def d_drop_column(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    view = _pick_view(rng)
    table = _table(db, view)
    if table is None:
        return f"drop-column: no {view}", ANY
    col = rng.choice(db.columns(table))
    # the view selects *: SQLite refuses to drop a column a view names, so the view goes first and comes back
    note = _sql(db, f'DROP VIEW "{view}"') or _sql(db, f'ALTER TABLE "{table}" DROP COLUMN "{col}"')
    note = note or _sql(db, f'CREATE VIEW "{view}" AS SELECT * FROM "{table}"')
    return f"column {table}.{col} dropped{note}", ANY


def d_delete_some(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    view = _pick_view(rng)
    table = _table(db, view)
    if table is None:
        return f"delete: no {view}", ANY
    db.conn.execute(f'DELETE FROM "{table}" WHERE rowid % {rng.randint(2, 5)} = {rng.randint(0, 1)}')
    empty = _activity_rows(db) == 0
    return f"some rows of {table} deleted" + (f" {NO_ACTIVITY}" if empty else ""), REJECT if empty else ANY


def d_empty_activity(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    for view in ACTIVITY_VIEWS:
        if (table := _table(db, view)) is not None:
            db.conn.execute(f'DELETE FROM "{table}"')
    return f"every kernel dispatch and memory copy deleted {NO_ACTIVITY}", REJECT


def d_duplicate(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    view = rng.choice(["rocpd_region", "rocpd_event", "rocpd_arg"])
    table = _table(db, view)
    if table is None:
        return f"duplicate: no {view}", ANY
    cols = [c for c in db.columns(table) if c != "id"]
    names = ", ".join(f'"{c}"' for c in cols)
    note = _sql(db, f'INSERT INTO "{table}" ({names}) SELECT {names} FROM "{table}"')
    return f"every row of {table} duplicated (new ids){note}", ANY


OPS: list[tuple[Callable[[random.Random, Sqlite], tuple[str, str]], int]] = [
    (d_cell, 10), (d_drop_view, 2), (d_drop_column, 3), (d_delete_some, 2), (d_empty_activity, 1), (d_duplicate, 2),
]  # fmt: skip


def generate_rocpd(base_seed: int, index: int) -> Case:
    rng = random.Random(f"moeprof-fuzz-rocpd:{base_seed}:{index}")
    name = rng.choices(list(SEED_WEIGHTS), list(SEED_WEIGHTS.values()))[0]
    seed = seeds()[name]
    target = rng.choice(seed.targets)
    files = dict(seed.files)
    steps: list[str] = []
    expects: list[str] = []
    db = Sqlite(files[target])
    for op in (_pick(rng, OPS) for _ in range(_steps(rng))):
        s, e = op(rng, db)
        steps.append(s)
        expects.append(e)
    files[target] = maybe_byte_mutation(rng, db.serialize(), ROCPD, False, steps, expects)
    return drawn_case(rng, f"rocpd:{base_seed}:{index}", index, name, seed, ROCPD, files, target, steps, expects)


def seed_case(name: str) -> Case:
    seed = seeds()[name]
    return Case(f"seed:{name}", name, ROCPD, [], ANY, dict(seed.files), seed.arg, seed.targets[0])
