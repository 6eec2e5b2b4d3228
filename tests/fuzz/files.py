"""The file-level mutator: cases whose hazard is the file itself rather than its bytes.

Every path clustersim reads (a scenario, a trace read by ``trace stats`` or replayed, a
topology, a GPU profile, a HuggingFace ``config.json``, request records) is drawn as

- a **special file**: a pipe that nothing writes to, a socket, a character device (made with
  ``mknod`` where the fuzzer may, else a link to ``/dev/zero`` or ``/dev/null``);
- a **link**: to a folder (beside the case or in it), dangling, a loop of one or two links,
  to a device or a pipe, or to a good file outside the case folder (or a chain of two links
  ending there: read like the file, exit 0);
- a **size extreme**: empty, a folder, one byte past the 16 MiB limit of YAML and JSON files
  (real bytes: a comment or whitespace after a good file), or a good head followed by a
  sparse hole to 256 MiB or to one byte past 1 GiB (a trace's limit: read in pieces, a trace
  is refused by what it reads; any other file by its size, before it is read);

and every output folder is drawn with **planted hazards** under the names the command writes
(``summary.json``, ``plan.json``, ``report.md``, ``colocated/``, its lock file, calibrate's
profile): a link to a file, a folder or a missing name outside the case folder (relative or
absolute), a link loop, a pipe, a socket, a device, a folder where a file goes, a file where a
folder goes. The runner checks after each case that nothing beside the case folder changed:
a command that wrote through a link is a failure even when it exits 0.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import stat
import threading
from pathlib import Path

from hypothesis import strategies as st

from clustersim.inputs import MAX_CONFIG_BYTES, MAX_TRACE_BYTES
from tests.fuzz.strategies import (
    HF_CONFIG,
    TINY,
    Case,
    base_profile,
    dump_yaml,
    shipped_topologies,
)

SOURCE = "files"
OUTSIDE = "outside"
"""The folder beside the case folder (``../outside``) that links point into: it holds
``victim.txt`` and ``dir/victim.txt`` (:data:`OUTSIDE_FILES`) and the good files that some
links lead to; no command may change it."""
OUTSIDE_FILES = ((f"../{OUTSIDE}/victim.txt", b"precious\n"),
                 (f"../{OUTSIDE}/dir/victim.txt", b"precious too\n"))
_ABSOLUTE = "{outside}"
"""In a link's target: the absolute path of the outside folder (known when the case is made)."""

TRACE = b"arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,3\n1.5,50,30\n2.5,80,12\n"
RECORDS = b"".join(json.dumps({"input_toks": 100, "output_toks": 11, "queued_ts": t,
                               "first_token_ts": t + 0.05, "last_token_ts": t + 1.0}).encode()
                   + b"\n" for t in (0.0, 2.0))
CALIBRATE = ("calibrate", "--gpu", "h100-sxm", "--model", "qwen2.5-7b-instruct")

# ------------------------------------------------------------------- specials


def make_special(root: Path, outside: Path, name: str, kind: str, argument: str) -> None:
    """Make special file ``name`` in the case folder ``root`` (``outside``: the folder beside
    it). ``kind`` and ``argument``: ``fifo``; ``socket``; ``device`` ``zero``/``null`` (a
    character device, or a link to /dev/zero or /dev/null where ``mknod`` is refused);
    ``link`` and its target (``{outside}`` stands for the outside folder's absolute path);
    ``pad`` and a size (the file already written, grown to that many bytes with what keeps it
    valid: a YAML comment, JSON whitespace, blank trace lines); ``sparse`` and a size (the
    file grown with a hole)."""
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        _socket_file(path)
    elif kind == "device":
        numbers = {"zero": (1, 5), "null": (1, 3)}[argument]
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
        except (OSError, AttributeError):  # not root, or no mknod: its stand-in
            path.symlink_to(f"/dev/{argument}")
    elif kind == "link":
        path.symlink_to(argument.replace(_ABSOLUTE, str(outside.resolve())))
    elif kind in ("pad", "sparse"):
        size = int(argument)
        with path.open("r+b") as f:
            f.seek(0, os.SEEK_END)
            if kind == "sparse":
                f.truncate(size)
            else:
                filler = {".yaml": b"#", ".json": b" "}.get(path.suffix, b"\n")
                f.write(b"\n" + filler * (size - f.tell() - 1))
    else:
        raise ValueError(f"unknown special file kind {kind!r}")


