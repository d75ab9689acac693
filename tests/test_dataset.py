"""Training stores (build) and training windows (WindowDataset, make_loader)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, run_cli
from dreamcade.dataset import Control, ControlSpec, StoreError, StoreWriter, open_store
from dreamcade.dataset.build import BuildOptions, build, merge_actions
from dreamcade.dataset.windows import ChunkBlockSampler, WindowDataset, make_loader, split_episodes

SPEC = ControlSpec((Control("jump", source="key:space"), Control("fire", source="key:z"),
                    Control("mouse_dx", "continuous", "mouse:dx", -50.0, 50.0),
                    Control("stick_x", "continuous", "pad:axis:leftx", -1.0, 1.0)), name="t")


def frame_of(t: int, h: int = 16, w: int = 16) -> np.ndarray:
    """A frame whose pixels encode t (two bytes), never all zero."""
    f = np.empty((h, w, 3), np.uint8)
    f[..., 0] = t % 256
    f[..., 1] = t // 256
    f[..., 2] = 200
    return f


def decode(frames: np.ndarray) -> np.ndarray:
    """Frame indices back from frames [..., H, W, 3] or [..., 3, H, W] (channel-first)."""
    if frames.shape[-1] != 3:
        frames = np.moveaxis(frames, -3, -1)
    return frames[..., 0, 0, 0].astype(int) + 256 * frames[..., 0, 0, 1].astype(int)


def raw_store(path, n=120, starts=(0, 50, 90), fps=30.0, actions=None, size=16, spec=SPEC, chunk=8):
    rng = np.random.default_rng(1)
    if actions is None:
        actions = np.zeros((n, len(spec)), np.float32)
        actions[:, 0] = rng.integers(0, 2, n)
        actions[:, 2] = rng.integers(-5, 6, n)
        actions[:, 3] = rng.uniform(-1, 1, n).round(2)
    with StoreWriter(path, spec=spec, fps=fps, frame_size=(size, size), source={"kind": "test"},
                     chunk_frames=chunk) as w:
        for t in range(n):
            if t in starts:
                w.begin_episode()
            w.append(frame_of(t, size, size), actions[t], t / fps)
    return actions


# -- build ---------------------------------------------------------------------------------------

def test_build_to_half_the_frame_rate_merges_actions(tmp_path):
    n = 120
    actions = np.zeros((n, 4), np.float32)
    actions[11, 1] = 1.0  # a tap of "fire" on a frame that is dropped (odd index)
    actions[:, 2] = np.arange(n) % 7  # mouse deltas
    actions[:, 3] = np.linspace(-1, 1, n).astype(np.float32)
    raw_store(tmp_path / "raw.zarr", n=n, starts=(0, 51, 90), actions=actions)
    summary = build([tmp_path / "raw.zarr"], tmp_path / "t.zarr", BuildOptions(size=(16, 16), fps=15),
                    progress=False)
    s = open_store(tmp_path / "t.zarr")
    # episodes of 51, 39 and 30 frames -> 26, 20 and 15 frames
    assert len(s) == summary["frames_out"] == 26 + 20 + 15
    assert s.fps == 15.0
    np.testing.assert_array_equal(s.episode_starts, [0, 26, 46])
    src = decode(s.read_frames())
    expected = np.concatenate([np.arange(0, 51, 2), np.arange(51, 90, 2), np.arange(90, 120, 2)])
    np.testing.assert_array_equal(src, expected)
    a = s.read_actions()
    assert a[5, 1] == 1.0, "the tap on dropped frame 11 survives in kept frame 10"
    assert a[:, 1].sum() == 1.0
    for j, i in enumerate(expected):
        ep_end = 51 if i < 51 else 90 if i < 90 else 120
        stop = min(i + 2, ep_end)
        assert a[j, 2] == actions[i:stop, 2].sum(), f"mouse deltas of frames {i}..{stop - 1} add up"
        assert a[j, 3] == actions[stop - 1, 3], "sticks take the value at the interval's end"
    np.testing.assert_allclose(s.time, expected / 30.0)
    assert s.attrs["source"]["kind"] == "build"
    assert s.attrs["source"]["options"]["fps"] == 15
    assert s.attrs["source"]["sources"][0]["path"].endswith("raw.zarr")


def test_action_lag_of_one_frame_shifts_every_action_by_one(tmp_path):
    actions = raw_store(tmp_path / "raw.zarr", n=60, starts=(0, 30))
    build([tmp_path / "raw.zarr"], tmp_path / "t.zarr",
          BuildOptions(size=(16, 16), action_lag_ms=1000 / 30), progress=False)
    s = open_store(tmp_path / "t.zarr")
    src = decode(s.read_frames())
    # each episode loses its first frame; frame i now carries the input recorded at i - 1
    np.testing.assert_array_equal(src, np.concatenate([np.arange(1, 30), np.arange(31, 60)]))
    np.testing.assert_array_equal(s.read_actions(), actions[src - 1])
    np.testing.assert_array_equal(s.episode_starts, [0, 29])


def test_crop_resize_and_exclusive_merge(tmp_path):
    spec = ControlSpec((Control("NOOP"), Control("LEFT"), Control("RIGHT")), exclusive=True)
    acts = np.eye(3, dtype=np.float32)[[0, 1, 1, 2, 2, 2, 0, 0]]
    assert merge_actions(spec, acts[1:4]).tolist() == [0, 1, 0]  # held longest wins
    with StoreWriter(tmp_path / "raw.zarr", spec=spec, fps=20, frame_size=(32, 24), source={}) as w:
        for t in range(8):
            f = np.zeros((24, 32, 3), np.uint8)
            f[:, 16:] = 255  # right half white
            w.append(f, acts[t], t / 20)
    build([tmp_path / "raw.zarr"], tmp_path / "t.zarr",
          BuildOptions(size=(8, 8), crop=(16, 0, 16, 16), fps=10), progress=False)
    s = open_store(tmp_path / "t.zarr")
    assert s.frame_shape == (8, 8, 3) and (s.read_frames() == 255).all()
    assert s.read_actions().argmax(axis=1).tolist() == [0, 1, 2, 0]  # 0,1 | 1,2 | 2,2 | 0,0 -> ties go low


def test_drop_idle_cuts_still_stretches_and_starts_a_new_episode(tmp_path):
    n = 100
    actions = np.zeros((n, 4), np.float32)
    actions[:30, 0] = 1
    actions[70:, 0] = 1
    with StoreWriter(tmp_path / "raw.zarr", spec=SPEC, fps=10, frame_size=(16, 16), source={}) as w:
        for t in range(n):
            frozen = 30 <= t < 70  # a menu: nothing moves, nothing pressed, for 4 s
            f = frame_of(30 if frozen else t)
            f[..., 2] = (30 if frozen else t) * 97 % 256  # play changes the screen clearly
            w.append(f, actions[t], t / 10)
    build([tmp_path / "raw.zarr"], tmp_path / "t.zarr", BuildOptions(size=(16, 16), drop_idle_s=2.0),
          progress=False)
    s = open_store(tmp_path / "t.zarr")
    src = decode(s.read_frames())
    np.testing.assert_array_equal(src, np.concatenate([np.arange(0, 31), np.arange(70, 100)]))
    np.testing.assert_array_equal(s.episode_starts, [0, 31])
    # a short still stretch (below the threshold) is kept
    build([tmp_path / "raw.zarr"], tmp_path / "t2.zarr", BuildOptions(size=(16, 16), drop_idle_s=5.0),
          progress=False)
    assert len(open_store(tmp_path / "t2.zarr")) == n


def test_drop_dark_cuts_dark_frames_and_the_fade_into_them(tmp_path):
    """A death's fade to black (each frame darker than the last, then black) is cut from its first
    darker frame, a dark frame after no fade alone, and the frames after each cut start a new episode."""
    levels = np.full(60, 200)
    levels[19:26] = [190, 170, 130, 90, 50, 20, 0]  # a fade from 19 (the first frame darker than 18) ...
    levels[26:28] = 0  # ... then black for two more frames
    levels[45] = 10  # one dark frame on its own: 44 is not darker than 43, so nothing before it goes
    with StoreWriter(tmp_path / "raw.zarr", spec=SPEC, fps=10, frame_size=(16, 16), source={}) as w:
        for t in range(60):
            f = frame_of(t)
            f[..., 2] = levels[t]
            f[1:, ...] = levels[t]  # the frame's mean is its level; row 0 carries the index
            w.append(f, np.zeros(4, np.float32), t / 10)
    build([tmp_path / "raw.zarr"], tmp_path / "t.zarr", BuildOptions(size=(16, 16), drop_dark=40.0),
          progress=False)
    s = open_store(tmp_path / "t.zarr")
    np.testing.assert_array_equal(decode(s.read_frames()), np.r_[0:19, 28:45, 46:60])
    np.testing.assert_array_equal(s.episode_starts, [0, 19, 36])
    assert s.attrs["source"]["options"]["drop_dark"] == 40.0
    build([tmp_path / "raw.zarr"], tmp_path / "all.zarr", BuildOptions(size=(16, 16)), progress=False)
    assert len(open_store(tmp_path / "all.zarr")) == 60


def test_build_refuses_bad_input_with_clear_errors(tmp_path):
    raw_store(tmp_path / "a.zarr", n=40, starts=(0, 36))
    other = ControlSpec((Control("left"),))
    with StoreWriter(tmp_path / "b.zarr", spec=other, fps=30, frame_size=(16, 16), source={}) as w:
        w.append(frame_of(0), [0.0], 0.0)
    with pytest.raises(StoreError, match=r"mixed control specs: control spec of .*b.zarr differs from that of .*a.zarr"):
        build([tmp_path / "a.zarr", tmp_path / "b.zarr"], tmp_path / "o.zarr", BuildOptions(size=(16, 16)))
    with pytest.raises(StoreError, match=r"a.zarr: --size 32x32 is larger than its 16x16"):
        build([tmp_path / "a.zarr"], tmp_path / "o.zarr", BuildOptions(size=(32, 32)))
    with pytest.raises(StoreError, match=r"--size 0x16: width and height must be positive"):
        build([tmp_path / "a.zarr"], tmp_path / "o.zarr", BuildOptions(size=(0, 16)))
    with pytest.raises(StoreError, match=r"a.zarr: episode 1 \(frames 36-39\) has 4 frames, too few for an action lag of 200 ms \(6 frames"):
        build([tmp_path / "a.zarr"], tmp_path / "o.zarr", BuildOptions(size=(16, 16), action_lag_ms=200))
    with pytest.raises(StoreError, match=r"--fps 20 does not divide the recording's 30 fps"):
        build([tmp_path / "a.zarr"], tmp_path / "o.zarr", BuildOptions(size=(16, 16), fps=20))
    assert not (tmp_path / "o.zarr").exists(), "nothing is written when the input is refused"


@pytest.mark.parametrize("size", [(12, 12), (13, 7), (16, 9)])
def test_build_takes_any_size_the_model_can_pad_to(tmp_path, size):
    """No multiple of 8 asked for: the network pads the frames to its own factor (model/unet.py)."""
    w, h = size
    raw_store(tmp_path / "a.zarr", n=40, starts=(0, 20))
    build([tmp_path / "a.zarr"], tmp_path / "o.zarr", BuildOptions(size=size), progress=False)
    s = open_store(tmp_path / "o.zarr")
    assert (s.width, s.height) == size and s.frame_shape == (h, w, 3) and s.read_frames().shape == (40, h, w, 3)
    window = WindowDataset([s], context=2, split="all")[0]
    assert window.frames.shape == (3, 3, h, w)


def test_build_cli(tmp_path):
    raw_store(tmp_path / "raw.zarr", n=60, starts=(0, 30))
    out = run_cli("-m", "dreamcade", "data", "build", str(tmp_path / "raw.zarr"), "--out", str(tmp_path / "t.zarr"),
                  "--size", "8x8", "--fps", "15", "--action-lag", "0", "--quiet").stdout
    assert "wrote" in out and "30 frames in 2 episodes at 8x8, 15 fps" in out
    proc = run_cli("-m", "dreamcade", "data", "build", str(tmp_path / "raw.zarr"), "--out", str(tmp_path / "u.zarr"),
                   "--size", "8x8", "--crop", "0,0,99,99", check=False)
    assert proc.returncode == 2 and "does not fit inside its 16x16 frames" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "--drop-idle" in run_cli("-m", "dreamcade", "data", "build", "--help").stdout


def test_info_gives_the_length_of_play_of_a_store_built_from_two_recordings(tmp_path):
    """Each recording's clock starts at 0: the store's length is the sum of its episodes', not the
    span from its first time stamp to its last."""
    raw_store(tmp_path / "a.zarr", n=60, starts=(0, 30))
    raw_store(tmp_path / "b.zarr", n=90, starts=(0,))
    run_cli("-m", "dreamcade", "data", "build", str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"), "--out",
            str(tmp_path / "t.zarr"), "--size", "8x8", "--quiet")
    d = json.loads(run_cli("-m", "dreamcade", "data", "info", "--json", str(tmp_path / "t.zarr")).stdout)
    assert d[0]["frames"] == 150 and d[0]["duration_s"] == pytest.approx(150 / 30)


# -- windows -------------------------------------------------------------------------------------

@pytest.fixture
def stores(tmp_path):
    raw_store(tmp_path / "a.zarr", n=120, starts=(0, 50, 90))
    raw_store(tmp_path / "b.zarr", n=80, starts=(0, 10, 11, 40, 60))  # one 1-frame episode
    return [tmp_path / "a.zarr", tmp_path / "b.zarr"]


def test_windows_stay_inside_episodes_and_pad_with_a_mask(stores):
    L = 4
    ds = WindowDataset(stores, context=L, split="all", mode="ram")
    b = ds.__getitems__(np.arange(len(ds)))
    assert b.frames.shape == (len(ds), L + 1, 3, 16, 16) and b.frames.dtype == torch.uint8
    assert b.actions.shape == (len(ds), L + 1, 4) and b.mask.shape == (len(ds), L + 1)
    ids = decode(b.frames.numpy())
    starts_a, starts_b = [0, 50, 90], [0, 10, 40, 60]  # the 1-frame episode (10) has no windows
    for w in range(len(ds)):
        store, _ = ds.locate(ds.targets[w:w + 1])
        starts = starts_a if store[0] == 0 else starts_b + [11]
        t = ids[w, -1]
        ep = max(s for s in starts if s <= t)
        real = ids[w][b.mask[w].numpy()]
        assert (ids[w] >= ep).all(), "no frame from an earlier episode"
        np.testing.assert_array_equal(real, np.arange(t - len(real) + 1, t + 1))
        assert (ids[w][~b.mask[w].numpy()] == ep).all(), "padding repeats the episode's first frame"
        assert (b.actions[w][~b.mask[w]] == 0).all(), "padded actions are zero"
    # the first window of an episode: target is its second frame, L-1 padded steps
    first = ds[0]
    assert decode(first.frames.numpy()).tolist() == [0, 0, 0, 0, 1]
    assert first.mask.tolist() == [False, False, False, True, True]
    src = open_store(stores[0]).read_actions(0, 2)
    np.testing.assert_array_equal(first.actions[3:].numpy(), src)
    # every frame but an episode's first is a target; one window per target
    assert len(ds) == (120 - 3) + (80 - 5)


def test_split_is_by_episode_disjoint_and_covers_everything(stores):
    train = WindowDataset(stores, context=2, split="train", val_fraction=0.3)
    val = WindowDataset(stores, context=2, split="val", val_fraction=0.3)
    assert set(train.episodes).isdisjoint(val.episodes)
    assert len(train.episodes) + len(val.episodes) == 7  # 3 + 4 episodes with two frames or more
    assert len(val.episodes) == 2
    # every frame of the train split is reachable through some window
    b = train.__getitems__(np.arange(len(train)))
    seen = set()
    for w in range(len(train)):
        store, _ = train.locate(train.targets[w:w + 1])
        seen.update((int(store[0]), int(i)) for i in decode(b.frames[w].numpy()))
    expected = {(k, i) for k, path in enumerate(stores) for p, a, z in train.episodes
                if p == path for i in range(a, z)}
    assert seen == expected


SPLIT_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from dreamcade.dataset.windows import WindowDataset
ds = WindowDataset({paths!r}, context=2, split="val", val_fraction=0.3)
print(json.dumps([[str(p), a, b] for p, a, b in ds.episodes]))
"""


