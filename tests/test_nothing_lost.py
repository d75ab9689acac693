"""Nothing lost, nothing silent: each case a hostile user tried, as they tried it.

Every refusal is checked for what it leaves behind (the inputs byte for byte, no output that
looks complete), its exit status (2: refused) and its message (one line naming the file or key).
"""

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, in_process
from dreamcade.dataset import Control, ControlSpec, StoreWriter, open_store

SPEC = ControlSpec((Control("left", source="key:left"), Control("right", source="key:right")), name="t")


def write_store(path: Path, episodes: list[int], size=(32, 32), chunk: int = 16, fps: float = 30.0) -> Path:
    """A recording whose frames encode their index, `episodes` giving each episode's length."""
    w, h = size
    with StoreWriter(path, spec=SPEC, fps=fps, frame_size=size, source={"kind": "test"},
                     chunk_frames=chunk) as wr:
        t = 0
        for n in episodes:
            wr.begin_episode()
            for _ in range(n):
                f = np.full((h, w, 3), t % 251, np.uint8)
                f[0, 0] = [t % 256, t // 256, 9]
                wr.append(f, np.array([t % 2, (t // 3) % 2], np.float32), t / fps)
                t += 1
    return path


def tree_hash(path: Path) -> str:
    """sha1 over every file's relative name and bytes: equal means byte-identical."""
    h = hashlib.sha1()
    for f in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def refused(proc, *names: str) -> str:
    """The documented refusal: exit 2, one line on stderr that names each of `names`."""
    err = proc.stderr.strip()
    assert proc.returncode == 2, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for name in names:
        assert str(name) in err, f"{name!r} not in {err!r}"
    return err


def siblings(path: Path) -> list[str]:
    """Everything beside `path` that names it (the target and hidden partial folders)."""
    return sorted(p.name for p in path.parent.iterdir() if path.name in p.name)


def frame_chunk_file(store: Path, chunk: int) -> Path:
    return store / "frames" / "c" / str(chunk) / "0" / "0" / "0"


@pytest.fixture
def raw(tmp_path):
    return write_store(tmp_path / "raw.zarr", [60, 50, 40])


# -- 1: a build can destroy its input ------------------------------------------------------------------

@pytest.mark.parametrize("where, says", [("same", "is the input"), ("inside", "lies inside the input"),
                                         ("around", "contains the input")])
def test_build_onto_an_input_is_refused_and_the_input_is_untouched(tmp_path, raw, where, says):
    other = write_store(tmp_path / "other.zarr", [30])
    out = {"same": raw, "inside": raw / "sub.zarr", "around": tmp_path}[where]
    before = tree_hash(tmp_path)
    proc = in_process("data", "build", str(other), str(raw), "--size", "16x16", "--out", str(out),
                   "--overwrite", check=False)
    refused(proc, f"--out {out}", says)
    assert tree_hash(tmp_path) == before
    assert open_store(raw).verify() == []


# -- 2: a missing chunk reads as black frames -------------------------------------------------------------

def test_a_missing_chunk_is_refused_everywhere_it_is_read(tmp_path, raw):
    gone = frame_chunk_file(raw, 2)  # rows 32-47, inside the first episode
    gone.unlink()
    before = tree_hash(raw)
    out = tmp_path / "train.zarr"
    proc = in_process("data", "build", str(raw), "--size", "16x16", "--out", str(out), "--quiet", check=False)
    err = refused(proc, gone, "rows 32-47", "data info --verify")
    assert "--skip-damaged" in err
    assert not out.exists() and siblings(out) == [] and tree_hash(raw) == before
    info = in_process("data", "info", str(raw), check=False)  # the quick look sees it too, and says 1
    assert info.returncode == 1 and info.stdout.count(f"{gone}: chunk file is missing") == 1
    info = in_process("data", "info", "--verify", str(raw), check=False)  # decoded: said once, exit 1
    assert info.returncode == 1 and info.stdout.count(f"{gone}: chunk file is missing") == 1
    # the readers under train.py, eval and play
    from dreamcade.dataset import StoreError, WindowDataset
    from dreamcade.eval.data import open_eval_data
    with pytest.raises(StoreError, match="chunk file is missing"):
        open_store(raw).read_frames(40, 41)
    for mode in ("ram", "stream"):  # ram reads every frame when it opens, stream when a window needs it
        with pytest.raises(StoreError, match=str(gone)):
            ds = WindowDataset([raw], context=2, split="all", mode=mode)
            ds.__getitems__(np.arange(len(ds)))
    with pytest.raises(StoreError, match=str(gone)):
        data = open_eval_data([str(raw)], 2, 0.0, heldout=False)
        data.heldout.__getitems__(np.arange(len(data.heldout)))


def test_skip_damaged_leaves_out_the_episode_and_says_so(tmp_path, raw):
    frame_chunk_file(raw, 2).unlink()
    out = tmp_path / "train.zarr"
    proc = in_process("data", "build", str(raw), "--size", "16x16", "--out", str(out),
                   "--skip-damaged", "--quiet")
    assert "skipped the episode of frames 0-59" in proc.stderr and "chunk file is missing" in proc.stderr
    s = open_store(out)
    assert len(s) == 90 and len(s.episodes()) == 2 and s.verify() == []
    from dreamcade.dataset import WindowDataset
    ds = WindowDataset([raw], context=2, split="all", skip_damaged=True)
    assert [(a, b) for _, a, b in ds.episodes] == [(60, 110), (110, 150)]
    assert len(ds.skipped) == 1 and "frames 0-59" in ds.skipped[0]


def test_skip_damaged_in_one_part_of_an_episode_split_by_time_keeps_the_other(tmp_path):
    """One recording (160 frames, chunks of 16), its last 10% held out by time: a chunk lost in
    the held-out part leaves the training part whole, and the other way round."""
    from dreamcade.dataset import StoreError, WindowDataset

    for lost, kept_split, gone_split in ((9, "train", "val"), (2, "val", "train")):  # rows 144-159, 32-47
        raw = write_store(tmp_path / f"one{lost}.zarr", [160])
        frame_chunk_file(raw, lost).unlink()
        kept = WindowDataset([raw], context=2, split=kept_split, skip_damaged=True)
        assert kept.skipped == [] and len(kept) > 0
        with pytest.raises(StoreError, match=f"every {gone_split} episode touches damaged data"):
            WindowDataset([raw], context=2, split=gone_split, skip_damaged=True)


# -- 3: a failed build leaves a partial store that looks complete -------------------------------------------

def test_a_build_that_fails_half_way_leaves_nothing_and_can_be_rerun(tmp_path, raw):
    chunk = frame_chunk_file(raw, 6)  # rows 96-111: the build fails in its second episode
    good = chunk.read_bytes()
    chunk.write_bytes(good[: len(good) // 2])
    out = tmp_path / "train.zarr"
    proc = in_process("data", "build", str(raw), "--size", "16x16", "--out", str(out), "--quiet", check=False)
    refused(proc, chunk, "cannot be decoded")
    assert not out.exists() and siblings(out) == []
    chunk.write_bytes(good)  # repaired: the same command now succeeds (no "already exists")
    in_process("data", "build", str(raw), "--size", "16x16", "--out", str(out), "--quiet")
    assert len(open_store(out)) == 150 and open_store(out).closed_cleanly


def test_a_failed_overwrite_keeps_the_old_output(tmp_path, raw):
    out = tmp_path / "train.zarr"
    in_process("data", "build", str(raw), "--size", "16x16", "--out", str(out), "--quiet")
    before = tree_hash(out)
    frame_chunk_file(raw, 8).unlink()
    proc = in_process("data", "build", str(raw), "--size", "8x8", "--out", str(out), "--overwrite",
                   "--quiet", check=False)
    refused(proc, frame_chunk_file(raw, 8))
    assert tree_hash(out) == before and siblings(out) == ["train.zarr"]


# -- 4: damage in a validation episode drops validation silently ----------------------------------------

def test_damage_in_a_validation_episode_is_refused_by_train(tmp_path):
    from dreamcade.dataset import WindowDataset
    raw = write_store(tmp_path / "raw.zarr", [64] * 6, chunk=64)  # one chunk per episode
    (_, start, _), = WindowDataset([raw], context=2, split="val", val_fraction=0.2).episodes
    gone = frame_chunk_file(raw, start // 64)
    gone.unlink()
    proc = in_process("train", "--config", "configs/tiny.yaml", "--data", str(raw), f"out_dir={tmp_path}",
                   "--quiet", check=False)
    refused(proc, gone)
    assert not (tmp_path / "tiny").exists()


def test_when_skip_damaged_leaves_no_validation_episode_train_and_eval_say_so_and_go_on(tmp_path, capsys):
    """Every held-out episode damaged: train goes on without validation and eval on every episode
    left (as with one episode), each with a note that names the damage, not a refusal."""
    from dreamcade.dataset import WindowDataset
    from dreamcade.eval.data import open_eval_data
    from dreamcade.files.config_file import load_config
    from dreamcade.training.parts import build_data
    raw = write_store(tmp_path / "raw.zarr", [64] * 6, chunk=64)
    (_, start, _), = WindowDataset([raw], context=2, split="val", val_fraction=0.1).episodes
    gone = frame_chunk_file(raw, start // 64)
    gone.unlink()
    cfg = load_config("configs/tiny.yaml", [f"data.stores=[{raw}]", "data.val_fraction=0.1",
                                            "data.skip_damaged=true", "data.context=2"])
    train, val = build_data(cfg)
    assert val is None and len(train.episodes) == 5
    assert f"note: no validation: every val episode touches damaged data; first: {raw}" in capsys.readouterr().err
    data = open_eval_data([str(raw)], 2, 0.1, skip_damaged=True)
    assert data.split == "all" and start not in [a for _, a, _ in data.heldout.episodes]
    assert len(data.heldout.episodes) == 5 and any(str(gone) in n for n in data.notes)


# -- 5, 11: bad build options ----------------------------------------------------------------------------------

@pytest.mark.parametrize("option, value, says", [("--action-lag", "-100", "0 or more milliseconds"),
                                                 ("--fps", "0", "must be positive"),
                                                 ("--drop-idle", "0", "positive number of seconds"),
                                                 ("--drop-dark", "300", "between 0 and 255")])
def test_bad_build_options_are_refused_before_any_work(tmp_path, raw, option, value, says):
    before = tree_hash(raw)
    out = tmp_path / "train.zarr"
    proc = in_process("data", "build", str(raw), "--size", "16x16", "--out", str(out), option, value,
                   check=False)
    refused(proc, option, says)
    assert not out.exists() and siblings(out) == [] and tree_hash(raw) == before


# -- 6, 7, 10, 12: configs and overrides ----------------------------------------------------------------------

@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n"])
def test_a_config_that_is_not_a_mapping_is_refused_with_overrides_too(tmp_path, raw, text):
    cfg = tmp_path / "x.yaml"
    cfg.write_text(text)
    for extra in ([], ["train.steps=5"], ["--data", str(raw)]):
        proc = in_process("train", "--config", str(cfg), *extra, "--dry-run", check=False)
        refused(proc, cfg, "expected a mapping")


@pytest.mark.parametrize("override, says", [("train.log_every=0", "train.log_every"),
                                            ("train.save_every=-1", "train.save_every"),
                                            ("train.eval_every=-5", "train.eval_every"),
                                            ("model.channels=[]", "model.channels is empty"),
                                            ("train.steps=abc", "override 'train.steps=abc'")])
def test_bad_values_are_refused_and_blamed_on_their_source(override, says):
    proc = in_process("train", "--config", "configs/tiny.yaml", override, "--dry-run", check=False)
    err = refused(proc, says)
    assert "tiny.yaml" not in err  # the value came from the command line, not the file


def test_every_zero_means_never_and_never_divides_by_zero():
    from dreamcade.training.parts import due
    assert [s for s in range(1, 11) if due(s, 0, 10)] == [10]
    assert [s for s in range(1, 11) if due(s, 4, 10)] == [4, 8, 10]
    out = in_process("train", "--config", "configs/tiny.yaml", "train.eval_every=0", "train.save_every=0",
                  "--dry-run").stdout
    assert "eval_every: 0" in out and "save_every: 0" in out


def test_options_may_come_between_overrides():
    out = in_process("train", "--config", "configs/tiny.yaml", "name=a", "--dry-run", "train.steps=5").stdout
    assert "name: a" in out and "steps: 5" in out


# -- 8: an unwritable report folder ----------------------------------------------------------------------------

def test_eval_refuses_an_unwritable_out_before_loading_anything(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    out = blocker / "report"
    proc = in_process("eval", "drift", "--checkpoint", str(tmp_path / "no_model"), "--out", str(out),
                   check=False)
    refused(proc, out, "cannot write there")


def test_eval_refuses_a_report_onto_its_data(raw):
    proc = in_process("eval", "drift", "--session", str(raw), "--data", str(raw), "--out", str(raw),
                   "--overwrite", check=False)
    refused(proc, "--out", raw)
    assert open_store(raw).verify() == []


# -- 9: a game module that is not installed -----------------------------------------------------------------

def test_record_env_with_a_missing_module_is_one_line(tmp_path):
    proc = in_process("record", "env", "--env", "nosuchmodule:Foo-v0", "--steps", "5",
                   "--out", str(tmp_path / "x.zarr"), check=False)
    refused(proc, "--env nosuchmodule:Foo-v0", "nosuchmodule")
    assert not (tmp_path / "x.zarr").exists()


# -- 12: model files ---------------------------------------------------------------------------------------------

def test_model_files_are_readable_by_others_and_a_truncated_one_is_called_truncated(tmp_path):
    from dreamcade.files.checkpoint import CheckpointError, load_model, save_model
    from dreamcade.files.config_file import load_config
    from dreamcade.model.denoiser import Denoiser

    cfg = load_config("configs/tiny.yaml", ["model.channels=[8,16]", "model.cond_dim=16", "model.action_dim=4"])
    model = Denoiser.build(cfg.model, cfg.diffusion, SPEC, cfg.data.context, (16, 16))
    path = save_model(tmp_path, model, cfg, 1) / "diffusion_pytorch_model.safetensors"
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
    load_model(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated"):
        load_model(path)
    path.write_bytes(data[:5])
    with pytest.raises(CheckpointError, match="cut short"):
        load_model(path)


# -- the property: SIGKILL at any moment leaves the old output or a complete new one -----------------------

@pytest.mark.slow
def test_sigkill_during_build_leaves_no_output_or_a_complete_one(tmp_path):
    raw = write_store(tmp_path / "raw.zarr", [1500] * 4, size=(96, 96), chunk=64)
    ref = tmp_path / "ref.zarr"
    args = [sys.executable, "-m", "dreamcade", "data", "build", str(raw), "--size", "32x32", "--quiet"]
    t0 = time.monotonic()
    subprocess.run(args + ["--out", str(ref)], cwd=ROOT, check=True, capture_output=True)
    full = time.monotonic() - t0
    expected = open_store(ref).read_frames()
    rng = random.Random(0)
    outcomes = set()
    for k in range(8):
        out = tmp_path / f"out{k}.zarr"
        replace = k % 2 == 1  # odd runs replace an existing output with --overwrite
        old_hash = tree_hash(write_store(out, [10])) if replace else None
        proc = subprocess.Popen(args + ["--out", str(out), "--overwrite"], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.1) * full)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if not out.exists():
            assert not replace, "the old output was removed before the new one was complete"
            outcomes.add("none")
        elif replace and tree_hash(out) == old_hash:
            outcomes.add("old")
        else:
            s = open_store(out)
            assert s.closed_cleanly and s.verify() == [] and s.problems() == []
            np.testing.assert_array_equal(s.read_frames(), expected)
            outcomes.add("new")
    assert outcomes & {"none", "old"}, "no run was killed before it finished: the test proves nothing"
    # a later build cleans what killed ones left beside the target
    out = tmp_path / "out1.zarr"
    subprocess.run(args + ["--out", str(out), "--overwrite"], cwd=ROOT, check=True, capture_output=True)
    assert siblings(out) == ["out1.zarr"]
