"""Spec §9, the projection (what-if), in one package; this module is the only way in (the import contract
``projection's way in`` in pyproject.toml keeps it so).

What it holds, from the bottom up:

* :mod:`.columns`: the replay's columns of one file, made in the per-file map;
* :mod:`.replay` (with its C loops, ``_replay_native.c``): the dependency graph of a job's activities and its
  replay, a longest path;
* :mod:`.job`: the job graph, :class:`ReplayJob`, the files' columns joined with the §8 instances and clock
  offsets (:func:`joined_job`), and the figures of a replayed timeline (step times, critical path, §4/§8);
* :mod:`.selection`: which activities a term's FILTERS select;
* :mod:`.terms`: the table of terms (``scale``, ``balance``, ``balance-router``, ``tokens``, ``top_k``,
  ``capacity``, ``experts``, ``roof``), one module each that parses, selects and applies, and what terms take
  from each activity without a replay; the routing terms resize each op from its program's HLO shapes
  (``terms/program.py``, ``terms/resize.py``);
* :mod:`.savings`: every opportunity's projected saving at the cost of a few replays;
* :mod:`.trace`: a projected timeline as a trace of its own;
* :mod:`.projector`: the :class:`Projector`, which projects terms over a job;
* :mod:`.plan`: which projections a measured job gets (:func:`project_analysis`).

Tests, benchmarks, the pipeline and ``diff`` project through the :class:`Projector`.
"""

from __future__ import annotations

from .columns import REPLAY_COLUMNS, SYNC_COLUMNS, empty_replay_table, empty_syncs, replay_table
from .job import ReplayJob, joined_job
from .plan import project_analysis
from .projector import Projector, affordable
from .terms import parse_terms, taken_away, term_help

__all__ = [
    "REPLAY_COLUMNS",
    "SYNC_COLUMNS",
    "Projector",
    "ReplayJob",
    "affordable",
    "empty_replay_table",
    "empty_syncs",
    "joined_job",
    "parse_terms",
    "project_analysis",
    "replay_table",
    "taken_away",
    "term_help",
]
