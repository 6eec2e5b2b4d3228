"""Reading the files a user hands clustersim: bytes in, checked text, YAML or JSON out.

Every file the tool reads on a user's behalf (a scenario, a topology, a GPU profile, a
HuggingFace ``config.json``, a trace, request records) comes through here, so that each way a
file can be wrong is one ``path: message`` (or ``path:line: message``) :class:`InputError`:
a folder, a device, a socket or a pipe that nothing writes to where a file should be, an
unreadable or empty file, one larger than the reader should hold in memory, a truncated or
corrupt ``.gz``, bytes that are not UTF-8, and YAML with a key given twice, nesting too deep
for the parsers, more values than the parser gets through in seconds, or aliases that expand
without bound.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.nodes import MappingNode, Node, SequenceNode

from clustersim.errors import InputError

MIB = 1 << 20
MAX_CONFIG_BYTES = 16 * MIB
"""Largest scenario, topology, profile or config.json file: PyYAML's pure-Python parser takes
about a minute for that much; list long request sets in a trace file instead."""
MAX_TRACE_BYTES = 1024 * MIB
"""Largest trace or request-records file, after decompression (Azure's 2023 traces are 1-2 MB;
a week of the 2024 ones is about 1 GB). A trace is read in chunks (:func:`read_chunks`), so
its memory is bounded by the request limit rather than by this; request records are read
whole."""
CHUNK_BYTES = MIB
"""Bytes :func:`read_chunks` reads at a time: a trace reader's memory beyond the requests it
keeps is a few times this (benchmarks/trace_memory.py: 1 MiB held less than 4 or 16, and read
as fast)."""
MAX_NESTING_DEPTH = 64
"""Deepest nesting of YAML or JSON values; no schema clustersim reads goes past 8 levels, and
Python's parsers recurse once per level."""
MAX_YAML_NODES = 1_000_000
"""Most values a YAML document may hold, as written and once its aliases are expanded (an
alias is a copy of its anchor's value each time it is used, so ten nested aliases of ten make
10^10): PyYAML's pure-Python parser takes about half a minute and a gigabyte per million."""

_MERGE_TAG = "tag:yaml.org,2002:merge"


# ------------------------------------------------------------------ bytes
_NOT_FILES = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
              stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def read_bytes(path: Path | str, what: str, *, max_bytes: int = MAX_CONFIG_BYTES,
               where: str | None = None) -> bytes:
    """The bytes of ``path`` (decompressed if it ends in ``.gz``), at most ``max_bytes``.

    ``what`` names the file in messages ("scenario", "trace"); ``where`` is the path they
    carry (default the path as given). An empty file is an error: nothing clustersim reads
    can be empty. Only a regular file (or a link to one) is read, or a pipe that something
    writes to (``<(zcat t.gz)``); a device, a socket or a pipe with no writer is refused
    before it is read, as reading it would never end.
    """
    path = Path(path)
    where = where or str(path)
    too_large = InputError(where, f"{what} file larger than {max_bytes // MIB:,} MiB; "
                           "clustersim reads it whole into memory")
    gz = path.suffix == ".gz"
    try:
        data = _read_file(path, what, where, max_bytes + 1,
                          None if gz else too_large)
    except OSError as error:
        raise InputError(where, f"cannot read {what}: {error.strerror or error}") from None
    except ValueError as error:  # a NUL byte in the path
        raise InputError(where, f"cannot read {what}: {error}") from None
    if gz:
        data = _gunzip(data, where, max_bytes)
    if len(data) > max_bytes:
        raise too_large
    if not data.strip():
        raise InputError(f"{where}:1", "empty file")
    return data


def _read_file(path: Path, what: str, where: str, limit: int,
               too_large: InputError | None) -> bytes:
    """At most ``limit`` bytes of ``path``, once it is known that reading it ends;
    ``too_large`` is raised before anything is read when the file says it holds ``limit``
    bytes or more (a sparse 1 GiB file is refused at once, not after a GiB of reading)."""
    with _open_checked(path, what, where) as (f, size):
        if too_large is not None and size >= limit:
            raise too_large
        return _read_up_to(f, limit, size)


