"""``clustersim docs``: the reference pages generated from the code (``reference``) and the
command output the pages show (``examples``), checked against or written into a checkout's
``docs/`` folder and README."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clustersim.cli.common import user_errors
from clustersim.cli.examples import run_examples
from clustersim.cli.reference import REGENERATE, pages
from clustersim.errors import ClusterSimError, OutputError
from clustersim.safe_write import atomic_write_text


def page_states(folder: Path, generated: dict[str, str]) -> dict[str, str]:
    """Each generated page's state in ``folder``: current, stale or missing."""
    states = {}
    for name, text in generated.items():
        path = folder / name
        if not path.is_file():
            states[name] = "missing"
        else:
            states[name] = "current" if path.read_text(encoding="utf-8") == text else "stale"
    return states


@user_errors
def docs_cmd(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Option(
        "--folder", help="The docs folder of a clustersim checkout.")] = Path("docs"),
    write: Annotated[bool, typer.Option(
        "--write", help="Write the pages and the examples that are stale or missing.")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing; exit 1 if a page or an example is stale or missing.")
    ] = False,
    examples: Annotated[bool, typer.Option(
        "--examples/--no-examples", help="Also run the command of every example of command "
        "output in the README and the folder's pages (marked `<!-- example: COMMAND -->`; "
        "the plans among them take minutes).")] = True,
    only: Annotated[str | None, typer.Option(
        "--only", help="Run only the examples whose page:line or command contains this "
        "text.")] = None,
) -> None:
    """Check or write the pages generated from the code, and the command output they show.

    scenario-reference.md comes from the scenario schema, commands.md from every command's
    help; each example block of README.md and docs/*.md from the command its marker names.
    Without --write or --check it says whether the folder's copies are current."""
    if write and check:
        raise ClusterSimError("--check", "give --write or --check, not both")
    if only is not None and not examples:
        raise ClusterSimError("--only", "cannot be given with --no-examples")
    generated = pages(ctx.find_root().command)
    states = page_states(folder, generated)
    if write:
        if not folder.is_dir():
            raise OutputError(str(folder), "no such folder: run from a clustersim checkout's "
                              "root, or give --folder")
        for name, state in states.items():
            if state != "current":
                _write(folder / name, generated[name])
                state = "written"
            typer.echo(f"{folder / name}: {state}")
    else:
        for name, state in states.items():
            typer.echo(f"{folder / name}: {state}")
    stale = 0
    if examples:
        stale = run_examples(folder, only, _write if write else None, typer.echo)
    if check and (stale or any(state != "current" for state in states.values())):
        typer.echo(f"run `{REGENERATE}` to update them", err=True)
        raise typer.Exit(1)


def _write(path: Path, text: str) -> None:
    try:
        atomic_write_text(path, text)
    except OSError as error:
        raise OutputError(str(path), f"cannot write: {error.strerror or error}") from None
