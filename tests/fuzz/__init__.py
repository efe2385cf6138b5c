"""Structure-aware fuzzing of moeprof's readers through the CLI, as tests/test_fuzz.py and ``python -m tests.fuzz``.

- ``seeds``: valid inputs (committed samples cut small, hand-built traces), as bytes per file.
- ``protowire``: a lossless protobuf wire-format tree with the XSpace field numbers, to damage XPlanes.
- ``mutators``: per-format mutations (JSON events and args, XPlane fields, SQLite tables and cells, parquet
  columns, bytes) and the fixed file-system cases; a case is a pure function of ``(seed, index)``.
- ``runner``: writes a case to disk, runs ``moeprof`` in a long-lived worker (in-process ``CliRunner``,
  file descriptors 1 and 2 captured) or as ``python -m moeprof``, with a timeout and a memory limit.
- ``oracle``: the contract (one error line naming the file, exit 2, no traceback; sane figures; input
  untouched) as checks on one outcome.
- ``known``: failure classes not yet fixed (catalog: KNOWN_FAILURES.md), which the test xfails.

Only the CLI and files are used: nothing here imports moeprof's readers, so they can be reshaped freely.
"""
