"""``moeprof.profile_steps``: profile training steps from inside a JAX program and write a run folder.

As a context manager the whole block is traced and ``prof.step(i)`` marks step
``i``; as a decorator on the step function, calls ``skip .. skip+count-1`` are
traced, one step each. Either way the run folder gets the trace, ``manifest.json``
and ``analysis.json``, and ``.result`` holds the :class:`~moeprof.Analysis`.

jax is imported only when profiling starts, so ``import moeprof`` stays light.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import ParamSpec, TypeVar

from ..core.analysis import Analysis
from ..options import StepOptions
from ..pipeline import Request, run
from .runfolder import ANALYSIS, MANIFEST, TRACE_DIR, new_manifest, write_json

P = ParamSpec("P")
R = TypeVar("R")
STEP_NAME = "train"  # the StepTraceAnnotation name the demo uses too


class ProfileSteps:
    """What :func:`profile_steps` returns; see there."""

    def __init__(self, out_dir: str | Path, *, skip: int = 0, count: int | None = None) -> None:
        if not isinstance(skip, int) or skip < 0:
            raise ValueError(f"skip must be a non-negative int (got {skip!r})")
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError(f"count must be a positive int or None (got {count!r})")
        self.out_dir = Path(out_dir)
        self.skip = skip
        self.count = count
        self.result: Analysis | None = None
        self._stack: ExitStack | None = None
        self._marked: list[int] = []

    # ---- context manager ---------------------------------------------------------------------

    def __enter__(self) -> ProfileSteps:
        import jax

        if self._stack is not None:
            raise RuntimeError("profile_steps is already active")
        self._trace_dir().mkdir(parents=True, exist_ok=True)
        self._marked = []
        self.result = None
        stack = ExitStack()
        stack.enter_context(jax.profiler.trace(str(self._trace_dir())))
        self._stack = stack
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()  # stops the trace and writes the XPlane
        if exc_type is None:
            # the block traced every step: skip/count choose which ones the analysis measures
            selection = f":{self.count}" if self.count is not None else None
            self._finish("context", StepOptions(selection=selection, skip_first=self.skip))

    @contextmanager
    def step(self, i: int) -> Iterator[None]:
        """Mark step ``i``; block on its outputs inside, so the step covers its device work."""
        import jax

        self._marked.append(int(i))
        with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=int(i)):
            yield

    # ---- decorator ---------------------------------------------------------------------------

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        if self.count is None:
            raise ValueError("profile_steps needs count= when it decorates a step function")
        first, last = self.skip, self.skip + self.count - 1
        calls = 0
        state = {"tracing": False, "done": False}

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            nonlocal calls
            n = calls
            calls += 1
            if state["done"] or n < first:
                return fn(*args, **kwargs)
            import jax

            if not state["tracing"]:
                self._trace_dir().mkdir(parents=True, exist_ok=True)
                self._marked = []
                jax.profiler.start_trace(str(self._trace_dir()))
                state["tracing"] = True
            try:
                self._marked.append(n)
                with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=n):
                    out = fn(*args, **kwargs)
                    # the step's window must cover its device work, not just the dispatch
                    jax.block_until_ready(out)
            except BaseException:
                state["tracing"], state["done"] = False, True
                jax.profiler.stop_trace()
                raise
            if n == last:
                state["tracing"], state["done"] = False, True
                jax.profiler.stop_trace()
                self._finish("decorator", None)
                wrapper.result = self.result  # type: ignore[attr-defined]
            return out

        wrapper.result = None  # type: ignore[attr-defined]
        wrapper.profiler = self  # type: ignore[attr-defined]
        return wrapper

    # ---- run folder --------------------------------------------------------------------------

    def _trace_dir(self) -> Path:
        return self.out_dir / TRACE_DIR

    def _finish(self, mode: str, step_options: StepOptions | None) -> None:
        import jax

        devices = jax.devices()
        manifest = new_manifest(
            "library",
            command=list(sys.argv),
            mode=mode,
            skip=self.skip,
            count=self.count,
            steps_marked=list(self._marked),
            devices={
                "count": len(devices),
                "kind": devices[0].device_kind if devices else None,
                "platform": devices[0].platform if devices else None,
                "processes": jax.process_count(),
            },
        )
        write_json(self.out_dir / MANIFEST, manifest)
        self.result = run(Request([self.out_dir], steps=step_options)).analysis
        write_json(self.out_dir / ANALYSIS, self.result.to_json())


def profile_steps(out_dir: str | Path, *, skip: int = 0, count: int | None = None) -> ProfileSteps:
    """Profile training steps into the run folder ``out_dir``.

    Context manager (the whole block is traced; ``skip``/``count`` pick the steps
    the analysis measures)::

        with moeprof.profile_steps("runs/mine", skip=1) as prof:
            for i in range(6):
                with prof.step(i):
                    state = train_step(state, batch)
                    jax.block_until_ready(state)
        prof.result.total.comm_share

    Decorator (calls ``skip .. skip+count-1`` are traced, each one step, blocked on
    before its step closes; ``count`` is required)::

        @moeprof.profile_steps("runs/mine", skip=2, count=3)
        def train_step(state, batch): ...

        train_step.result  # after the last profiled call
    """
    return ProfileSteps(out_dir, skip=skip, count=count)