def test_split_is_the_same_in_two_processes(stores):
    code = SPLIT_SCRIPT.format(root=str(ROOT), paths=[str(p) for p in stores])
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}).stdout
            for seed in ("1", "2")]
    assert outs[0] == outs[1]
    assert len(json.loads(outs[0])) == 2


def test_split_rule():
    assert split_episodes([0.5, 0.1, 0.9], 0.0).tolist() == [False, False, False]
    assert split_episodes([0.5, 0.1, 0.9], 0.1).tolist() == [False, True, False]  # at least one
    assert split_episodes([0.5], 0.5).tolist() == [False]  # never all
    assert split_episodes([0.4, 0.3, 0.2, 0.1], 0.5).tolist() == [False, False, True, True]


def test_ram_and_stream_modes_give_identical_windows(stores):
    ram = WindowDataset(stores, context=4, split="train", mode="ram")
    stream = WindowDataset(stores, context=4, split="train", mode="stream", cache_chunks=2)
    assert ram.mode == "ram" and stream.mode == "stream" and len(ram) == len(stream)
    items = np.random.default_rng(0).permutation(len(ram))
    for chunk in np.array_split(items, 7):
        a, b = ram.__getitems__(chunk), stream.__getitems__(chunk)
        assert torch.equal(a.frames, b.frames) and torch.equal(a.actions, b.actions)
        assert torch.equal(a.mask, b.mask)
    assert stream.nbytes < ram.nbytes
    auto = WindowDataset(stores, context=4, split="train", ram_limit_bytes=1000)
    assert auto.mode == "stream"


