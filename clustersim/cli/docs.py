"""``clustersim docs``: the reference pages generated from the code (``reference``), checked
against or written into a checkout's ``docs/`` folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clustersim.cli.common import user_errors
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
        "--write", help="Write the pages that are stale or missing.")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing; exit 1 if a page is stale or missing.")] = False,
) -> None:
    """Check or write the reference pages generated from the code.

    scenario-reference.md comes from the scenario schema, commands.md from every command's
    help. Without --write or --check it says whether the folder's copies are current."""
    if write and check:
        raise ClusterSimError("--check", "give --write or --check, not both")
    generated = pages(ctx.find_root().command)
    states = page_states(folder, generated)
    if write:
        if not folder.is_dir():
            raise OutputError(str(folder), "no such folder: run from a clustersim checkout's "
                              "root, or give --folder")
        for name, state in states.items():
            if state != "current":
                try:
                    atomic_write_text(folder / name, generated[name])
                except OSError as error:
                    raise OutputError(str(folder / name),
                                      f"cannot write: {error.strerror or error}") from None
                state = "written"
            typer.echo(f"{folder / name}: {state}")
        return
    for name, state in states.items():
        typer.echo(f"{folder / name}: {state}")
    if check and any(state != "current" for state in states.values()):
        typer.echo(f"run `{REGENERATE}` to update them", err=True)
        raise typer.Exit(1)
