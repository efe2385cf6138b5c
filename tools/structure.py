"""Figures of the package's structure, to compare a change's before and after.

python tools/structure.py                 # largest modules, import cycles, functions over 150 lines
python tools/structure.py --path TRACE... # and the route of those inputs through `moeprof analyze`
python tools/structure.py --package moeprof.insight.projection  # a package's modules, lines, importers

**Import cycles**: strongly connected components of the import graph of ``moeprof`` (grimp, the graph
import-linter checks; every import of a module, at its top or inside a function, ``TYPE_CHECKING``
imports left out), read with scipy's strong components.

**The route of the paths** (``--path``): ``moeprof analyze PATHS --jobs 1`` (one process, so every
call is seen) under ``sys.setprofile``. A *stop* is a run of consecutive calls, into one moeprof
module, of functions that receive the user's paths: an argument that is one of them (as typed,
absolute or a file under it), holds one (a list, tuple, set or dict of them), or is an object whose
``path``, ``source`` or ``files`` does. A *climb* is a stop in a higher layer than the stop
before it (pyproject's layers: cli > capture, reports > gate > pipeline > readers, insight > core):
the route went down, came back up, and went down again.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "moeprof"
LONG_FUNCTION = 150  # lines

LAYERS = {"core": 0, "readers": 1, "insight": 1, "pipeline": 2, "gate": 3, "capture": 4, "reports": 4, "cli": 5}


def module_lines() -> list[tuple[int, str]]:
    """(lines, path) of every module, largest first."""
    sizes = [(len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in PACKAGE.rglob("*.py")]
    return sorted(sizes, reverse=True)


def long_functions(limit: int = LONG_FUNCTION) -> list[tuple[int, str]]:
    """(lines, module:function) of every function longer than ``limit`` lines, longest first."""
    out = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append((lines, f"{path.relative_to(ROOT)}:{node.name}"))
    return sorted(out, reverse=True)


def import_cycles() -> list[list[str]]:
    """The import graph's strongly connected components of more than one module, largest first."""
    import grimp
    import numpy as np
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph("moeprof", exclude_type_checking_imports=True)
    modules = sorted(graph.modules)
    index = {m: i for i, m in enumerate(modules)}
    edges = [(index[m], index[t]) for m in modules for t in graph.find_modules_directly_imported_by(m)]
    rows, cols = (np.array(x, dtype=np.int64) for x in zip(*edges))
    matrix = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(modules), len(modules)))
    _, labels = connected_components(matrix, directed=True, connection="strong")
    groups = Counter(labels.tolist())
    cycles = [sorted(modules[i] for i in range(len(modules)) if labels[i] == g) for g, n in groups.items() if n > 1]
    return sorted(cycles, key=len, reverse=True)


def package_figures(package: str) -> tuple[list[tuple[int, str]], dict[str, list[str]]]:
    """A package's modules with their lines, and per module outside it that imports it, which of its modules
    (the package itself: its ``__init__``) that one imports (grimp's graph, as :func:`import_cycles`)."""
    import grimp

    sys.path.insert(0, str(ROOT))
    folder = ROOT.joinpath(*package.split("."))
    lines = sorted(
        ((len(f.read_text().splitlines()), str(f.relative_to(ROOT))) for f in folder.rglob("*.py")), reverse=True
    )
    graph = grimp.build_graph("moeprof", exclude_type_checking_imports=True)
    inside = {package, *graph.find_descendants(package)}
    importers: dict[str, list[str]] = {}
    for module in sorted(inside):
        for importer in sorted(graph.find_modules_that_directly_import(module) - inside):
            importers.setdefault(importer, []).append(module)
    return lines, importers


@dataclass(frozen=True)
class Stop:
    module: str  # path under moeprof/
    functions: tuple[str, ...]

    @property
    def layer(self) -> int | None:
        top = self.module.split("/")[0]
        return LAYERS.get(top)


