"""What every command shares: Click's errors and ours as ``path: message`` lines with exit
code 2, and the lines that describe a run's layout and calibration."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import typer
from typer.core import TyperGroup

from clustersim.errors import ClusterSimError, OutputError
from clustersim.safe_write import folder_lock
from clustersim.validation import shown_lines

# Click's UsageError, from whichever copy of Click this Typer uses (newer ones vendor it)
_UsageError: type[Exception] = typer.BadParameter.__base__


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
"""``-h`` works as ``--help`` on every command."""


class Commands(TyperGroup):
    """Click's own command-line errors (an option's value out of range or not a number, a
    missing or unknown option or command) as one ``path: message`` line with exit code 2, like
    ours; a command group called bare prints its help."""

    def make_context(self, info_name: Any, args: Any, parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _UsageError as error:  # the group's own options: `clustersim --bogus`
            _usage_error(error, info_name or self.name or "clustersim", None)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _UsageError as error:
            _usage_error(error, ctx.command_path, ctx.invoked_subcommand)


def _usage_error(error: Exception, command_path: str, subcommand: str | None) -> None:
    where = getattr(error, "ctx", None)
    if type(error).__name__ == "NoArgsIsHelpError" and where is not None:
        # a command group called bare: its help, which the error holds (or which Typer's rich
        # help printed while the error was made)
        help_text = error.format_message()  # type: ignore[attr-defined]
        if help_text:
            typer.echo(help_text)
        raise typer.Exit(0)
    param = getattr(error, "param", None)
    if isinstance(error, typer.BadParameter) and param is not None and error.message:
        path, message = (param.opts or [param.name])[0], error.message
    else:
        path = (where.command_path if where is not None
                else " ".join(filter(None, (command_path, subcommand))))
        message = error.format_message()  # type: ignore[attr-defined]
    typer.echo(f"{path}: {' '.join(message.split())}", err=True)
    raise typer.Exit(2) from None


F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """Turn clustersim's errors into ``path: message`` lines on stderr and exit code 2. In a
    command given a ``scenario`` file, a line about one of its fields starts with the file's
    name as given: ``quickstart.yaml: engine.max_modle_len: unknown field; ...``."""
    signature = inspect.signature(func)

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ClusterSimError as error:
            scenario = signature.bind_partial(*args, **kwargs).arguments.get("scenario")
            file = None if scenario is None else str(scenario)
            for line in shown_lines(error, file):
                typer.echo(_clipped(line), err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


MAX_LINE_CHARS = 1000
"""Longest error line printed: a message quoting a huge value is cut, not echoed whole."""


def _clipped(line: str) -> str:
    line = " ".join(line.split("\n"))
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "..."


def ms(value: float | None) -> str:
    """Seconds as milliseconds for a table cell; '-' when undefined."""
    return "-" if value is None else f"{value * 1e3:,.1f}"


def describe_calibration(instances: list[Any]) -> str:
    """Which GPU profiles priced the steps, and where their validation errors are."""
    labels = sorted({f"{info.gpu}: {info.calibration}" for info in instances})
    return f"step times priced with {', '.join(labels)} (how far to trust them: docs/validation.md)"


def describe_layout(name: str, model: str, instances: list[Any]) -> str:
    """One line per pool: what runs where."""
    pools: dict[str, list[Any]] = {}
    for info in instances:
        pools.setdefault(info.pool, []).append(info)
    def engine(info: Any) -> str:
        precision = ""  # named only where the engine is not plain 16-bit
        if getattr(info, "quantization", None) is not None:
            precision += f", {info.quantization}"
        kv = getattr(info, "kv_dtype", "")  # always named: KV-bound runs swing on it
        kv = f" of {info.block_size} tokens ({kv})" if kv else ""
        pp = getattr(info, "pipeline_parallel_size", 1)
        stages = f" x PP{pp}" if pp > 1 else ""
        tier = ""
        if getattr(info, "cpu_kv_blocks", 0):
            tier = (f", CPU tier {info.cpu_kv_gib:g} GiB ({info.cpu_kv_blocks} blocks) over "
                    f"{info.host_link_gb_per_s:.1f} GB/s")
        return (f"{info.gpu} TP{info.tensor_parallel_size}{stages}{precision}, "
                f"max_num_batched_tokens "
                f"{info.max_num_batched_tokens}, max_num_seqs {info.max_num_seqs}, "
                f"{info.num_gpu_blocks} KV blocks{kv}{tier}")

    if len(instances) == 1:
        return f"{name}: {model} on {engine(instances[0])}"
    lines = [f"{name}: {model}"]
    for pool, members in pools.items():
        role = "" if members[0].role == "colocated" else f" ({members[0].role})"
        dp = members[0].data_parallel_size
        if dp > 1:
            lines.append(f"  {pool}{role}: {len(members) // dp} x data-parallel {dp} ranks of "
                         f"{engine(members[0])} each")
        else:
            lines.append(f"  {pool}{role}: {len(members)} x {engine(members[0])} each")
    return "\n".join(lines)


def check_out_dir(out: Path, subfolders: tuple[str, ...] = ()) -> Path:
    """Say in one line why a command's output folder (or one of the ``subfolders`` it will
    write into) cannot be created, before the work; leave nothing behind (:func:`writing`
    creates it once there is something to write)."""
    created: list[Path] = []
    try:
        for folder in [out / name for name in subfolders] or [out]:
            created += _make_dir(folder)
            if folder != out:
                _make_subfolder(folder)  # there already: a link there is refused
    finally:
        _remove_if_empty(created)
    return out


@contextmanager
def writing(folder: Path, subfolders: tuple[str, ...] = (), locked: bool = True
            ) -> Iterator[None]:
    """Create ``folder`` (and ``subfolders`` in it) and run the block that writes a command's
    files into it, holding the folder's lock (``safe_write.folder_lock``: another run writing
    there waits its turn; ``locked=False``: the block takes it itself while it puts its files
    in place); a file that cannot be written (a full disk, a folder like /proc or /sys) is one
    ``path: message`` line. If the block fails, the folders this created are removed while
    they are still empty."""
    created = _make_dir(folder)
    try:
        for name in subfolders:
            created += _make_subfolder(folder / name)
        with folder_lock(folder) if locked else nullcontext():
            yield
    except BaseException as error:
        _remove_if_empty(created)
        if isinstance(error, OSError):
            where = error.filename or folder
            raise OutputError(str(where), f"cannot write: {error.strerror or error}") from None
        raise


def _make_dir(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones it created, outermost first."""
    missing = []
    for level in (folder, *folder.parents):
        if level.exists() or level.is_symlink():
            break
        missing.append(level)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        _remove_if_empty(missing[::-1])
        message = f"cannot create output directory: {error.strerror}"
        raise OutputError(str(folder), message) from None
    return missing[::-1]


def _make_subfolder(folder: Path) -> list[Path]:
    """Create a folder the command names inside the output folder (``[folder]``, or ``[]``
    if it is there already). A link there is refused, not followed: the user chose where the
    output folder is, not that its files go anywhere else."""
    try:
        folder.mkdir()
        return [folder]
    except FileExistsError:
        if folder.is_symlink() or not folder.is_dir():
            what = "a symbolic link" if folder.is_symlink() else "not a folder"
            raise OutputError(str(folder), f"is {what}; clustersim writes its files only into "
                              "real folders inside the output folder") from None
        return []
    except OSError as error:
        message = f"cannot create output directory: {error.strerror}"
        raise OutputError(str(folder), message) from None


def _remove_if_empty(created: list[Path]) -> None:
    """Remove the folders a run ``created`` (listed outermost first) from the innermost out,
    up to the first that is not empty: it stays, and so do the folders around it."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


def default_report_dir(scenario_name: str) -> Path:
    """``reports/<scenario>-<YYYYmmdd-HHMMSS>``: the folder name carries the time, the report
    itself none (the same inputs give the same bytes)."""
    return Path("reports") / f"{scenario_name}-{time.strftime('%Y%m%d-%H%M%S')}"

