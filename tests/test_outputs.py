"""Nothing lost, round two: every writer goes through dataset.outputs, and each case a hostile
user found (numbered as they reported them) ends in the documented exit status, one line on
stderr naming the file or key, and every input and earlier output byte for byte as it was.

Commands run in this process through their `main(argv)` (capsys reads what they print), except
where a second process is the point: a kill, a Ctrl-C, two writers at once.
"""

import json
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from dreamcade.dataset import open_store
from dreamcade.dataset.outputs import Output, OutputError
from test_nothing_lost import frame_chunk_file, tree_hash, write_store

SMALL = ["--horizon", "12", "--episodes", "1", "--idm-steps", "10", "--windows", "16", "--bank", "100",
         "--threads", "1", "--quiet"]
TRAIN = ["train.steps=4", "train.batch_size=4", "train.threads=1", "train.eval_every=0", "train.sample_every=0",
         "--quiet"]


# -- running a command as a user would --------------------------------------------------------------------

def call(command: str, *argv: str) -> int:
    """`command` (dataset, record, export, eval, play, train, distill, demo) run in this process."""
    if command == "dataset":
        from dreamcade.dataset.__main__ import main
    elif command == "record":
        from dreamcade.record.__main__ import main
    elif command == "export":
        from dreamcade.export import main
    elif command == "eval":
        from dreamcade.eval.__main__ import main
    elif command == "play":
        from dreamcade.play.__main__ import main
    elif command == "train":
        from dreamcade.train import main
    elif command == "distill":
        from dreamcade.distill import main
    else:
        from dreamcade.demo import main
    try:
        return main(list(argv))
    except SystemExit as e:  # argparse
        return e.code


def one_line(capsys, rc: int, code: int = 2, *names) -> str:
    """The documented refusal: exit `code`, no traceback, one `error: ...` line (the last on
    stderr; a command may have said what it was starting before) naming each of `names`."""
    err = capsys.readouterr().err.strip()
    assert rc == code, f"exit {rc}: {err}"
    errors = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and err.splitlines()[-1] == errors[0] and "Traceback" not in err, err
    for name in names:
        assert str(name) in errors[0], f"{name!r} not in {errors[0]!r}"
    return errors[0]


def wait_for(check, seconds: float = 60.0, what: str = "") -> None:
    end = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)


def frames_in(store: Path) -> int:
    """Committed frames of a store being written (0 while it cannot be opened yet)."""
    from dreamcade.dataset import StoreError

    try:
        return open_store(store).n_frames
    except StoreError:
        return 0


def lock_of(target: Path) -> Path:
    return target.with_name(f".{target.name}.lock")


@pytest.fixture
def spawn():
    """Popen in the repository root; whatever is still running at the end of the test is killed."""
    made = []

    def start(argv: list[str], **kw) -> subprocess.Popen:
        made.append(subprocess.Popen(argv, cwd=ROOT, **kw))
        return made[-1]
    yield start
    for p in made:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.fixture(autouse=True)