@contextmanager
def _open_checked(path: Path, what: str,
                  where: str) -> Iterator[tuple[io.BufferedIOBase, int]]:
    """``path`` open for reading, and its size (0 for a pipe), once it is known that reading
    it ends.

    Opening a pipe waits until something writes to it, and a device such as ``/dev/zero``
    never ends: so the kind of file is checked before it is opened, the open never waits
    (``O_NONBLOCK``), and the kind is checked again on what was opened, in case the path
    changed in between. A pipe is read only if it has a writer: a non-blocking read of one
    without returns end of file at once, of one with a writer data or "try again".
    """
    _check_kind(os.stat(path).st_mode, what, where)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        _check_kind(info.st_mode, what, where)
        if not stat.S_ISFIFO(info.st_mode):
            yield f, info.st_size
            return
        try:
            head = os.read(fd, io.DEFAULT_BUFFER_SIZE)
        except BlockingIOError:
            head = b""  # a writer, with nothing written yet
        else:
            if not head:
                raise InputError(where, f"is a pipe that nothing writes to, not a {what} file")
        os.set_blocking(fd, True)
        yield io.BufferedReader(_Prefixed(head, f)), 0


class _Prefixed(io.RawIOBase):
    """``head``, then the rest of ``rest``: a pipe after the bytes its first read took."""

    def __init__(self, head: bytes, rest: io.BufferedIOBase) -> None:
        super().__init__()
        self._head, self._rest = memoryview(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._head:
            return self._rest.readinto(buffer)
        n = min(len(buffer), len(self._head))
        buffer[:n] = self._head[:n]
        self._head = self._head[n:]
        return n


def read_chunks(path: Path | str, what: str, *, max_bytes: int = MAX_TRACE_BYTES,
                where: str | None = None, chunk_bytes: int | None = None) -> Iterator[bytes]:
    """The bytes of ``path`` (decompressed if it ends in ``.gz``) in pieces of up to
    ``chunk_bytes`` (default :data:`CHUNK_BYTES`), at most ``max_bytes`` in all: what
    :func:`read_bytes` reads, with its checks (a device, a socket or a pipe without a writer
    is refused before it is read), for a reader that holds one piece at a time. The pieces
    split lines anywhere; an empty file yields nothing."""
    path = Path(path)
    where = where or str(path)
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    total = 0
    try:
        with _open_checked(path, what, where) as (f, _):
            stream: io.BufferedIOBase = gzip.GzipFile(fileobj=f) if path.suffix == ".gz" else f
            while block := stream.read(chunk_bytes):
                total += len(block)
                if total > max_bytes:
                    raise InputError(where, f"{what} file larger than {max_bytes // MIB:,} MiB, "
                                     "the most clustersim reads")
                yield block
    except EOFError:
        raise InputError(where, "truncated gzip file: it ends before its last block") from None
    except (gzip.BadGzipFile, zlib.error) as error:
        raise InputError(where, f"corrupt gzip file: {error}") from None
    except OSError as error:
        raise InputError(where, f"cannot read {what}: {error.strerror or error}") from None
    except ValueError as error:  # a NUL byte in the path
        raise InputError(where, f"cannot read {what}: {error}") from None


def _read_up_to(f: io.BufferedIOBase, limit: int, size: int) -> bytes:
    """At most ``limit`` bytes from ``f``, whose size is said to be ``size``: read at once
    (a read of ``limit`` bytes would reserve that much memory, 1 GiB for a trace), then in
    chunks if there is more (a file that grew, a pipe, a file that reports no size)."""
    data = f.read(min(limit, size + 1))
    if len(data) <= size or len(data) == limit:
        return data
    chunks = [data]
    total = len(data)
    while total < limit:
        chunk = f.read(min(limit - total, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _check_kind(mode: int, what: str, where: str) -> None:
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        kind = _NOT_FILES.get(stat.S_IFMT(mode), "not a regular file")
        raise InputError(where, f"is {kind}, not a {what} file")


def _gunzip(data: bytes, where: str, max_bytes: int) -> bytes:
    size = int.from_bytes(data[-4:], "little")  # the last member's size, modulo 2^32
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            return _read_up_to(f, max_bytes + 1, size)
    except EOFError:
        raise InputError(where, "truncated gzip file: it ends before its last block") from None
    except (gzip.BadGzipFile, zlib.error) as error:
        raise InputError(where, f"corrupt gzip file: {error}") from None


def decode_text(data: bytes, where: str, *, first_line: int = 1) -> str:
    """UTF-8 ``data`` as text (a byte-order mark is dropped); bad bytes are located by line,
    counted from ``first_line`` (that of ``data``'s first byte, for a piece of a file)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        start = error.start
        line = data.count(b"\n", 0, start) + first_line
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise InputError(f"{where}:{line}", f"not UTF-8 text: byte 0x{data[start]:02x} at "
                         f"column {column} ({error.reason})") from None


def read_text(path: Path | str, what: str, *, max_bytes: int = MAX_CONFIG_BYTES,
              where: str | None = None) -> str:
    """:func:`read_bytes` then :func:`decode_text`."""
    where = where or str(path)
    return decode_text(read_bytes(path, what, max_bytes=max_bytes, where=where), where)


# ------------------------------------------------------------------- YAML
class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses duplicate keys, deep nesting and alias bombs."""

    def __init__(self, stream: str, where: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._num_nodes = 0
        self._where = where

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._num_nodes += 1  # (what _check_size counts where libyaml is missing)
        if self._num_nodes > MAX_YAML_NODES:
            line = self.peek_event().start_mark.line + 1
            raise InputError(f"{self._where}:{line}", _too_many_values(None))
        self._depth += 1
        try:
            if self._depth > MAX_NESTING_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_NESTING_DEPTH} "
                                    "levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # `<<: *base` merges keys that the mapping may override
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first_line
                except TypeError:
                    continue  # an unhashable key: PyYAML's own error says so
                if seen:
                    raise InputError(f"{self._where}:{key_node.start_mark.line + 1}",
                                     f"duplicate key {key!r} (first on line {first_line[key]})")
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root: Node) -> None:
    """Refuse documents whose aliases refer to themselves, nest too deep or expand to more
    than :data:`MAX_YAML_NODES` values (each node is measured once, so this is linear)."""
    sizes: dict[int, tuple[int, int]] = {}
    active: set[int] = set()

    def measure(node: Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ComposerError(None, None, "an alias refers to the value that contains it",
                                node.start_mark)
        active.add(key)
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        count, depth = 1, 1
        for child in children:
            child_count, child_depth = measure(child)
            count += child_count
            depth = max(depth, child_depth + 1)
        active.discard(key)
        if count > MAX_YAML_NODES:
            raise ComposerError(None, None, f"its aliases expand to more than "
                                f"{MAX_YAML_NODES:,} values", node.start_mark)
        if depth > MAX_NESTING_DEPTH:
            raise ComposerError(None, None, f"its aliases nest values deeper than "
                                f"{MAX_NESTING_DEPTH} levels", node.start_mark)
        sizes[key] = (count, depth)
        return count, depth

    # the walk recurses once per level, and the composer has already bounded that
    measure(root)


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Open:
    """A mapping or sequence that :func:`_check_size` is inside: how many of its values it
    has passed, and the last key (the name of a mapping's value)."""

    __slots__ = ("is_mapping", "key", "num_done")

    def __init__(self, is_mapping: bool) -> None:
        self.is_mapping, self.num_done, self.key = is_mapping, 0, "?"

    def place(self) -> str:
        return f".{self.key}" if self.is_mapping else f"[{self.num_done}]"


def _too_many_values(place: str | None) -> str:
    passed = f"; {place} passes it" if place else ""
    return (f"more than {MAX_YAML_NODES:,} values, the most a YAML file may hold (PyYAML's "
            f"parser takes about half a minute per million){passed}: list long request sets "
            "in a trace file (workload kind: replay)")


def _check_size(text: str, where: str) -> None:
    """Refuse a document of more than :data:`MAX_YAML_NODES` values (as written) before
    PyYAML's pure-Python parser spends minutes and gigabytes on it: libyaml's parse events are
    counted instead, a second or two for the largest file read. The message names the place
    where the limit is passed (``workload.requests[111110]``). Where libyaml is missing the
    composer counts (:class:`_Loader`); YAML that libyaml cannot parse is left to the parser
    that follows, which says what is wrong in its words."""
    if _FAST_LOADER is yaml.SafeLoader:
        return
    num_values = 0
    inside: list[_Open] = []
    try:
        for event in yaml.parse(text, Loader=_FAST_LOADER):
            ended = isinstance(event, yaml.ScalarEvent | yaml.AliasEvent)
            if isinstance(event, yaml.CollectionEndEvent):
                inside.pop()
                ended = True
            elif isinstance(event, yaml.NodeEvent):
                num_values += 1
                parent = inside[-1] if inside else None
                if (parent is not None and parent.is_mapping and parent.num_done % 2 == 0
                        and isinstance(event, yaml.ScalarEvent)):
                    parent.key = event.value
                if num_values > MAX_YAML_NODES:
                    place = "".join(level.place() for level in inside).lstrip(".")
                    raise InputError(f"{where}:{event.start_mark.line + 1}",
                                     _too_many_values(place or "the document"))
                if isinstance(event, yaml.CollectionStartEvent):
                    inside.append(_Open(isinstance(event, yaml.MappingStartEvent)))
            if ended and inside:  # a value of the collection it is in is done
                inside[-1].num_done += 1
    except yaml.YAMLError:
        return


CACHE_MIN_CHARS = 64 * 1024
"""Shipped YAML at least this long is cached as JSON (the calibrated profiles, 0.6 MB: 1.2 s
of CPU for PyYAML to build, 0.015 s for ``json`` to read back)."""


def shipped_yaml_cache() -> Path | None:
    """Where parsed shipped YAML is cached: ``$CLUSTERSIM_CACHE_DIR``, else the user's cache
    folder (``$XDG_CACHE_HOME`` or ``~/.cache``) under ``clustersim/shipped-yaml``; None when
    ``CLUSTERSIM_CACHE_DIR`` is ``off``."""
    given = os.environ.get("CLUSTERSIM_CACHE_DIR")
    if given == "off":
        return None
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "clustersim" / "shipped-yaml"


def parse_shipped_yaml(text: str) -> Any:
    """A YAML file shipped with the package (the catalog, the shipped topologies), parsed by
    libyaml where PyYAML has it: about eight times faster than the pure Python parser, and
    every process reads the catalog. The files are ours, so :func:`parse_yaml`'s guards
    against hostile input are not needed.

    A long file's parse is kept as JSON in :func:`shipped_yaml_cache`, named by the SHA-256
    of the text (an edited file is a new name, never a stale read), and only where JSON gives
    back exactly what YAML built; a cache that cannot be read or written is passed over."""
    folder = shipped_yaml_cache() if len(text) >= CACHE_MIN_CHARS else None
    cached = None
    if folder is not None:
        cached = folder / f"{hashlib.sha256(text.encode('utf-8')).hexdigest()}.json"
        try:
            return json.loads(cached.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    data = yaml.load(text, Loader=_FAST_LOADER)  # noqa: S506 (a safe loader)
    if cached is not None:
        _write_cache(cached, data)
    return data


def _write_cache(path: Path, data: Any) -> None:
    dumped = json.dumps(data, separators=(",", ":"))
    if json.loads(dumped) != data:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(dumped)
        os.replace(tmp, path)
    except OSError:
        return


def parse_yaml(text: str, where: str) -> Any:
    """The one YAML document in ``text``; errors located as ``where:line``."""
    _check_size(text, where)
    loader = None
    try:
        loader = _Loader(text, where)
        return loader.get_single_data()
    except yaml.reader.ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        raise InputError(f"{where}:{line}", f"invalid YAML: character U+{error.character:04X} "
                         "is not allowed in YAML text") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark is not None else where
        problem = getattr(error, "problem", None) or str(error)
        context = getattr(error, "context", None)
        if context and problem.startswith("but "):
            problem = f"{context}, {problem}"
        raise InputError(at, f"invalid YAML: {' '.join(problem.split())}") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: Path | str, what: str, *, where: str | None = None) -> Any:
    """Read, decode and parse a user's YAML file."""
    where = where or str(path)
    return parse_yaml(read_text(path, what, where=where), where)


# ------------------------------------------------------------------- JSON
def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_json(text: str, where: str, *, line: int | None = None) -> Any:
    """One JSON value; ``line`` is the file line of a JSON-lines record (errors say it)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        at = f"{where}:{line if line is not None else error.lineno}"
        raise InputError(at, f"invalid JSON: {error.msg}") from None
    except ValueError as error:
        raise InputError(where if line is None else f"{where}:{line}",
                         f"invalid JSON: {error}") from None
    except RecursionError:
        raise InputError(where if line is None else f"{where}:{line}",
                         "invalid JSON: nested too deep") from None