_CHDIR = threading.Lock()
"""Held while a socket is bound from its folder: the campaign makes cases on threads, and the
working folder is the process's."""


def _socket_file(path: Path) -> None:
    """A Unix socket's file at ``path`` (bound, then closed: nothing listens on it). A socket
    path is limited to about 100 bytes, so a longer one is bound from its folder."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        if len(os.fsencode(path)) < 100:
            s.bind(str(path))
            return
        with _CHDIR:
            here = os.getcwd()
            os.chdir(path.parent)
            try:
                s.bind(path.name)
            finally:
                os.chdir(here)


# ------------------------------------------------------------------- inputs
def _scenario(**change: object) -> bytes:
    doc = copy.deepcopy(TINY)
    doc.update(change)
    return dump_yaml(doc)


def _topology() -> bytes:
    return dict(shipped_topologies())["dgx-h100"].encode()


INPUTS: dict[str, tuple[str, int]] = {
    # role: (the path the hazard is on, its size limit)
    "scenario": ("s.yaml", MAX_CONFIG_BYTES),
    "trace stats": ("t.csv", MAX_TRACE_BYTES),
    "replayed trace": ("t.csv", MAX_TRACE_BYTES),
    "topology": ("topo.yaml", MAX_CONFIG_BYTES),
    "GPU profile": ("prof.yaml", MAX_CONFIG_BYTES),
    "config.json": ("cfg/config.json", MAX_CONFIG_BYTES),
    "records": ("r.jsonl", MAX_TRACE_BYTES),
}


def _input_role(role: str, command: str) -> tuple[tuple[str, ...], dict[str, bytes], bytes]:
    """(argv, the other files, the good content of the role's file) of one input role."""
    simulate = ("simulate", "s.yaml", "--out", "out")
    if command == "plan":
        simulate = ("plan", "s.yaml", "--executor", "serial", "--no-report", "--out", "out")
    plan = {"slo": {"ttft_s": 1.0}, "plan": {
        "gpu_budget": 1, "layouts": ["colocated"],
        "search": {"seeds": 1, "min_requests": 5, "min_duration_s": 0, "simulate_top": 1,
                   "max_probes": 4, "neighbours": False}}} if command == "plan" else {}
    if role == "scenario":
        return simulate, {}, _scenario(**plan)
    if role == "trace stats":
        return ("trace", "stats", "t.csv"), {}, TRACE
    if role == "replayed trace":
        workload = {"kind": "replay", "trace": "t.csv", "max_num_requests": 30}
        return simulate, {"s.yaml": _scenario(workload=workload, **plan)}, TRACE
    if role == "topology":
        return simulate, {"s.yaml": _scenario(topology="topo.yaml", **plan)}, _topology()
    if role == "GPU profile":
        return (simulate, {"s.yaml": _scenario(gpu="h100-sxm@prof.yaml", **plan)},
                base_profile().encode())
    if role == "config.json":
        return (simulate, {"s.yaml": _scenario(model="cfg", **plan)},
                json.dumps(HF_CONFIG, indent=1).encode())
    return (*CALIBRATE, "--from-requests", "r.jsonl", "--out", "p.yaml"), {}, RECORDS


INPUT_HAZARDS = [
    "fifo", "socket", "device zero", "device null", "link /dev/zero", "link /dev/null",
    "link to a pipe", "link to a folder outside", "link to a folder inside", "dangling link",
    "dangling link outside", "link to itself", "two links in a loop", "link to a file outside",
    "two links to a file outside", "empty", "folder", "one byte past the limit",
    "sparse 256 MiB", "sparse past 1 GiB",
]


def _up(name: str) -> str:
    """From the folder ``name`` is in back to the folder the case runs in."""
    return "../" * name.count("/")


def _input_hazard(path: str, good: bytes, limit: int, hazard: str
                  ) -> tuple[dict[str, bytes], list[tuple[str, str, str]]]:
    """The files and specials that put ``hazard`` at ``path`` (whose good bytes are
    ``good`` and whose size limit is ``limit``)."""
    up = _up(path)
    base = path.rsplit("/", 1)[-1]
    outside_copy = f"../{OUTSIDE}/{base}"
    table: dict[str, tuple[dict[str, bytes], list[tuple[str, str, str]]]] = {
        "fifo": ({}, [(path, "fifo", "")]),
        "socket": ({}, [(path, "socket", "")]),
        "device zero": ({}, [(path, "device", "zero")]),
        "device null": ({}, [(path, "device", "null")]),
        "link /dev/zero": ({}, [(path, "link", "/dev/zero")]),
        "link /dev/null": ({}, [(path, "link", "/dev/null")]),
        "link to a pipe": ({}, [(path + ".pipe", "fifo", ""),
                                (path, "link", base + ".pipe")]),
        "link to a folder outside": ({}, [(path, "link", f"{up}../{OUTSIDE}/dir")]),
        "link to a folder inside": ({"sub/": b"", "sub/x.yaml": good},
                                    [(path, "link", f"{up}sub")]),
        "dangling link": ({}, [(path, "link", "missing-" + base)]),
        "dangling link outside": ({}, [(path, "link", f"{_ABSOLUTE}/missing-{base}")]),
        "link to itself": ({}, [(path, "link", base)]),
        "two links in a loop": ({}, [(path + ".b", "link", base), (path, "link", base + ".b")]),
        "link to a file outside": ({outside_copy: good},
                                   [(path, "link", f"{up}{outside_copy}")]),
        "two links to a file outside": ({outside_copy: good},
                                        [(path + ".1", "link", f"{_ABSOLUTE}/{base}"),
                                         (path, "link", base + ".1")]),
        "empty": ({path: b""}, []),
        "folder": ({path + "/": b""}, []),
        "one byte past the limit": ({path: good}, [(path, "pad", str(limit + 1))]),
        "sparse 256 MiB": ({path: good}, [(path, "sparse", str(256 << 20))]),
        "sparse past 1 GiB": ({path: good}, [(path, "sparse", str(MAX_TRACE_BYTES + 1))]),
    }
    return table[hazard]


MODEL_FOLDER_HAZARDS = ["fifo", "device zero", "link to itself", "dangling link",
                       "link to a good folder outside", "no config.json",
                       "link to a folder outside"]
"""Hazards on the model's folder ``cfg`` itself (a scenario's ``model: cfg``)."""


@st.composite
def input_cases(draw: st.DrawFn) -> Case:
    role = draw(st.sampled_from(list(INPUTS)))
    path, limit = INPUTS[role]
    command = draw(st.sampled_from(["simulate"] * 4 + ["plan"]))
    argv, files, good = _input_role(role, command)
    if role == "config.json" and draw(st.sampled_from([True, False, False, False])):
        hazard = draw(st.sampled_from(MODEL_FOLDER_HAZARDS))
        if hazard == "no config.json":
            more, specials = {"cfg/": b"", "cfg/other.json": good}, []
        elif hazard == "link to a good folder outside":  # read through the link: exit 0
            more = {f"../{OUTSIDE}/cfg/": b"", f"../{OUTSIDE}/cfg/config.json": good}
            specials = [("cfg", "link", f"../{OUTSIDE}/cfg")]
        else:
            more, specials = _input_hazard("cfg", good, limit, hazard)
    else:
        hazard = draw(st.sampled_from(INPUT_HAZARDS))
        if hazard == "one byte past the limit" and limit > MAX_CONFIG_BYTES:
            hazard = "sparse past 1 GiB"  # a GiB of real bytes takes seconds to write
        more, specials = _input_hazard(path, good, limit, hazard)
    return Case(SOURCE, argv, tuple({**files, **more}.items()), tuple(specials))


# ------------------------------------------------------------------- outputs
OUTPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # how the command is run: (argv, the names it writes, with a / for a folder)
    "simulate": (("simulate", "s.yaml", "--out", "out", "--report", "rep", "--steps"),
                 ("out/summary.json", "out/requests.csv", "out/steps.csv",
                  "out/transfers.csv", "out/.clustersim.lock", "rep/report.md",
                  "rep/report.html", "rep/fig01-latency-cdf.png", "rep/.clustersim.lock")),
    "compare": (("compare", "s.yaml", "--out", "out"),
                ("out/colocated/", "out/disaggregated/", "out/colocated/summary.json",
                 "out/disaggregated/transfers.csv", "out/.clustersim.lock")),
    "plan": (("plan", "s.yaml", "--executor", "serial", "--no-report", "--out", "out"),
             ("out/plan.json", "out/ledger.csv", "out/.clustersim.lock")),
    "calibrate": ((*CALIBRATE, "--prefill", "2048=0.12", "--decode", "1@1024=0.008", "--out",
                   "p.yaml"), ("p.yaml",)),
}
OUTPUT_HAZARDS = [
    "link to a file outside", "absolute link to a file outside", "link to a folder outside",
    "dangling link outside", "link to itself", "fifo", "socket", "device null", "folder",
    "file",
]


