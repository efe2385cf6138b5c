"""``moeprof classify``: which bucket, kind and rule a kernel name gets, to debug a surprise."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import RulesOption, guarded


def classify_command(
    names: Annotated[list[str], typer.Argument(help="Kernel or copy names, as the trace spells them.")],
    opcode: Annotated[str, typer.Option("--opcode", help="HLO opcode of the kernel's op, if known.")] = "",
    annotation: Annotated[str, typer.Option("--annotation", help="Enclosing CPU op / NVTX range.")] = "",
    collective: Annotated[str, typer.Option("--collective", help="Collective named by kernel args / NCCL NVTX.")] = "",
    activity: Annotated[str, typer.Option("--activity", help="kernel | memcpy | memset")] = "kernel",
    copy_kind: Annotated[str, typer.Option("--copy-kind", help="HtoD | DtoH | DtoD | PtoP | HtoH")] = "",
    rules: RulesOption = None,
) -> None:
    """Print the bucket, kind and deciding rule for each NAME."""

    def body() -> None:
        from rich.table import Table

        from ..core.classify import FIELDS, classify_one, rules_with
        from ..reports.terminal import make_console

        table_rules = rules_with(rules)
        out = Table("name", "bucket", "kind", "rule", "named link")
        out.columns[0].overflow = "fold"
        for name in names:
            evidence = dict.fromkeys(FIELDS, "")
            evidence.update(
                name=name,
                opcode=opcode,
                annotation=annotation,
                collective=collective,
                activity=activity,
                copy_kind=copy_kind,
            )
            c = classify_one(evidence, table_rules)
            out.add_row(name, c.bucket, c.kind or "-", c.rule, c.link or "-")
        make_console().print(out)

    guarded(body)
