"""How every output file is written: whole or not at all, never through a link, and one run at
a time per folder.

    out/.summary.json.1a2b3c.tmp   created new (O_EXCL: never an existing file or link),
          |                        written, flushed and synced
          | os.replace             atomic within a folder
          v
    out/summary.json               a reader sees the old file or the new one, never half of
                                   one; a link planted here is itself replaced, its target
                                   untouched

A run killed mid-write leaves at most a hidden ``.*.tmp`` file beside the last good output.
Two runs writing one folder take turns: :func:`folder_lock` holds ``.clustersim.lock`` in it
while one of them writes (seconds), and removes it after; the later run's files are the ones
left, each whole, none mixed with the earlier run's. On a file system without locks the files
are still written whole, the turns not enforced.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from clustersim.errors import OutputError

_CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def atomic_file(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """A new file to write ``path``'s contents into (text: UTF-8, newlines as written); it
    replaces ``path`` when the block ends, and is removed if the block fails."""
    with staged_file(path, binary) as (file, commit):
        yield file
        commit()


@contextmanager
def staged_file(path: Path, binary: bool = False
                ) -> Iterator[tuple[IO[Any], Callable[[], None]]]:
    """:func:`atomic_file`, put in place only when the block calls the ``commit`` it yields
    (after the last write: it closes the file), so that a file written for a long time can
    replace ``path`` at a chosen moment (a folder's lock held); a file not committed when the
    block ends is removed."""
    temp = path.with_name(f".{path.name[:200]}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temp, _CREATE_NEW, 0o666)  # 0o666: the umask decides, as for open()
    except OSError as error:
        raise _naming(error, temp, path) from None
    committed = False
    try:
        with os.fdopen(fd, "wb" if binary else "w",
                       **({} if binary else {"encoding": "utf-8", "newline": ""})) as file:

            def commit() -> None:
                nonlocal committed
                file.flush()
                os.fsync(file.fileno())
                file.close()
                os.replace(temp, path)
                committed = True

            yield file, commit
    except BaseException as error:
        if not committed:
            with suppress(FileNotFoundError):
                os.unlink(temp)
        if isinstance(error, OSError):
            raise _naming(error, temp, path) from None
        raise
    if not committed:
        with suppress(FileNotFoundError):
            os.unlink(temp)


def _naming(error: OSError, temp: Path, path: Path) -> OSError:
    """``error`` naming the file the user knows rather than the temporary one."""
    if error.filename is None or str(error.filename) != str(temp):
        return error
    return type(error)(error.errno, error.strerror, str(path))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_file(path, binary=True) as file:
        file.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_file(path) as file:
        file.write(text)


LOCK_NAME = ".clustersim.lock"
LOCK_WAIT_S = 60.0
"""How long a run waits for another one writing the same folder: writing takes seconds (the
work is done before), so a longer wait means the other run is stuck."""


@contextmanager
def folder_lock(folder: Path, wait_s: float | None = None) -> Iterator[None]:
    """Hold ``folder``'s lock while the block writes into it: a second run waits for the
    first to finish writing, up to ``wait_s`` (default :data:`LOCK_WAIT_S`), then is refused
    with one line. The lock file is removed when the block ends."""
    path = folder / LOCK_NAME
    deadline = time.monotonic() + (LOCK_WAIT_S if wait_s is None else wait_s)
    fd = _lock(path, deadline)
    try:
        yield
    finally:
        if fd is not None:
            with suppress(FileNotFoundError):
                os.unlink(path)  # while still held, so that no one locks a file about to go
            os.close(fd)


def _lock(path: Path, deadline: float) -> int | None:
    """The lock file at ``path``, open and locked; None where the folder can hold none (the
    writes then say why in their own words) or its file system has no locks (the files are
    still written whole)."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise OutputError(str(path.parent), "another clustersim run is writing here; "
                                  "wait for it or choose another folder") from None
            time.sleep(0.05)
            continue
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            with suppress(FileNotFoundError):
                os.unlink(path)
            return None
        # the run that held it may have removed the file since we opened it: the lock counts
        # only on the file that is at the path now
        with suppress(FileNotFoundError):
            at_path, held = os.stat(path, follow_symlinks=False), os.fstat(fd)
            if (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino):
                return fd
        os.close(fd)
