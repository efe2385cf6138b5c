"""``moeprof flops``: the model FLOPs per token of a config, item by item, with formulas."""

from __future__ import annotations

from typing import Annotated

import typer

from ..insight.flops import PRESETS, flops_per_token, load_model_config
from .common import guarded


def flops_command(
    model: Annotated[
        str,
        typer.Option(
            "--model", "-m", help=f"Preset ({', '.join(PRESETS)}) or a HuggingFace config.json (or its folder)."
        ),
    ] = "deepseek-v3",
    seq_len: Annotated[int, typer.Option("--seq-len", min=1, help="Sequence length the attention sees.")] = 4096,
    json: Annotated[
        bool, typer.Option("--json", help="Print the moeprof.flops/1 JSON object and nothing else.")
    ] = False,
    inference: Annotated[
        bool, typer.Option("--inference", help="Forward pass only (default: training = 3 × forward).")
    ] = False,
) -> None:
    """Model FLOPs per token (routed/shared experts, dense FFN, router, attention, LM head) and parameter counts."""

    def body() -> None:
        import orjson
        from rich.table import Table

        from ..reports.terminal import make_console

        breakdown = flops_per_token(load_model_config(model), seq_len, training=not inference)
        doc = breakdown.to_dict()
        if json:
            typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
            return
        mode = "training (3 × forward)" if breakdown.training else "inference (forward)"
        table = Table("item", "GFLOPs/token", "share", "formula", title=f"{breakdown.model}: {mode}, seq len {seq_len}")
        table.columns[1].justify = table.columns[2].justify = "right"
        table.columns[3].overflow = "fold"
        for row in doc["items"]:
            table.add_row(row["label"], f"{row['flops'] / 1e9:,.2f}", f"{100 * row['share']:.1f}%", row["formula"])
        table.add_section()
        table.add_row("total", f"{breakdown.total / 1e9:,.2f}", "100.0%", "")
        console = make_console()
        console.print(table)
        console.print(
            f"active parameters per token {breakdown.active_params / 1e9:,.2f} B"
            f" (no input embedding), total parameters {breakdown.total_params / 1e9:,.2f} B"
        )
        console.print("symbols: " + ", ".join(f"{k}={v}" for k, v in breakdown.symbols.items()), highlight=False)
        for note in breakdown.notes:
            console.print(f"note: {note}", highlight=False)

    guarded(body)
