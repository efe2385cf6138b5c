"""Structure-aware mutations of a folder of NCCL Inspector logs (JSON lines), and what each must give.

Kept apart from the random campaign of ``mutators.generate`` (whose cases KNOWN_FAILURES.md replays by
index: a new seed there would renumber them). Each case: the synthetic 8-rank job (one step), one file
mutated by one or two line-level operations, with the expectation of each (REJECT: exit 2 and a line
naming the file; ANY: 0 or 2; SAME: exit 0).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from synthetic import nccl_inspector as gen

from .mutators import ANY, REJECT, SAME

REQUIRED = (
    ("header", "id"), ("header", "rank"), ("header", "n_ranks"), ("coll_perf", "coll"), ("coll_perf", "coll_sn"),
    ("coll_perf", "coll_msg_size_bytes"), ("coll_perf", "coll_exec_time_us"),
)  # fmt: skip
OPTIONAL = (
    ("header", "comm_name"), ("header", "nnodes"), ("metadata", "git_rev"), ("metadata", "hostname"),
    ("coll_perf", "coll_algobw_gbs"), ("coll_perf", "coll_busbw_gbs"), ("coll_perf", "coll_timing_source"),
)  # fmt: skip


@dataclass
class InspectorCase:
    key: str
    files: dict[str, bytes]
    target: str
    steps: list[str]
    expect: str


Lines = list[str]


def _obj(lines: Lines, i: int) -> dict | None:
    """Line ``i`` as a JSON object, None where it is none (a blank or garbage line an earlier step put in)."""
    try:
        o = json.loads(lines[i])
    except ValueError:
        return None
    return o if isinstance(o, dict) else None


def _line(rng: random.Random, lines: Lines) -> tuple[int, dict]:
    """A line whose operation part (coll_perf, or p2p_perf) is an object, drawn again while the draw is none
    (as :func:`_field`)."""
    for _ in range(1000):
        i = rng.randrange(len(lines))
        o = _obj(lines, i)
        if o is not None and isinstance(o.get(_perf(o)[0]), dict):
            return i, o
    raise RuntimeError(f"no line of {len(lines)} with an operation")


def _field(
    rng: random.Random, lines: Lines, fields: tuple[tuple[str, str], ...], *, present: bool = True, lo: int = 0
) -> tuple[int, dict, str, str]:
    """A line (from ``lo``) and one of ``fields`` (part, key) to change in it: its part an object, holding the key
    where ``present``. Drawn again while the draw does not fit (a blank line, a part or key an earlier step of the
    case took away): a case whose first draw fits draws as it always did, so its key replays it unchanged."""
    for _ in range(1000):
        i = rng.randrange(lo, len(lines))
        o = _obj(lines, i)
        if o is None:
            continue
        part, key = _key(o, *rng.choice(fields))
        if isinstance(o.get(part), dict) and (not present or key in o[part]):
            return i, o, part, key
    raise RuntimeError(f"no line of {len(lines)} to change")


def _set_obj(lines: Lines, i: int, o: dict) -> None:
    """Line ``i`` becomes ``o``, as compact JSON."""
    lines[i] = json.dumps(o, separators=(",", ":"))


def _perf(o: dict) -> tuple[str, str]:
    """(the line's operation part, its key prefix): coll_perf / coll, or p2p_perf / p2p."""
    return ("p2p_perf", "p2p") if "p2p_perf" in o else ("coll_perf", "coll")


def _key(o: dict, part: str, key: str) -> tuple[str, str]:
    """A (part, key) of REQUIRED / OPTIONAL as this line spells it (a P2P line: p2p_perf.p2p_*)."""
    perf, prefix = _perf(o)
    if part != "coll_perf" or perf == "coll_perf":
        return part, key
    return perf, "p2p" if key == "coll" else key.replace("coll_", f"{prefix}_", 1)


def truncate_line(rng: random.Random, lines: Lines) -> tuple[str, str]:
    if lines[-1] == "\x00":  # drawn twice: the last line is cut already
        return "last line cut already", REJECT
    i = len(lines) - 1
    cut = rng.randrange(1, len(lines[i]) - 1)
    lines[i] = lines[i][:cut]
    lines.append("\x00")  # marks: no newline after the last line
    return f"last line cut to {cut} chars", REJECT


def retype(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i, o, part, key = _field(rng, lines, REQUIRED + OPTIONAL)
    old = o[part][key]
    new: object = "x" if isinstance(old, int | float) else 17
    if rng.random() < 0.3:
        new = [old] if rng.random() < 0.5 else {"v": old}
    o[part][key] = new
    _set_obj(lines, i, o)
    return f"line {i + 1}: {part}.{key} {old!r} -> {new!r}", REJECT


def to_bool(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i, o = _line(rng, lines)
    part, prefix = _perf(o)
    o[part][f"{prefix}_exec_time_us"] = True
    _set_obj(lines, i, o)
    return f"line {i + 1}: exec time true", REJECT


def drop_required(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i, o, part, key = _field(rng, lines, REQUIRED)
    del o[part][key]
    _set_obj(lines, i, o)
    return f"line {i + 1}: {part}.{key} removed", REJECT


def null_required(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i, o, part, key = _field(rng, lines, REQUIRED, present=False)
    o[part][key] = None
    _set_obj(lines, i, o)
    return f"line {i + 1}: {part}.{key} null", REJECT


def drop_part(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i, o, part, _ = _field(rng, lines, (("header", ""), ("coll_perf", "")), present=False, lo=1)
    del o[part]
    _set_obj(lines, i, o)
    # a line without header follows no dump_stats; one without coll_perf is a line of nothing: skipped
    return f"line {i + 1}: {part} removed", REJECT if part == "header" else ANY


def drop_optional(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i, o, part, key = _field(rng, lines, OPTIONAL)
    del o[part][key]
    _set_obj(lines, i, o)
    return f"line {i + 1}: {part}.{key} removed", ANY


def garbage_line(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i = rng.randrange(len(lines) + 1)
    lines.insert(i, rng.choice(["hello", "[1,2]", "{", "null", '"text"', "{}}"]))
    # first: the file is no Inspector log any more, so the folder's reading skips it with a note
    return f"garbage line at {i + 1}", REJECT if i else ANY


def huge_or_negative(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i, o = _line(rng, lines)
    part, prefix = _perf(o)
    key = rng.choice([f"{prefix}_exec_time_us", f"{prefix}_msg_size_bytes", f"{prefix}_sn"])
    o[part][key] = rng.choice([-1, 0, 2**62, 1.5e300, 12.5])
    _set_obj(lines, i, o)
    return f"line {i + 1}: {key} = {o[part][key]!r}", ANY


def duplicate_line(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])
    return f"line {i + 1} written twice", SAME


def blank_lines(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i = rng.randrange(len(lines))
    lines.insert(i, "")
    return f"blank line at {i + 1}", SAME


def reorder(rng: random.Random, lines: Lines) -> tuple[str, str]:
    rng.shuffle(lines)
    return "lines shuffled", SAME


def extra_key(rng: random.Random, lines: Lines) -> tuple[str, str]:
    i, o = _line(rng, lines)
    part, prefix = _perf(o)
    o[part][f"{prefix}_future_field"] = {"x": 1}
    o["proxy_trace"] = None
    _set_obj(lines, i, o)
    return f"line {i + 1}: unknown keys added", SAME


OPS: list[tuple[Callable[[random.Random, Lines], tuple[str, str]], int]] = [
    (truncate_line, 3), (retype, 4), (to_bool, 1), (drop_required, 4), (null_required, 2), (drop_part, 2),
    (drop_optional, 3), (garbage_line, 3), (huge_or_negative, 3), (duplicate_line, 2), (blank_lines, 2),
    (reorder, 1), (extra_key, 2),
]  # fmt: skip


def _combine(expects: list[str]) -> str:
    if REJECT in expects:
        return REJECT
    return ANY if ANY in expects else SAME


def _sniffs(data: bytes) -> bool:
    """Whether the file still reads as an Inspector log by its first line (the reader's rule, written apart)."""
    first = data.split(b"\n", 1)[0]
    try:
        obj = json.loads(first)
    except ValueError:
        return False
    return (
        isinstance(obj, dict) and isinstance(obj.get("header"), dict) and "id" in obj["header"]
        and isinstance(obj.get("metadata"), dict) and any(k in obj for k in ("coll_perf", "p2p_perf", "dump_stats"))
    )  # fmt: skip


def seed_files(p2p: bool = False) -> dict[str, bytes]:
    """The one-step 8-rank job; ``p2p``: with the pipeline communicator's Send/Recv records."""
    job = gen.build(steps=1, seed=11, p2p=p2p)
    return {f"logs/{name}": ("\n".join(lines) + "\n").encode() for name, lines in job.lines.items()}


def generate(base_seed: int, index: int, p2p: bool = False) -> InspectorCase:
    rng = random.Random(f"moeprof-fuzz-inspector{':p2p' if p2p else ''}:{base_seed}:{index}")
    files = seed_files(p2p)
    target = rng.choice(sorted(files))
    lines = files[target].decode().splitlines()
    steps, expects = [], []
    ops = [rng.choices([o for o, _ in OPS], [w for _, w in OPS])[0] for _ in range(rng.choice([1, 1, 2]))]
    # a garbage line is no JSON for the later ops; a cut last line stays last
    ops.sort(key=lambda op: (op is garbage_line, op is truncate_line))
    for op in ops:
        s, e = op(rng, lines)
        steps.append(s)
        expects.append(e)
    if lines and lines[-1] == "\x00":
        files[target] = "\n".join(lines[:-1]).encode()
    else:
        files[target] = ("\n".join(lines) + "\n").encode()
    if not _sniffs(files[target]):
        expects = [ANY]  # no longer an Inspector log: skipped with a note, whatever else changed in it
    key = f"{'p2p:' if p2p else ''}{base_seed}:{index}"
    return InspectorCase(key, files, target, steps, _combine(expects))