def test_float_frames_are_the_model_conversion_of_the_stored_levels(stores):
    from dreamcade.dataset.pixels import to_model, to_uint8

    levels = WindowDataset(stores, context=2, split="all").__getitems__([0, 5])
    floats = WindowDataset(stores, context=2, split="all", as_float=True).__getitems__([0, 5])
    assert floats.frames.dtype == torch.float32 and torch.equal(floats.frames, to_model(levels.frames))
    assert torch.equal(levels.frames_float(), floats.frames) and torch.equal(to_uint8(floats.frames), levels.frames)
    moved = floats.to("cpu")
    assert all(torch.equal(getattr(moved, k), getattr(floats, k)) for k in ("frames", "actions", "mask"))


def test_loader_is_seeded_and_the_same_with_workers(stores):
    ds = WindowDataset(stores, context=3, split="train")
    runs = []
    for workers in (0, 2):
        dl = make_loader(ds, batch_size=16, num_workers=workers, seed=5)
        runs.append([b.frames.clone() for b in dl])
    assert len(runs[0]) == len(ds) // 16
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    other = [b.frames for b in make_loader(ds, batch_size=16, seed=6)]
    assert not torch.equal(other[0], runs[0][0])
    assert not torch.equal(next(iter(make_loader(ds, batch_size=16, seed=5, epoch=1))).frames, runs[0][0])
    # a resumed run skips to the batch where it stopped
    skipped = [b.frames for b in make_loader(ds, batch_size=16, seed=5, skip_batches=3)]
    assert len(skipped) == len(runs[0]) - 3 and torch.equal(skipped[0], runs[0][3])


