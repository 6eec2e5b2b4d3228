"""Outputs written whole or not at all, never through a planted link, one run at a time per
folder: each on real files on disk."""

from __future__ import annotations

import json
import threading

import pytest

from clustersim import safe_write
from clustersim.safe_write import LOCK_NAME, atomic_file, atomic_write_text, folder_lock
from tests.helpers import run_cli, scenario, write_scenario


def test_a_file_is_replaced_whole_and_a_failed_write_leaves_the_old_one(tmp_path):
    path = tmp_path / "plan.json"
    atomic_write_text(path, '{"old": 1}\n')
    with pytest.raises(RuntimeError), atomic_file(path) as f:
        f.write('{"new": ')  # killed mid-write
        raise RuntimeError("killed")
    assert path.read_text() == '{"old": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no temporary left


def test_a_link_at_the_destination_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "summary.json"
    link.symlink_to("../victim.txt")
    atomic_write_text(link, "{}\n")
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == "{}\n"


def test_an_unwritable_destination_is_named_not_its_temporary(tmp_path):
    (tmp_path / "summary.json").mkdir()
    with pytest.raises(IsADirectoryError) as error:
        atomic_write_text(tmp_path / "summary.json", "{}")
    assert error.value.filename == str(tmp_path / "summary.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_simulate_and_its_report_never_write_through_planted_links(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = write_scenario(tmp_path, scenario())
    out, report = tmp_path / "out", tmp_path / "report"
    for folder, names in ((out, ("summary.json", "requests.csv", "steps.csv")),
                          (report, ("report.md", "report.html", "fig01-x.png"))):
        folder.mkdir()
        for name in names:
            (folder / name).symlink_to(victim)
    code, output = run_cli("simulate", str(path), "--out", str(out), "--report", str(report),
                           "--steps")
    assert code == 0, output
    assert victim.read_text() == "precious\n"
    assert json.loads((out / "summary.json").read_text())["num_requests"] >= 1
    assert not any(p.is_symlink() for p in (*out.iterdir(), *report.iterdir()))
    assert not any(p.name.endswith(".tmp") or p.name == LOCK_NAME
                   for p in (*out.iterdir(), *report.iterdir()))


def test_compare_refuses_a_linked_subfolder_before_the_work(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = write_scenario(tmp_path, scenario(layout={"kind": "colocated",
                                                     "pools": [{"name": "m", "instances": 2}]}))
    out = tmp_path / "out"
    out.mkdir()
    (out / "colocated").symlink_to(elsewhere)
    code, output = run_cli("compare", str(path), "--out", str(out))
    assert code == 2
    (line,) = output.splitlines()
    assert line.startswith(f"{out / 'colocated'}: is a symbolic link; "), line
    assert list(elsewhere.iterdir()) == [] and sorted(out.iterdir()) == [out / "colocated"]


def test_a_second_run_waits_for_the_first_to_finish_writing(tmp_path):
    path = write_scenario(tmp_path, scenario())
    out = tmp_path / "out"
    out.mkdir()
    held, release = threading.Event(), threading.Event()

    def first_run() -> None:
        with folder_lock(out):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=first_run)
    thread.start()
    held.wait(10)
    threading.Timer(0.3, release.set).start()
    code, output = run_cli("simulate", str(path), "--out", str(out))
    thread.join()
    assert code == 0, output
    assert (out / "summary.json").exists() and not (out / LOCK_NAME).exists()


def test_a_run_that_cannot_get_the_folder_is_one_line_and_leaves_it_as_it_was(
        tmp_path, monkeypatch):
    monkeypatch.setattr(safe_write, "LOCK_WAIT_S", 0.2)
    path = write_scenario(tmp_path, scenario())
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("the last run's\n")
    with folder_lock(out):
        code, output = run_cli("simulate", str(path), "--out", str(out))
        assert code == 2
        assert output.splitlines() == [f"{out}: another clustersim run is writing here; wait "
                                       "for it or choose another folder"]
        assert (out / "summary.json").read_text() == "the last run's\n"
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]  # the lock file gone
