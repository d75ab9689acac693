"""The recording store: round trip, crash safety under SIGKILL, and clear errors on bad input."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, numbered_frame, run_cli
from dreamcade.dataset import Control, ControlSpec, SpecError, StoreError, StoreWriter, open_store
from dreamcade.dataset.store import FORMAT_VERSION, frame_chunk
from dreamcade.dataset.outputs import OutputError


def write_store(path, spec, n=50, starts=(0, 17, 30), events=True, chunk=8):
    frames = np.stack([numbered_frame(t) for t in range(n)])
    rng = np.random.default_rng(0)
    actions = np.stack([rng.integers(0, 2, 3).astype(np.float32) for _ in range(n)])
    actions[:, 2] = rng.normal(0, 10, n).astype(np.float32)
    times = np.arange(n) / 30.0 + 100.0
    with StoreWriter(path, spec=spec, fps=30, frame_size=(16, 12), source={"kind": "test"},
                     capture_size=(160, 120), events=events, chunk_frames=chunk) as w:
        for t in range(n):
            if t in starts:
                w.begin_episode()
            w.append(frames[t], actions[t], times[t])
            if events:
                w.add_event(times[t] + 0.01, 0, float(t))
    return frames, actions, times


def test_round_trip_reads_every_field_back_exactly(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    frames, actions, times = write_store(path, small_spec)
    s = open_store(path, expect_spec=small_spec)
    assert len(s) == 50
    np.testing.assert_array_equal(s.read_frames(), frames)
    np.testing.assert_array_equal(s.read_actions(), actions)
    np.testing.assert_array_equal(s.time, times)
    np.testing.assert_array_equal(s.episode_starts, [0, 17, 30])
    assert [(e.start, e.stop) for e in s.episodes()] == [(0, 17), (17, 30), (30, 50)]
    ev = s.read_events()
    np.testing.assert_array_equal(ev["value"], np.arange(50, dtype=np.float32))
    np.testing.assert_array_equal(ev["control"], np.zeros(50, np.int32))
    np.testing.assert_allclose(ev["time"], times + 0.01)
    assert s.spec == small_spec
    assert s.fps == 30.0
    assert s.attrs["format_version"] == FORMAT_VERSION
    assert s.attrs["capture_size"] == [160, 120]
    assert s.attrs["frame_size"] == [16, 12]
    assert s.attrs["source"] == {"kind": "test"}
    assert s.attrs["software_version"] != ""
    assert s.closed_cleanly
    assert s.problems() == []
    assert s.verify() == []
    np.testing.assert_array_equal(s.read_frames(20, 23), frames[20:23])


def test_first_frame_starts_an_episode_without_being_told(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    write_store(path, small_spec, n=10, starts=(), events=False)
    s = open_store(path)
    np.testing.assert_array_equal(s.episode_starts, [0])
    assert not s.has_events


def test_reader_never_reads_past_the_committed_length(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    w = StoreWriter(path, spec=small_spec, fps=30, frame_size=(16, 12), source={}, chunk_frames=8,
                    flush_seconds=1e9)
    for t in range(20):  # two full chunks flushed (16 frames), 4 pending
        w.append(numbered_frame(t), np.zeros(3, np.float32), t)
    # the writer is abandoned without close: what a kill leaves
    s = open_store(path)
    assert len(s) == 16
    assert not s.closed_cleanly
    assert any("not closed cleanly" in p for p in s.problems())
    with pytest.raises(IndexError):
        s.read_frames(0, 17)


def test_frame_chunk_sizes_are_about_a_mebibyte():
    assert frame_chunk(64, 64) == 64
    assert frame_chunk(144, 256) == 8
    assert 8 <= frame_chunk(16, 16) <= 256


KILLED_WRITER = r"""
import sys, time
import numpy as np
sys.path.insert(0, {tests!r})
from conftest import numbered_frame
from dreamcade.dataset import Control, ControlSpec, StoreWriter
spec = ControlSpec((Control("a"), Control("b")))
w = StoreWriter({path!r}, spec=spec, fps=30, frame_size=(16, 12), source={{}}, chunk_frames=8,
                events=True, flush_seconds=0.0)
t = 0
while True:
    if t % 37 == 0:
        w.begin_episode()
    w.append(numbered_frame(t), np.array([t % 2, 1 - t % 2], np.float32), float(t))
    w.add_event(float(t), 0, 1.0)
    if t == 40:
        print("ready", flush=True)
    t += 1