def test_chunk_block_sampler_is_a_permutation_visiting_chunks_in_blocks(stores):
    ds = WindowDataset(stores, context=2, split="all", mode="stream")
    sampler = ChunkBlockSampler(ds, block=2, seed=0)
    order = list(sampler)
    assert sorted(order) == list(range(len(ds)))
    chunks = ds.target_chunks()[order]
    # the windows of a chunk (at most 8 here) come together, inside one block of 2 chunks
    for c in np.unique(chunks):
        pos = np.flatnonzero(chunks == c)
        assert pos.max() - pos.min() < 16, f"chunk {c} is visited at positions {pos}"
    assert len(np.unique(chunks)) > 10
    assert list(ChunkBlockSampler(ds, block=2, seed=0, epoch=1)) != order, "a new order each epoch"
    dl = make_loader(ds, batch_size=8)
    assert sum(len(b) for b in dl) == (len(ds) // 8) * 8


def test_episode_weighting(stores):
    ds = WindowDataset(stores, context=2, split="all")
    w = ds.weights("episode")
    per_episode = np.bincount(ds.target_ep, weights=w)
    np.testing.assert_allclose(per_episode, 1.0)
    dl = make_loader(ds, batch_size=8, weighting="episode")
    assert sum(len(b) for b in dl) == (len(ds) // 8) * 8
    with pytest.raises(ValueError, match="weighting"):
        make_loader(ds, batch_size=8, weighting="bogus")


def test_dataset_refuses_mixed_specs_sizes_and_missing_val(tmp_path, stores):
    other = ControlSpec((Control("left"),))
    with pytest.raises(StoreError, match=r"a.zarr differs from that of the expected control spec"):
        WindowDataset(stores, context=2, expect_spec=other)
    raw_store(tmp_path / "big.zarr", n=20, size=24)
    with pytest.raises(StoreError, match=r"big.zarr: frames are 24x24 but .*a.zarr has 16x16"):
        WindowDataset([stores[0], tmp_path / "big.zarr"], context=2)
    raw_store(tmp_path / "one.zarr", n=6, starts=(0,))  # one episode too short to split by time (7 frames at L=2)
    with pytest.raises(StoreError, match=r"no val episodes: the stores hold 1 episode, of 6 frames: too few to "
                                         r"hold out its last frames by time \(that takes 7"):
        WindowDataset([tmp_path / "one.zarr"], context=2, split="val")
    with pytest.raises(StoreError, match=r"no val episodes: val_fraction is 0$"):
        WindowDataset(stores, context=2, split="val", val_fraction=0)


# -- one long episode: validation held out by time ------------------------------------------------

def test_one_episode_holds_out_its_last_frames_by_time_with_a_gap_of_the_context(tmp_path):
    """One long episode (a screen recording): the last val_fraction of its frames are validation, the
    L frames before them unused. No training window holds a frame of the validation part, every
    validation window lies inside it, and the two are more than a window (L+1 frames) apart."""
    path = tmp_path / "one.zarr"
    raw_store(path, n=100, starts=(0,))
    L = 3
    train = WindowDataset([path], context=L, split="train", val_fraction=0.2, mode="ram")
    val = WindowDataset([path], context=L, split="val", val_fraction=0.2, mode="ram")
    assert [(a, b) for _, a, b in val.episodes] == [(80, 100)] and [(a, b) for _, a, b in train.episodes] == [(0, 77)]
    t_ids = decode(train.__getitems__(np.arange(len(train))).frames.numpy())  # [N, L+1]
    v = val.__getitems__(np.arange(len(val)))
    v_ids = decode(v.frames.numpy())
    assert len(val) == 19 and len(train) == 76
    assert t_ids.max() == 76 and v_ids.min() == 80, "frames 77-79 unused"
    assert ((v_ids >= 80) & (v_ids < 100)).all(), "validation windows inside their segment"
    assert v_ids.min() - t_ids.max() == L + 1, "no L+1 consecutive frames hold a training and a validation frame"
    assert v_ids[:, -1].tolist() == list(range(81, 100)) and v.mask[0].tolist() == [False, False, True, True]
    assert val.held_out() == f"the last 20% (20 frames, 80-99) of episode 0 of {path}, held out by time"
    # the same split read through windows of another length (eval's transitions), and every time
    pairs = WindowDataset([path], context=1, split="train", val_fraction=0.2, gap=L)
    assert pairs.episodes == train.episodes
    again = WindowDataset([path], context=1, split="val", val_fraction=0.2, gap=L)
    assert again.episodes == val.episodes and again.held_out() == val.held_out()
    assert WindowDataset([path], context=L, split="all").episodes == [(open_store(path).path, 0, 100)]
    # a validation part holds one whole window (L+1 frames) at least
    small = WindowDataset([path], context=L, split="val", val_fraction=0.01)
    assert [(a, b) for _, a, b in small.episodes] == [(96, 100)]
    assert "last 4% (4 frames, 96-99)" in small.held_out()


def test_several_episodes_keep_the_split_by_episode(stores):
    """Stores of several episodes: whole episodes held out, by the episode keys, as before."""
    from dreamcade.dataset.windows import episode_key

    opened = [open_store(p) for p in stores]
    eps = [(s, e) for s in opened for e in s.episodes() if len(e) >= 2]
    is_val = split_episodes([episode_key(s, e.start) for s, e in eps], 0.3)
    expected = [(s.path, e.start, e.stop) for (s, e), v in zip(eps, is_val) if v]
    val = WindowDataset(stores, context=3, split="val", val_fraction=0.3)
    train = WindowDataset(stores, context=3, split="train", val_fraction=0.3)
    assert val.episodes == expected and len(train.episodes) == 5
    share = sum(b - a for _, a, b in val.episodes) / sum(len(e) for _, e in eps)
    assert val.held_out() == f"2 held-out episodes (of 7), {round(100 * share)}% of the frames"