def headless(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A recording, two tiny runs trained on it (one evaluated), and a world of the first."""
    tmp = tmp_path_factory.mktemp("lab")
    data = tmp / "block.zarr"
    run_cli("-m", "dreamcade", "record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "600", "--seed", "4",
            "--quiet", "--out", str(data))
    for name in ("a", "b"):
        run_cli("train.py", "--config", "configs/tiny.yaml", "--data", str(data), f"out_dir={tmp / 'runs'}",
                f"name={name}", *TRAIN)
    run_cli("-m", "dreamcade", "eval", "drift", "--checkpoint", str(tmp / "runs" / "b"), "--out", str(tmp / "report_b"), *SMALL)
    return {"tmp": tmp, "data": data, "a": tmp / "runs" / "a", "b": tmp / "runs" / "b", "world": tmp / "runs" / "a" / "world",
            "report_b": tmp / "report_b"}


@pytest.fixture
def raw(tmp_path):
    return write_store(tmp_path / "raw.zarr", [60, 50, 40])


# -- the output itself --------------------------------------------------------------------------------------

def test_an_output_appears_whole_and_locks_its_target(tmp_path):
    target = tmp_path / "made" / "deep" / "out"
    with Output(target, what="report") as o:
        assert o.path != target and o.path.parent == target.parent and lock_of(target).is_file()
        with pytest.raises(OutputError, match=rf"another process \(pid {os.getpid()}\) is writing it now"):
            Output(target, what="report").__enter__()
        (o.path / "metrics.json").write_text("{}")
        assert not target.exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]  # no partial, no lock left
    assert (target / "metrics.json").read_text() == "{}"


def test_an_output_left_on_an_error_removes_only_what_it_made(tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "mine.txt").write_text("mine")
    before = tree_hash(tmp_path)
    with pytest.raises(RuntimeError):
        with Output(tmp_path / "new" / "er" / "out", what="report") as o:
            (o.path / "half").write_text("x")
            raise RuntimeError("the work failed")
    assert tree_hash(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["keep"]


def test_a_write_still_under_way_in_zarrs_io_thread_ends_before_the_partial_is_removed(tmp_path):
    """Ctrl-C stops the main thread, not the chunk writes it had handed to zarr's I/O thread; those
    go on writing into the partial (and make its folders again) while it is removed, which left
    the partial behind in one CI run (test_17's export). The output lets them end first."""
    import asyncio

    import numpy as np
    import zarr
    from zarr.core.sync import _get_loop

    with pytest.raises(KeyboardInterrupt):
        with Output(tmp_path / "out", what="store") as o:
            a = zarr.create_array(o.path / "x.zarr", shape=(3000, 64), chunks=(1, 64), dtype="u1")
            writes = asyncio.run_coroutine_threadsafe(a._async_array.setitem(slice(None), np.ones((3000, 64), "u1")),
                                                      _get_loop())
            wait_for(lambda: (o.path / "x.zarr" / "c").is_dir(), 30, "the first chunk")
            raise KeyboardInterrupt
    assert writes.done() and writes.exception() is None  # ended, not cut short, before the removal
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("existed", [False, True])
def test_a_folder_put_at_the_target_while_writing_is_left_as_it_is(tmp_path, existed):
    """(3) checked again at the swap: something that appeared, or replaced the old output, stays."""
    target = tmp_path / "report"
    if existed:
        target.mkdir()
        (target / "metrics.json").write_text("old")
    o = Output(target, what="report", overwrite=True, replaces=lambda p: (p / "metrics.json").is_file()).__enter__()
    (o.path / "metrics.json").write_text("new")
    if existed:  # the old report moved away and a user's folder put there
        shutil.move(target, tmp_path / "moved")
    target.mkdir()
    (target / "notes.txt").write_text("my notes")
    with pytest.raises(OutputError, match="something else was put there while the report was written"):
        o.commit()
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moved", "report"] if existed else ["report"]


# -- 1: one command replaced any folder -------------------------------------------------------------------

@pytest.mark.parametrize("what", ["store", "run", "thesis"])
def test_1_build_without_overwrite_never_replaces_anything(tmp_path, raw, lab, capsys, what):
    target = {"store": write_store(tmp_path / "other.zarr", [20]), "run": tmp_path / "run", "thesis": tmp_path / "thesis"}[what]
    if what == "run":
        shutil.copytree(lab["a"], target)
    if what == "thesis":
        target.mkdir()
        (target / "thesis.tex").write_text("\\chapter{One}")
    before = tree_hash(tmp_path)
    one_line(capsys, call("dataset", "build", str(raw), "--size", "16x16", "--out", str(target), "--quiet"), 2,
             target, "already exists", "--overwrite")
    assert tree_hash(tmp_path) == before
    if what != "store":  # and with --overwrite, only a store is replaced
        one_line(capsys, call("dataset", "build", str(raw), "--size", "16x16", "--out", str(target), "--overwrite",
                              "--quiet"), 2, target, "not a dreamcade store")
        assert tree_hash(tmp_path) == before


def test_1_build_with_overwrite_onto_a_file_keeps_the_file(tmp_path, raw, capsys):
    f = tmp_path / "notes.zarr"
    f.write_text("a file that happens to end in .zarr")
    before = tree_hash(tmp_path)
    one_line(capsys, call("dataset", "build", str(raw), "--size", "16x16", "--out", str(f), "--overwrite", "--quiet"),
             2, f, "not a dreamcade store")
    assert tree_hash(tmp_path) == before


def test_1_two_builds_and_a_build_and_a_record_to_one_out(tmp_path, capsys, spawn):
    big = write_store(tmp_path / "big.zarr", [1500] * 4, size=(96, 96), chunk=64)
    out = tmp_path / "train.zarr"
    build = [sys.executable, "-m", "dreamcade", "data", "build", str(big), "--size", "32x32", "--quiet", "--out", str(out)]
    first = spawn(build, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lock_of(out).exists, what="the first build's lock")
    one_line(capsys, call("dataset", "build", str(big), "--size", "32x32", "--quiet", "--out", str(out)), 2,
             out, f"another process (pid {first.pid})")
    one_line(capsys, call("record", "env", "--env", "dreamcade/Block-v0", "--steps", "20", "--quiet", "--out", str(out)),
             2, out, f"another process (pid {first.pid})")
    said, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and "wrote" in said
    assert open_store(out).n_frames == 6000 and open_store(out).verify() == []
    # the other way round: a recording holds its store while it records
    rec = tmp_path / "rec.zarr"
    recording = spawn([sys.executable, "-m", "dreamcade", "record", "env", "--env", "dreamcade/Block-v0", "--steps", "100000000",
                       "--quiet", "--out", str(rec)], stderr=subprocess.PIPE, text=True)
    wait_for(lambda: frames_in(rec) > 0, 60, "the first flushed frames")
    one_line(capsys, call("dataset", "build", str(big), "--size", "32x32", "--quiet", "--out", str(rec), "--overwrite"),
             2, rec, f"another process (pid {recording.pid})")
    recording.send_signal(signal.SIGINT)
    assert recording.wait(60) == 130
    assert open_store(rec).n_frames > 0 and not lock_of(rec).exists()


# -- 2, 5: URL spellings --------------------------------------------------------------------------------------

@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_2_a_file_url_input_is_still_the_input(tmp_path, raw, capsys, overwrite):
    before = tree_hash(tmp_path)
    one_line(capsys, call("dataset", "build", f"file://{raw}", "--size", "8x8", "--out", str(raw), *overwrite,
                          "--quiet"), 2, "is the input")
    assert tree_hash(tmp_path) == before


def test_5_a_url_out_is_refused_and_a_file_url_is_its_path(tmp_path, raw, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = tree_hash(tmp_path)
    one_line(capsys, call("dataset", "build", str(raw), "--size", "8x8", "--out", "s3://bucket/x.zarr", "--quiet"),
             2, "s3://bucket/x.zarr", "writing to a URL is not supported")
    assert tree_hash(tmp_path) == before and not (tmp_path / "s3:").exists()
    assert call("dataset", "build", str(raw), "--size", "8x8", "--out", f"file://{tmp_path}/x.zarr", "--quiet") == 0
    assert open_store(tmp_path / "x.zarr").n_frames == 150 and not (tmp_path / "file:").exists()


# -- 3: a folder that appears while export and eval run -------------------------------------------------------

def appear_when_written(target: Path) -> threading.Thread:
    """A user's folder of notes put at `target` while this process writes it (its partial is there)."""
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")

    def put():
        wait_for(partial.exists, 120, "the partial")
        target.mkdir()
        (target / "notes.txt").write_text("my notes")
    t = threading.Thread(target=put, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("command", ["export", "eval"])
def test_3_export_and_eval_leave_a_folder_that_appeared_meanwhile(tmp_path, lab, capsys, command):
    target = tmp_path / "out"
    t = appear_when_written(target)
    argv = ([str(lab["a"]), "--out", str(target)] if command == "export" else
            ["drift", "--checkpoint", str(lab["a"]), "--out", str(target), *SMALL])
    rc = call(command, *argv)
    t.join(5)
    one_line(capsys, rc, 2, target, "something else was put there")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]


# -- 4: outputs inside an input --------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["eval video", "play --video", "play --save"])
def test_4_outputs_inside_an_input_store_are_refused(lab, capsys, how):
    data = lab["data"]
    before = tree_hash(data)
    if how == "eval video":
        rc = call("eval", "video", str(data), "--out", str(data / "clip.mp4"))
    elif how == "play --video":
        rc = call("play", "--checkpoint", str(lab["a"]), "--data", str(data), "--video", str(data / "p.gif"), "--frames", "2")
    else:
        rc = call("play", "--checkpoint", str(lab["a"]), "--save", str(data / "s.zarr"), "--frames", "2")
    one_line(capsys, rc, 2, data, "lies inside the input")
    assert tree_hash(data) == before


def test_4_play_video_with_overwrite_replaces_a_clip_whole(tmp_path, lab, capsys):
    clip = tmp_path / "p.gif"
    assert call("play", "--checkpoint", str(lab["a"]), "--video", str(clip), "--frames", "2") == 0
    first = clip.read_bytes()
    one_line(capsys, call("play", "--checkpoint", str(lab["a"]), "--video", str(clip), "--frames", "4"), 2,
             clip, "--overwrite")
    assert clip.read_bytes() == first
    assert call("play", "--checkpoint", str(lab["a"]), "--video", str(clip), "--frames", "4", "--overwrite") == 0
    assert clip.read_bytes() != first and not list(tmp_path.glob("*.tmp*"))
    assert "4 frames" in capsys.readouterr().err, "play says what it played"


# -- 6, 7: export takes figures and frames of this model only ---------------------------------------------------

def test_6_export_refuses_the_report_of_another_run(tmp_path, lab, capsys):
    out = tmp_path / "w"
    one_line(capsys, call("export", str(lab["a"]), "--out", str(out), "--report", str(lab["report_b"])), 2,
             lab["report_b"], "not", lab["a"], "dreamcade eval drift --checkpoint")
    assert not out.exists()
    assert call("export", str(lab["b"]), "--out", str(out), "--report", str(lab["report_b"])) == 0
    assert json.loads((out / "world.json").read_text())["eval"]["report"] == str(lab["report_b"])


def test_7_export_refuses_data_of_another_frame_size(tmp_path, lab, capsys):
    small = tmp_path / "small.zarr"
    assert call("dataset", "build", str(lab["data"]), "--size", "8x8", "--out", str(small), "--quiet") == 0
    capsys.readouterr()
    one_line(capsys, call("export", str(lab["a"]), "--out", str(tmp_path / "w"), "--data", str(small)), 2,
             small, "8x8", "16x16")
    assert not (tmp_path / "w").exists()


# -- 8, 17: two trainings of one name; Ctrl-C ---------------------------------------------------------------------

def test_8_a_second_training_of_a_running_name_is_refused_and_17_ctrl_c_is_one_line(tmp_path, lab, capsys, spawn):
    runs = tmp_path / "runs"
    args = ["--config", "configs/tiny.yaml", "--data", str(lab["data"]), f"out_dir={runs}", "name=x",
            "train.steps=100000", "train.batch_size=4", "train.threads=1", "train.eval_every=0",
            "train.sample_every=0", "train.save_every=5", "train.log_every=1", "--quiet"]
    first = spawn([sys.executable, "train.py", *args], stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (runs / "x" / "checkpoints" / "latest").exists(), 120, "the first checkpoint")
    short = [*args, "train.steps=6"]  # were it not refused, it would end soon
    one_line(capsys, call("train", *short), 2, runs / "x", f"another process (pid {first.pid})")
    one_line(capsys, call("train", *short, "--resume"), 2, f"another process (pid {first.pid})")
    first.send_signal(signal.SIGINT)
    assert first.wait(60) == 130
    err = first.stderr.read().strip().splitlines()
    assert "Traceback" not in "\n".join(err) and err[-1].startswith("interrupted: the run keeps its last checkpoint")
    steps = [json.loads(line)["step"] for line in (runs / "x" / "stats.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)), "two trainings wrote one stats.jsonl"
    assert not lock_of(runs / "x").exists()  # let go of on the way out


@pytest.mark.parametrize("command", ["build", "export"])
def test_17_ctrl_c_in_build_and_export_is_one_line(tmp_path, lab, command, spawn):
    if command == "build":
        src = write_store(tmp_path / "big.zarr", [3000] * 4, size=(96, 96), chunk=64)
        argv = ["-m", "dreamcade", "data", "build", str(src), "--size", "32x32", "--quiet"]
    else:
        argv = ["-m", "dreamcade", "export", str(lab["a"]), "--frames", "5000"]
    target = tmp_path / "out"
    p = spawn([sys.executable, *argv, "--out", str(target)], stderr=subprocess.PIPE, text=True)
    wait_for(lambda: any(x.name.startswith(".out.partial-") for x in tmp_path.iterdir()), 120, "the partial")
    p.send_signal(signal.SIGINT)
    assert p.wait(60) == 130
    err = p.stderr.read().strip()
    assert "Traceback" not in err and err.splitlines()[-1].startswith("interrupted: no"), err
    assert not target.exists() and not any(x.name.startswith(".out") for x in tmp_path.iterdir())


def test_17_ctrl_c_while_an_event_loop_is_being_made_is_still_one_line():
    """Ctrl-C can land while zarr makes the event loop of its I/O thread; the half-made loop then
    fails in its __del__ when it is collected, after the command's line (seen once in a full
    suite: "Exception ignored in: BaseEventLoop.__del__ ... no attribute '_ssock'"). Here the
    half-made loop is made by hand, the Ctrl-C raised, through the command's boundary. A second
    Ctrl-C in the same process (the test process runs many commands) keeps the one hook."""
    code = (
        "import asyncio, sys\n"
        "from dreamcade.dataset.errors import boundary\n"
        "def work():\n"
        "    half = asyncio.SelectorEventLoop.__new__(asyncio.SelectorEventLoop)  # __init__ never ran\n"
        "    raise KeyboardInterrupt\n"
        "code = boundary(work, 'interrupted: nothing written')\n"
        "import gc; gc.collect()\n"
        "hook = sys.unraisablehook\n"
        "boundary(work, 'interrupted again'); gc.collect()\n"
        "print('exit', code, 'one hook' if sys.unraisablehook is hook else 'hook wrapped twice', file=sys.stderr)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.stderr.strip().splitlines() == ["interrupted: nothing written", "", "interrupted again", "exit 130 one hook"], p.stderr


# -- 9: dataset info's verdict ---------------------------------------------------------------------------------

def test_9_info_on_a_store_with_a_missing_chunk_exits_1(raw, capsys):
    frame_chunk_file(raw, 1).unlink()
    assert call("dataset", "info", str(raw)) == 1
    assert "chunk file is missing" in capsys.readouterr().out


# -- 10, 11, 22: a world folder is validated on load ---------------------------------------------------------

def edited_world(lab, tmp_path, edit) -> Path:
    w = tmp_path / "world"
    shutil.copytree(lab["world"], w)
    edit(w)
    return w


def set_config(key: str, value):
    def edit(w: Path):
        raw = json.loads((w / "model" / "config.json").read_text())
        node = raw
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = value
        (w / "model" / "config.json").write_text(json.dumps(raw))
    return edit


def cut_spec(w: Path):
    """The control spec without its last control: a valid spec, but not the one the weights were made for."""
    raw = json.loads((w / "model" / "config.json").read_text())
    raw["control_spec"]["controls"] = raw["control_spec"]["controls"][:-1]
    (w / "model" / "config.json").write_text(json.dumps(raw))


@pytest.mark.parametrize("edit, names", [
    (set_config("_dreamcade.config.sampler.steps", 0), ["config.json", "sampler.steps"]),
    (set_config("_dreamcade.config.sampler.hold_levels", -1), ["config.json", "sampler.hold_levels"]),
    (set_config("_dreamcade.config.sampler.context_noise", -0.5), ["config.json", "context_noise"]),
    (set_config("channels", [32, 64]), ["diffusion_pytorch_model.safetensors", "does not fit"]),
    (cut_spec, ["diffusion_pytorch_model.safetensors", "does not fit"]),
    (lambda w: (w / "model" / "config.json").write_text("[1, 2]"), ["config.json", "list"]),
    (lambda w: (w / "model" / "config.json").unlink(), ["config.json", "missing from the model folder"]),
    (lambda w: shutil.rmtree(w / "reference.zarr"), ["reference.zarr", "missing from the world folder"]),
], ids=["steps0", "hold-1", "noise-0.5", "channels", "spec-cut", "list", "no-config", "no-reference"])
@pytest.mark.parametrize("command", ["play", "eval"])
def test_10_11_22_a_damaged_world_is_refused_in_one_line(tmp_path, lab, capsys, edit, names, command):
    w = edited_world(lab, tmp_path, edit)
    rc = (call("play", "--checkpoint", str(w), "--frames", "2") if command == "play" else
          call("eval", "drift", "--checkpoint", str(w), "--out", str(tmp_path / "r"), *SMALL))
    one_line(capsys, rc, 2, w, *names)
    assert not (tmp_path / "r").exists()


# -- 12, 18: outputs that cannot be written, refused before any work ---------------------------------------------

@pytest.mark.parametrize("how", ["record env", "train", "distill", "play --save", "play --video"])
def test_12_18_unwritable_outputs_are_one_line_before_work(tmp_path, lab, capsys, how):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    where = blocker / "x"
    argv = {"record env": ("record", "env", "--env", "dreamcade/Block-v0", "--steps", "5", "--out", str(where / "s.zarr")),
            "train": ("train", "--config", "configs/tiny.yaml", "--data", str(lab["data"]), f"out_dir={where}", *TRAIN),
            "distill": ("distill", "--checkpoint", str(lab["a"]), "--out-dir", str(where), "--iterations", "1"),
            "play --save": ("play", "--checkpoint", str(lab["a"]), "--save", str(where / "s.zarr"), "--frames", "500"),
            "play --video": ("play", "--checkpoint", str(lab["a"]), "--video", str(where / "p.gif"), "--frames", "500")}[how]
    t0 = time.monotonic()
    one_line(capsys, call(*argv), 2, blocker, "cannot write there")
    assert blocker.read_text() == "not a folder" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
    assert time.monotonic() - t0 < 20, "refused only after the work"


# -- 13: a full disk ---------------------------------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path):
    """A real 64 KiB filesystem (tmpfs; needs root, as CI and these machines have)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (not root)")
    yield disk
    subprocess.run(["umount", "--lazy", str(disk)], check=True)


@pytest.mark.parametrize("command", ["build", "export", "train"])
def test_13_a_full_disk_is_one_line_and_leaves_no_temporary(tmp_path, lab, capsys, tiny_disk, command):
    if command == "build":
        big = write_store(tmp_path / "big.zarr", [600], size=(64, 64))
        rc = call("dataset", "build", str(big), "--size", "64x64", "--out", str(tiny_disk / "t.zarr"), "--quiet")
    elif command == "export":
        rc = call("export", str(lab["a"]), "--out", str(tiny_disk / "world"))
    else:
        rc = call("train", "--config", "configs/tiny.yaml", "--data", str(lab["data"]), f"out_dir={tiny_disk}", "name=r",
                  "train.save_every=2", *TRAIN)
    one_line(capsys, rc, 1, "no space left on the disk")
    left = sorted(str(p.relative_to(tiny_disk)) for p in tiny_disk.rglob("*"))
    assert left == ([] if command != "train" else ["r", "r/checkpoints", "r/config.yaml", "r/stats.jsonl"]), left


# -- 14: a session shorter than the report's chunks ------------------------------------------------------------------

def test_14_a_session_shorter_than_the_chunk_count_is_measured(tmp_path, lab, capsys):
    short = tmp_path / "short.zarr"
    assert call("record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "5", "--quiet",
                "--out", str(short)) == 0
    rc = call("eval", "drift", "--checkpoint", str(lab["a"]), "--session", str(short), "--out", str(tmp_path / "r"),
              "--horizon", "8", "--idm-steps", "10", "--bank", "100", "--threads", "1", "--quiet")
    assert rc == 0, capsys.readouterr().err
    assert (tmp_path / "r" / "index.html").is_file()


# -- 15, 16: symlink loops, a frame size past memory ---------------------------------------------------------------

@pytest.mark.parametrize("where", ["build input", "build --out", "train data", "train out_dir"])
def test_15_a_symlink_loop_is_one_line(tmp_path, raw, capsys, where):
    loop = tmp_path / "loop"
    os.symlink(tmp_path / "loop2", loop)
    os.symlink(loop, tmp_path / "loop2")
    argv = {"build input": ("dataset", "build", str(loop), "--size", "8x8", "--out", str(tmp_path / "o.zarr")),
            "build --out": ("dataset", "build", str(raw), "--size", "8x8", "--out", str(loop / "o.zarr")),
            "train data": ("train", "--config", "configs/tiny.yaml", "--data", str(loop), f"out_dir={tmp_path}", *TRAIN),
            "train out_dir": ("train", "--config", "configs/tiny.yaml", "--data", str(raw), f"out_dir={loop}", *TRAIN)}[where]
    one_line(capsys, call(*argv), 2, loop, "symlink loop")


def test_16_a_frame_size_past_memory_is_refused_at_once(tmp_path, capsys):
    t0 = time.monotonic()
    assert call("record", "env", "--steps", "5", "--size", "100000x100000", "--out", str(tmp_path / "s.zarr")) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # argparse's usage, then its one error line
    assert "--size" in err and "100000x100000" in err and "8192" in err
    assert time.monotonic() - t0 < 5 and not (tmp_path / "s.zarr").exists()


# -- 19: the demo checks its options before it records -------------------------------------------------------------

@pytest.mark.parametrize("option, value, says", [("--size", "0x12", "must be positive"), ("--frames", "-5", "--frames -5")])
def test_19_demo_refuses_before_recording(tmp_path, capsys, option, value, says):
    one_line(capsys, call("demo", "--out", str(tmp_path / "demo"), option, value, "--no-play"), 2, says)
    assert not (tmp_path / "demo").exists()


def test_19_a_size_of_no_multiple_builds_trains_and_plays_at_its_own_shape(tmp_path, raw, capsys):
    """13x7 (once refused: not multiples of 8) halves evenly nowhere: the network pads it to its
    factor and crops back (model/unet.py), so the frames it samples are 13x7."""
    store, runs, session = tmp_path / "odd.zarr", tmp_path / "runs", tmp_path / "s.zarr"
    assert call("dataset", "build", str(raw), "--size", "13x7", "--out", str(store), "--quiet") == 0
    rc = call("train", "--config", "configs/tiny.yaml", "--data", str(store), f"out_dir={runs}", "name=odd", *TRAIN)
    assert rc == 0, capsys.readouterr().err
    rc = call("play", "--checkpoint", str(runs / "odd"), "--save", str(session), "--frames", "3")
    assert rc == 0, capsys.readouterr().err
    s = open_store(session)
    assert s.frame_shape == (7, 13, 3) and len(s) >= 3


def test_19_demo_prints_its_stages_as_a_user_types_them():
    proc = subprocess.run([sys.executable, "-c", "from dreamcade import demo; demo.run(['-m', 'dreamcade', 'data', '--help'], 'look')"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    assert "$ python -m dreamcade data --help" in proc.stdout


# -- 20, 21: damage messages that fit the command ----------------------------------------------------------------

def test_20_play_and_eval_video_do_not_suggest_an_option_they_lack(tmp_path, lab, capsys):
    data = tmp_path / "d.zarr"
    shutil.copytree(lab["data"], data)
    for f in (data / "frames" / "c").iterdir():
        shutil.rmtree(f)  # every frame chunk gone
    one_line(capsys, call("eval", "video", str(data), "--out", str(tmp_path / "c.gif")), 2, "--episode")
    assert "--skip-damaged" not in capsys.readouterr().err
    rc = call("play", "--checkpoint", str(lab["a"]), "--data", str(data), "--frames", "2", "--no-real")
    err = one_line(capsys, rc, 2, "--episode N", "--data")
    assert "--skip-damaged" not in err
    assert not (tmp_path / "c.gif").exists()


def test_21_a_build_that_skips_every_episode_says_so(tmp_path, raw, capsys):
    for c in range(0, 10):
        frame_chunk_file(raw, c).unlink(missing_ok=True)
    out = tmp_path / "t.zarr"
    one_line(capsys, call("dataset", "build", str(raw), "--size", "16x16", "--out", str(out), "--skip-damaged",
                          "--quiet"), 2, "--skip-damaged left out every episode")
    assert not out.exists()


# -- every writer, every kind of thing already at its --out ----------------------------------------------------------

KINDS = ("file", "folder", "store", "run", "input", "url")
WRITERS = {  # (command, argv builder, what it may replace with --overwrite, has --overwrite)
    "dataset build": ("dataset", lambda lab, t: ["build", str(lab["data"]), "--size", "8x8", "--out", t, "--quiet"], "store", True),
    "record env": ("record", lambda lab, t: ["env", "--env", "dreamcade/Block-v0", "--steps", "20", "--quiet", "--out", t], "store", True),
    "export": ("export", lambda lab, t: [str(lab["a"]), "--out", t], "world", True),
    "eval drift": ("eval", lambda lab, t: ["drift", "--checkpoint", str(lab["a"]), "--out", t, *SMALL], "report", True),
    "eval video": ("eval", lambda lab, t: ["video", str(lab["data"]), "--out", t], "clip", True),
    "play --video": ("play", lambda lab, t: ["--checkpoint", str(lab["a"]), "--video", t, "--frames", "2"], "clip", True),
    "play --save": ("play", lambda lab, t: ["--checkpoint", str(lab["a"]), "--save", t, "--frames", "2"], "store", False),
    "train": ("train", lambda lab, t: ["--config", "configs/tiny.yaml", "--data", str(lab["data"]),
                                       f"out_dir={os.path.dirname(t)}", f"name={os.path.basename(t)}", *TRAIN], "run", False),
    "distill": ("distill", lambda lab, t: ["--checkpoint", str(lab["a"]), "--out-dir", os.path.dirname(t), "--name",
                                           os.path.basename(t), "--iterations", "1"], "run", False),
}


OWN_KIND = {"store": "store", "run": "run", "file": "clip"}  # the file is named t.mp4: a clip to the clip writers


def make_kind(kind: str, where: Path, lab) -> str:
    """Something of `kind` already at a path in `where`; returns the path (or URL) to write to."""
    target = where / "t.mp4"  # a clip's name: the writers of clips look at what is there, not at the name
    if kind == "file":
        target.write_bytes(b"\x00my file")
    elif kind == "folder":
        target.mkdir()
        (target / "thesis.tex").write_text("\\chapter{One}")
    elif kind == "store":
        write_store(target, [12], size=(16, 16))
    elif kind == "run":
        shutil.copytree(lab["a"], target)
    elif kind == "input":
        return str(lab["data"])
    else:
        return "s3://bucket/t.mp4"
    return str(target)


def test_nothing_that_exists_is_changed_by_any_writer_but_with_overwrite_onto_its_own_kind(tmp_path, lab, capsys):
    checked = 0
    for name, (command, argv, own, has_overwrite) in WRITERS.items():
        for kind in KINDS:
            for overwrite in ([False, True] if has_overwrite else [False]):
                if overwrite and OWN_KIND.get(kind) == own or (overwrite and kind == "input" and name == "record env"):
                    continue  # the one change allowed: --overwrite onto an output of the writer's own kind
                    # (another command's input is a store of record's kind: replacing it is what was asked)
                where = tmp_path / f"{len(os.listdir(tmp_path))}"
                where.mkdir()
                target = make_kind(kind, where, lab)
                before = (tree_hash(where), tree_hash(lab["data"]), tree_hash(lab["a"]))
                rc = call(command, *argv(lab, target), *(["--overwrite"] if overwrite else []))
                err = capsys.readouterr().err
                assert rc == 2, f"{name} onto a {kind} (overwrite={overwrite}): exit {rc}\n{err}"
                assert "Traceback" not in err and len(err.strip().splitlines()) == 1, f"{name} / {kind}: {err}"
                assert (tree_hash(where), tree_hash(lab["data"]), tree_hash(lab["a"])) == before, \
                    f"{name} onto a {kind} (overwrite={overwrite}) changed something: {err}"
                checked += 1
    assert checked == 85


def test_a_folder_swap_without_renameat2_puts_the_old_folder_back_when_it_fails(tmp_path, monkeypatch):
    """replace_folder where the filesystem has no RENAME_EXCHANGE (macOS, NFS): the old folder
    steps aside, and comes back when the new one cannot be moved in; what a dead writer left
    beside it is removed by the next one."""
    from dreamcade.dataset import outputs

    target, tmp = tmp_path / "model", tmp_path / ".model.tmp-1"
    for folder, text in ((target, "old"), (tmp, "new")):
        folder.mkdir()
        (folder / "weights").write_text(text)
    monkeypatch.setattr(outputs, "_rename2", lambda *args: False)
    real, calls = os.rename, []

    def second_fails(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise OSError(errno.EIO, "the disk went away")
        return real(a, b)

    monkeypatch.setattr(os, "rename", second_fails)
    with pytest.raises(OSError):
        outputs.replace_folder(tmp, target)
    monkeypatch.setattr(os, "rename", real)
    assert (target / "weights").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [
        ".model.tmp-1", "model"]
    outputs.replace_folder(tmp, target)
    assert (target / "weights").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    for left in (f".model.tmp-{dead}", f".model.old-{dead}"):
        (tmp_path / left).mkdir()
    outputs.remove_stale_copies(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]