"""


@pytest.mark.parametrize("run", range(5))
def test_sigkill_mid_recording_leaves_a_readable_store(tmp_path, run):
    path = tmp_path / "killed.zarr"
    code = KILLED_WRITER.format(tests=str(ROOT / "tests"), path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.05 + 0.13 * run)  # kill at a different point each run, appends in flight
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    s = open_store(path)
    n = len(s)
    assert n > 40
    frames, actions = s.read_frames(), s.read_actions()
    assert frames.shape[0] == actions.shape[0] == len(s.time) == n
    # no zero tail, and every frame is the one written at its index
    for t in range(n):
        np.testing.assert_array_equal(frames[t], numbered_frame(t))
    np.testing.assert_array_equal(actions[:, 0], np.arange(n) % 2)
    np.testing.assert_array_equal(s.episode_starts, np.arange(0, n, 37))
    assert len(s.read_events()["time"]) >= n - 1
    assert s.verify() == []
    assert not s.closed_cleanly


# -- bad input -----------------------------------------------------------------------------------

def test_missing_path_names_the_path(tmp_path):
    with pytest.raises(StoreError, match=r"nope\.zarr: no such store"):
        open_store(tmp_path / "nope.zarr")


def test_directory_that_is_not_a_store(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(StoreError, match=r"folder: not a store \(no zarr.json"):
        open_store(tmp_path / "folder")


def test_zarr_group_that_is_not_a_recording(tmp_path):
    import zarr
    zarr.open_group(str(tmp_path / "other.zarr"), mode="w")
    with pytest.raises(StoreError, match=r"other.zarr/zarr.json: not a dreamcade recording"):
        open_store(tmp_path / "other.zarr")


def test_future_format_version_is_refused(tmp_path, small_spec):
    path = tmp_path / "future.zarr"
    write_store(path, small_spec, n=10)
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["format_version"] = FORMAT_VERSION + 1
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match=r"future.zarr/zarr.json: format version 2 is newer .*upgrade"):
        open_store(path)


def test_different_control_spec_is_refused_with_both_named(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    write_store(path, small_spec, n=10)
    other = ControlSpec((Control("left"), Control("jump")))
    with pytest.raises(StoreError, match=r"s.zarr differs .*controls: \['left', 'right', 'mouse_dx'\] vs \['left', 'jump'\]"):
        open_store(path, expect_spec=other)


def test_corrupted_chunk_names_the_chunk_file(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    write_store(path, small_spec, n=50)
    chunk = path / "frames" / "c" / "2" / "0" / "0" / "0"
    assert chunk.is_file()
    chunk.write_bytes(b"\x00garbage" * 10)
    s = open_store(path)  # metadata is fine; the damage shows when the data is read
    np.testing.assert_array_equal(s.read_frames(0, 8)[3], numbered_frame(3))
    with pytest.raises(StoreError, match=r"frames/c/2/0/0/0: chunk cannot be decoded"):
        s.read_frames(10, 20)
    assert any("frames/c/2/0/0/0" in p for p in s.verify())


def test_broken_group_metadata_is_reported(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    write_store(path, small_spec, n=10)
    (path / "zarr.json").write_text("{not json")
    with pytest.raises(StoreError, match=r"s.zarr/zarr.json: cannot be read"):
        open_store(path)


def test_writer_refuses_to_clobber(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    write_store(path, small_spec, n=5)
    with pytest.raises(OutputError, match="already exists"):
        StoreWriter(path, spec=small_spec, fps=30, frame_size=(16, 12), source={})
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not a dreamcade store; refusing"):
        StoreWriter(tmp_path / "notes", spec=small_spec, fps=30, frame_size=(16, 12), source={},
                    overwrite=True)
    assert (tmp_path / "notes" / "a.txt").read_text() == "keep me"


def test_writer_rejects_wrong_frame_and_action_shapes(tmp_path, small_spec):
    with StoreWriter(tmp_path / "s.zarr", spec=small_spec, fps=30, frame_size=(16, 12), source={}) as w:
        with pytest.raises(StoreError, match=r"frame must be uint8 \[12, 16, 3\]"):
            w.append(np.zeros((16, 12, 3), np.uint8), np.zeros(3), 0.0)
        with pytest.raises(StoreError, match=r"action must have 3 values"):
            w.append(np.zeros((12, 16, 3), np.uint8), np.zeros(2), 0.0)


def test_spec_validation_and_toml(tmp_path):
    with pytest.raises(SpecError, match="unique"):
        ControlSpec((Control("a"), Control("a")))
    with pytest.raises(SpecError, match="exclusive spec holds binary"):
        ControlSpec((Control("a"), Control("x", "continuous")), exclusive=True)
    profile = tmp_path / "p.toml"
    profile.write_text('[[controls]]\nname = "jump"\nsource = "key:space"\n'
                       '[[controls]]\nname = "dx"\nkind = "continuous"\nsource = "mouse:dx"\nlow = -40\nhigh = 40\n')
    spec = ControlSpec.from_toml(profile)
    assert spec.names == ["jump", "dx"] and spec.controls[1].high == 40.0 and spec.name == "p"
    profile.write_text('[[controls]]\nname = "jump"\nkey = "space"\n')
    with pytest.raises(SpecError, match=r"p.toml: controls\[0\] has unknown keys \['key'\]"):
        ControlSpec.from_toml(profile)
    spec = ControlSpec((Control("a"), Control("b")), exclusive=True)
    spec.check_actions(np.eye(2, dtype=np.float32))
    with pytest.raises(SpecError, match="exactly one"):
        spec.check_actions(np.ones((2, 2), np.float32))


# -- dreamcade data info ---------------------------------------------------------------------------

def test_info_prints_what_the_store_holds(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    write_store(path, small_spec, n=50)
    out = run_cli("-m", "dreamcade", "data", "info", str(path), "--verify").stdout
    assert "frames    50  (1.7 s at 30 fps)" in out
    assert "size      16x12 (captured at 160x120)" in out
    assert "episodes  3  (13-20 frames each)" in out
    assert "left, right, mouse_dx[-50,50]" in out
    assert "bytes/frame" in out and "problem" not in out
    d = json.loads(run_cli("-m", "dreamcade", "data", "info", str(path), "--json").stdout)[0]
    assert d["frames"] == 50 and d["episodes"] == 3 and d["events"] == 50 and d["bytes_on_disk"] > 0


def test_info_reports_problems_and_errors_without_tracebacks(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    write_store(path, small_spec, n=50)
    (path / "actions" / "c" / "0" / "0").write_bytes(b"junk")
    proc = run_cli("-m", "dreamcade", "data", "info", str(path), "--verify", check=False)
    assert proc.returncode == 1
    assert "actions/c/0/0: chunk cannot be decoded" in proc.stdout
    proc = run_cli("-m", "dreamcade", "data", "info", str(tmp_path / "missing.zarr"), check=False)
    assert proc.returncode == 1
    assert "missing.zarr: no such store" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_info_shows_an_uncommitted_tail(tmp_path, small_spec):
    path = tmp_path / "s.zarr"
    w = StoreWriter(path, spec=small_spec, fps=30, frame_size=(16, 12), source={}, chunk_frames=8,
                    flush_seconds=1e9)
    for t in range(12):
        w.append(numbered_frame(t), np.zeros(3, np.float32), t)
    w.flush()
    # what a kill between growing the arrays and committing leaves behind
    w.root["frames"].resize((20, 12, 16, 3))
    w.root["actions"].resize((19, 3))
    out = run_cli("-m", "dreamcade", "data", "info", str(path)).stdout
    assert "frames    12" in out
    assert "uncommitted tail ignored: frames +8, actions +7" in out
    assert "array lengths differ" in out


def screen_store(path, spec, stats: dict | None):
    """23 frames at 15 fps in two episodes (starts 0 and 12), as `record screen` writes them: `left`
    on at frames 0-2, 6 and 10-14 (held across the episode start), `right` never, `mouse_dx` moved
    in 6 frames."""
    actions = np.zeros((23, 3), np.float32)
    actions[[0, 1, 2, 6, 10, 11, 12, 13, 14], 0] = 1
    actions[[3, 4, 5, 15, 16, 17], 2] = [4, -2, 1, 7, 3, -1]
    source = {"kind": "screen", "window": "SuperTux", "window_class": "supertux2", "region": [0, 0, 160, 120]}
    with StoreWriter(path, spec=spec, fps=15, frame_size=(16, 12), source=source, capture_size=(160, 120),
                     events=True, extra_attrs={"capture_stats": stats} if stats else None) as w:
        for t in range(23):
            if t == 12:
                w.begin_episode()
            w.append(numbered_frame(t), actions[t], t / 15 + (5.0 if t >= 12 else 0.0))


def test_info_shows_what_the_screen_recorder_measured_and_the_presses(tmp_path, small_spec, capsys):
    from dreamcade.dataset.__main__ import main

    path = tmp_path / "s.zarr"
    stats = {"frames": 23, "episodes": 2, "captured": 23, "dropped": 7, "recorded_seconds": 2.0, "achieved_fps": 11.5,
             "cpu_seconds": 0.5, "wall_seconds": 3.0, "cpu_fraction": 0.1667, "stop_reason": "Ctrl-C",
             "unrecorded_keys": {"space": 4, "f": 1}}
    screen_store(path, small_spec, stats)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "frames    23  (1.5 s at 15 fps)" in out
    assert "capture   11.5 fps of 15 asked, 7 of 30 frames dropped (23%), stopped: Ctrl-C" in out
    assert "presses   left 4, right 0" in out, "a press is a rise from 0 to 1 within an episode"
    assert "non-zero  mouse_dx 26% of frames" in out
    assert "unmapped  space 4, f 1 (presses of keys that no control records)" in out
    assert main(["info", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)[0]
    assert d["presses"] == {"left": 4, "right": 0} and d["nonzero_fraction"] == {"mouse_dx": 0.261}
    c = d["capture_stats"]
    assert (c["asked_fps"], c["achieved_fps"], c["dropped"], c["dropped_fraction"], c["stop_reason"]) == (
        15.0, 11.5, 7, 0.233, "Ctrl-C")
    assert c["unrecorded_keys"] == {"space": 4, "f": 1} and c["cpu_fraction"] == 0.1667
    # a recording without the stats (an env recording, or one from before they were stored): presses only
    screen_store(tmp_path / "old.zarr", small_spec, None)
    assert main(["info", str(tmp_path / "old.zarr")]) == 0
    out = capsys.readouterr().out
    assert "presses   left 4, right 0" in out and "capture " not in out and "unmapped" not in out
    assert main(["info", str(tmp_path / "old.zarr"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["capture_stats"] is None