def _output_hazard(name: str, hazard: str) -> tuple[dict[str, bytes], list[tuple[str, str, str]]]:
    path = name.rstrip("/")
    up = _up(path)
    if hazard == "folder":
        return {path + "/": b"", path + "/keep.txt": b"kept\n"}, []
    if hazard == "file":
        return {path: b"not a folder\n"}, []
    kinds = {
        "link to a file outside": ("link", f"{up}../{OUTSIDE}/victim.txt"),
        "absolute link to a file outside": ("link", f"{_ABSOLUTE}/victim.txt"),
        "link to a folder outside": ("link", f"{up}../{OUTSIDE}/dir"),
        "dangling link outside": ("link", f"{_ABSOLUTE}/created-through-a-link"),
        "link to itself": ("link", path.rsplit("/", 1)[-1]),
        "fifo": ("fifo", ""), "socket": ("socket", ""), "device null": ("device", "null"),
    }
    kind, argument = kinds[hazard]
    return {}, [(path, kind, argument)]


@st.composite
def output_cases(draw: st.DrawFn) -> Case:
    command = draw(st.sampled_from(list(OUTPUTS)))
    argv, names = OUTPUTS[command]
    files: dict[str, bytes] = {}
    if command in ("simulate", "compare", "plan"):
        change: dict[str, object] = {}
        if command == "compare":
            change["layout"] = {"kind": "colocated", "pools": [{"name": "m", "instances": 2}]}
            change["topology"] = "dgx-h100"  # the split's KV handoff runs over its links
        if command == "plan":
            _, _, files["s.yaml"] = _input_role("scenario", "plan")
        else:
            files["s.yaml"] = _scenario(**change)
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    specials: list[tuple[str, str, str]] = []
    for name in chosen:
        more, made = _output_hazard(name, draw(st.sampled_from(OUTPUT_HAZARDS)))
        if any(other.startswith(name.rstrip("/") + "/") for other in chosen if other != name):
            continue  # a folder that holds another chosen name: that one's hazard is made
        folder = name.rstrip("/").rsplit("/", 1)[0] if "/" in name.rstrip("/") else ""
        if folder:
            files.setdefault(folder + "/", b"")
        files.update(more)
        specials += made
    return Case(SOURCE, argv, tuple(files.items()), tuple(specials))


@st.composite
def file_cases(draw: st.DrawFn) -> Case:
    """A case whose input path is a special file, a link or a size extreme (three in five), or
    whose output folder holds planted hazards (two in five)."""
    # (sampled_from draws evenly; integers() favours small values)
    return draw(draw(st.sampled_from([input_cases()] * 3 + [output_cases()] * 2)))
