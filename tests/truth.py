"""The independent route the tests share: an analysis compared with a generator's truth file, the collectives' time
per kind, and a plain-Python interval union. Nothing here calls moeprof's readers or math."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def assert_equals_truth(got: dict, want: dict, *, skip: Iterable[str] = (), total: bool = True) -> None:
    """Every figure of the truth file ``want`` is the analysis JSON ``got``'s, to the ns: the devices in the truth's
    order, each device's keys but those in ``skip``, and (``total``) the total's."""
    skipped = set(skip)
    assert [d["device"] for d in got["devices"]] == [d["device"] for d in want["devices"]]
    for g, w in zip(got["devices"], want["devices"]):
        for key, value in w.items():
            if key not in skipped:
                assert g[key] == value, (g["device"], key)
    if total:
        for key, value in want["total"].items():
            assert got["total"][key] == value, key


def comm_ns_by_kind(got: dict) -> dict[str, int]:
    """The analysis JSON's collectives' time summed by kind (as truth files' ``comm_kind_ns``)."""
    kinds: Counter = Counter()
    for c in got["collectives"]:
        kinds[c["kind"]] += c["total_ns"]
    return dict(kinds)


def union_length(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of [start, end) intervals, by a sort and a merge."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)