def _carries(value: Any, marks: tuple[str, ...], depth: int = 0) -> bool:
    if isinstance(value, str | Path):
        text = str(value)
        return any(text == m or text.startswith(m + "/") for m in marks)
    if depth >= 2:
        return False
    if isinstance(value, list | tuple | set | frozenset):
        return any(_carries(v, marks, depth + 1) for v in list(value)[:64])
    if isinstance(value, dict):
        return any(_carries(v, marks, depth + 1) for v in list(value.values())[:64])
    for name in ("path", "source", "files"):
        attribute = getattr(type(value), name, None)
        if isinstance(attribute, property):
            continue  # a computed attribute: reading it would run code under the profiler
        try:
            inner = value.__dict__.get(name) if hasattr(value, "__dict__") else getattr(value, name, None)
        except Exception:
            inner = None
        if inner is not None and _carries(inner, marks, depth + 1):
            return True
    return False


def route(paths: Iterable[str]) -> list[Stop]:
    """The stops of ``moeprof analyze PATHS --jobs 1`` (see the module's docstring)."""
    from typer.testing import CliRunner

    from moeprof.cli.main import app

    typed = [str(p) for p in paths]
    marks = tuple({*typed, *(str(Path(p).resolve()) for p in typed), *(str(Path(p).absolute()) for p in typed)})
    package = str(PACKAGE) + "/"
    calls: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(package) or code.co_name.startswith("<"):
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        local = frame.f_locals
        if any(_carries(local.get(n), marks) for n in names):
            calls.append((code.co_filename[len(package) :], code.co_qualname))

    runner = CliRunner()
    sys.setprofile(profile)
    try:
        result = runner.invoke(app, ["analyze", *typed, "--jobs", "1"])
    finally:
        sys.setprofile(None)
    if result.exit_code != 0:
        raise SystemExit(f"moeprof analyze failed ({result.exit_code}): {result.output}")
    stops: list[Stop] = []
    for module, function in calls:
        if stops and stops[-1].module == module:
            if function not in stops[-1].functions:
                stops[-1] = Stop(module, (*stops[-1].functions, function))
            continue
        stops.append(Stop(module, (function,)))
    return stops


def climbs(stops: list[Stop]) -> int:
    layered = [s.layer for s in stops if s.layer is not None]
    return sum(1 for a, b in itertools.pairwise(layered) if b > a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", nargs="+", default=[], help="inputs to follow through moeprof analyze")
    parser.add_argument("--top", type=int, default=10, help="largest modules to list")
    parser.add_argument(
        "--package", help="a package's modules, lines and who imports it (e.g. moeprof.insight.projection)"
    )
    args = parser.parse_args()
    sizes = module_lines()
    print(f"{len(sizes)} modules, {sum(n for n, _ in sizes):,} lines; largest:")
    for n, name in sizes[: args.top]:
        print(f"  {n:5d}  {name}")
    cycles = import_cycles()
    print(f"import cycles: {len(cycles)}")
    for cycle in cycles:
        print(f"  {len(cycle)}: {', '.join(cycle)}")
    longs = long_functions()
    print(f"functions over {LONG_FUNCTION} lines: {len(longs)}")
    for n, name in longs:
        print(f"  {n:5d}  {name}")
    if args.package:
        lines, importers = package_figures(args.package)
        print(f"{args.package}: {len(lines)} modules, {sum(n for n, _ in lines):,} lines")
        for n, name in lines:
            print(f"  {n:5d}  {name}")
        print(f"imported by {len(importers)} modules outside it:")
        for importer, modules in sorted(importers.items()):
            print(f"  {importer} -> {', '.join(modules)}")
    if args.path:
        stops = route(args.path)
        modules = Counter(s.module for s in stops)
        print(f"route of {' '.join(args.path)}: {len(stops)} stops in {len(modules)} modules, {climbs(stops)} climbs")
        for s in stops:
            print(f"  [{s.layer if s.layer is not None else '-'}] {s.module}: {', '.join(s.functions)}")


if __name__ == "__main__":
    main()
