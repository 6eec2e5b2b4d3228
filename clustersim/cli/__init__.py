"""The ``clustersim`` command line: parse, call, print. User errors exit with code 2.

One module per command; they share ``common`` (errors, layout lines) and ``checks`` (options
checked as scenario fields), and none imports another.
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from typing import Annotated

import typer

from clustersim import native
from clustersim.cli.calibrate import calibrate_cmd, validate_cmd
from clustersim.cli.catalog import catalog_cmd
from clustersim.cli.common import HELP_OPTIONS, Commands
from clustersim.cli.compare import compare_cmd
from clustersim.cli.docs import docs_cmd
from clustersim.cli.plan import plan_cmd
from clustersim.cli.simulate import simulate_cmd
from clustersim.cli.step_time import step_time_cmd
from clustersim.cli.trace import trace_app

app = typer.Typer(
    cls=Commands,
    help="Capacity planning for LLM serving on a vLLM-faithful simulator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"clustersim {version('clustersim')} ({native.status()})")
        raise typer.Exit(0)


@app.callback()
def _options(
    show_version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print clustersim's version and exit.")] = False,
) -> None:
    """Capacity planning for LLM serving on a vLLM-faithful simulator."""


app.command("plan")(plan_cmd)
app.command("simulate")(simulate_cmd)
app.command("compare")(compare_cmd)
app.command("step-time")(step_time_cmd)
app.add_typer(trace_app, name="trace")
app.command("calibrate")(calibrate_cmd)
app.command("validate")(validate_cmd)
app.command("catalog")(catalog_cmd)
app.command("docs")(docs_cmd)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())
