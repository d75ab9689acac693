"""train.py end to end on tiny data: artifacts, resume after SIGKILL, refusals, learning."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT, in_process, one_episode_store, run_cli
from dreamcade.dataset import Control, ControlSpec, StoreWriter, WindowDataset
from dreamcade.dataset import open_store
from dreamcade.files.checkpoint import latest_checkpoint, load_model
from dreamcade.model.world_env import WorldModelEnv
from dreamcade.model.sampler import next_frame

FAST = ["model.channels=[8,16]", "model.cond_dim=32", "model.action_dim=8", "train.batch_size=4",
        "train.eval_every=1000", "train.sample_every=0", "train.log_every=5"]


def train_cli(*args, check=True, **kw):
    return run_cli("train.py", *args, "--quiet", check=check, **kw)


@pytest.mark.slow
def test_tiny_run_writes_every_artifact(tmp_path, block_store):
    train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
              "train.steps=20", "train.sample_every=10", "train.eval_every=10")
    run = tmp_path / "tiny"
    assert (run / "config.yaml").is_file() and (run / "model" / "config.json").is_file()
    stats = [json.loads(line) for line in (run / "stats.jsonl").read_text().splitlines()]
    train_rows = [r for r in stats if "train/loss" in r]
    val_rows = [r for r in stats if "val/loss" in r]
    assert [r["step"] for r in train_rows] == [5, 10, 15, 20]
    assert all(math.isfinite(r["train/loss"]) and r["train/samples_per_s"] > 0 for r in train_rows)
    assert [r["step"] for r in val_rows] == [10, 20]
    assert {"val/psnr", "val/psnr_repeat_last"} <= set(val_rows[0])
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_00000010", "step_00000020"]
    assert (run / "checkpoints" / "latest").read_text() == "step_00000020"
    samples = sorted(p.name for p in (run / "samples").iterdir())
    assert samples == ["grid_00000010.png", "grid_00000020.png", "rollout_00000010.mp4", "rollout_00000020.mp4"]
    import imageio.v3 as iio
    video = iio.imread(run / "samples" / "rollout_00000020.mp4", plugin="pyav")
    assert video.shape == (8, 64, 128, 3)  # 8 frames, real | generated, upscaled 4x
    model, cfg, meta = load_model(run)
    assert meta["step"] == "20" and cfg.train.steps == 20 and model.spec.names[0] == "NOOP"
    assert all(k in meta for k in ("format", "format_version", "software_version"))
    saved = json.loads((run / "model" / "config.json").read_text())  # the model's own arguments
    assert saved["frame_size"] == [16, 16] and saved["control_spec"] == model.spec.to_dict()
    # a second start under the same name is refused; --resume at the end does nothing more
    proc = train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}", check=False)
    assert proc.returncode == 2 and "a run of this name exists; pass --resume" in proc.stderr
    proc = train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}", "--resume")
    assert "resuming from" in proc.stderr and "at step 20" in proc.stderr


@pytest.mark.slow
def test_dry_run_and_refusals_before_any_work(tmp_path, block_store):
    out = train_cli("--config", "configs/tiny.yaml", "--dry-run", "train.steps=3").stdout
    assert "steps: 3" in out and "channels:" in out
    proc = train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
                     "train.stpes=3", check=False)
    assert proc.returncode == 2 and "train has no key 'stpes'" in proc.stderr
    assert not (tmp_path / "tiny").exists(), "nothing is created when the config is refused"
    proc = train_cli("--config", "configs/tiny.yaml", f"out_dir={tmp_path}", check=False)
    assert proc.returncode == 2 and "no training data" in proc.stderr
    proc = train_cli("--config", "configs/tiny.yaml", "--data", str(tmp_path / "none.zarr"), f"out_dir={tmp_path}",
                     check=False)
    assert proc.returncode == 2 and "none.zarr: no such store" in proc.stderr
    proc = train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
                     "--resume", check=False)
    assert proc.returncode == 2 and "nothing to resume" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_resume_with_other_data_is_refused(tmp_path, block_store):
    train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
              "train.steps=2", "train.save_every=2", *FAST)
    other = tmp_path / "other.zarr"
    spec = ControlSpec((Control("jump"), Control("duck")))
    with StoreWriter(other, spec=spec, fps=15, frame_size=(16, 16), source={}) as w:
        for t in range(40):
            if t % 10 == 0:
                w.begin_episode()
            w.append(np.full((16, 16, 3), t, np.uint8), [t % 2, 0], t / 15)
    proc = train_cli("--config", "configs/tiny.yaml", "--data", str(other), f"out_dir={tmp_path}",
                     "--resume", "train.steps=4", *FAST, check=False)
    assert proc.returncode == 2
    assert "control spec of the training data differs from that of the checkpoint" in proc.stderr


def test_sigusr1_prints_where_a_training_is_and_it_goes_on(tmp_path, block_store):
    """For a run that seems hung: `kill -USR1 PID` writes every thread's stack to stderr and the
    training goes on (dataset.errors.where_on_usr1); Ctrl-C then stops it as always."""
    cmd = [sys.executable, "train.py", "--config", "configs/tiny.yaml", "--data", str(block_store),
           f"out_dir={tmp_path}", "train.steps=100000", "train.save_every=0", *FAST, "--quiet"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []

        def read_until(text: str) -> None:
            while not lines or text not in lines[-1]:
                lines.append(proc.stderr.readline())
                assert lines[-1], f"the run ended before '{text}':\n" + "".join(lines)

        read_until("parameters")  # the line before the first step
        os.kill(proc.pid, signal.SIGUSR1)
        read_until("Current thread")
        read_until(os.path.join("dreamcade", "training", "loop.py"))  # where the training is
        time.sleep(0.5)
        assert proc.poll() is None, "the run went on after printing where it was"
        os.kill(proc.pid, signal.SIGINT)
        err = "".join(lines) + proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted: the run keeps its last checkpoint" in err, err


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path, block_store):
    args = ["--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
            "train.steps=300", "train.save_every=20", "train.keep_checkpoints=2", *FAST]
    train_cli(*args, "name=straight")
    cmd = [sys.executable, "train.py", *args, "name=killed", "--quiet"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpts = tmp_path / "killed" / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and not (ckpts / "step_00000040").exists():
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = latest_checkpoint(tmp_path / "killed")
    assert saved is not None and saved.name != "step_00000300", "killed before the end"
    # leftovers of a kill mid-write are never loaded
    (ckpts / ".tmp-step_99999999-1").mkdir(exist_ok=True)
    (ckpts / "step_99999998").mkdir()  # no state.json: incomplete
    state_before = load_file(str(saved / "optimizer.safetensors"))
    ema_before = load_file(str(saved / "ema.safetensors"))
    step = json.loads((saved / "state.json").read_text())["step"]
    # what resuming restores is the saved state, value for value
    from dreamcade.files.checkpoint import load_training_state
    from dreamcade.files.config_file import load_config
    from dreamcade.model.ema import make_ema
    from dreamcade.model.denoiser import Denoiser
    from dreamcade.training.parts import make_optimizer
    cfg = load_config("configs/tiny.yaml", FAST)
    fresh = Denoiser.build(cfg.model, cfg.diffusion, open_store(block_store).spec, cfg.data.context, (16, 16))
    ema, opt = make_ema(fresh), make_optimizer(fresh, cfg)
    load_training_state(saved, fresh, ema, opt)
    assert all(torch.equal(v, ema_before[k]) for k, v in ema.state_dict().items())
    restored = {f"{pid}.{k}": v for pid, st in opt.state_dict()["state"].items() for k, v in st.items()}
    assert restored.keys() == state_before.keys()
    assert all(torch.equal(torch.as_tensor(v), state_before[k]) for k, v in restored.items())
    t_resume = time.time()
    res = train_cli(*args, "name=killed", "--resume")
    assert f"at step {step}" in res.stderr
    stats = [json.loads(line) for line in (tmp_path / "killed" / "stats.jsonl").read_text().splitlines()]
    resumed_steps = [r["step"] for r in stats if "train/loss" in r and r["time"] >= t_resume]
    assert resumed_steps == list(range(step + 5, 301, 5)), "the resumed run logs from the step after its checkpoint"
    a = load_file(str(tmp_path / "straight" / "model" / "diffusion_pytorch_model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "model" / "diffusion_pytorch_model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs between the uninterrupted and the resumed run"
    oa = load_file(str(latest_checkpoint(tmp_path / "straight") / "optimizer.safetensors"))
    ob = load_file(str(latest_checkpoint(tmp_path / "killed") / "optimizer.safetensors"))
    assert oa.keys() == ob.keys() and all(torch.equal(oa[k], ob[k]) for k in oa)


def direction_accuracy(model, cfg, ds) -> tuple[float, float, float]:
    """Model and repeat-last PSNR over the whole held-out set, and how often the generated block
    moves the way the action says, among the cases where the real block moved."""
    b = ds.__getitems__(np.arange(len(ds)))
    f, L = b.frames_float(), cfg.data.context
    with torch.no_grad():
        out = next_frame(model, f[:, :L], b.actions[:, :L], b.mask[:, :L], cfg.sampler, torch.Generator().manual_seed(0))
    psnr = lambda x, y: -10 * math.log10(((x - y) ** 2).mean().item() / 4)

    def centre(x):
        m = (x[:, 0] > 0.5).float()  # the yellow block's red channel
        ys = torch.arange(x.shape[-2]).float()[None, :, None]
        xs = torch.arange(x.shape[-1]).float()[None, None, :]
        n = m.sum((1, 2)).clamp_min(1)
        return torch.stack([(m * xs).sum((1, 2)) / n, (m * ys).sum((1, 2)) / n], 1)

    prev, true, pred = centre(f[:, L - 1]), centre(f[:, L]), centre(out)
    action = b.actions[:, L - 1].argmax(1)
    axis_sign = {1: (0, -1), 2: (0, 1), 3: (1, -1), 4: (1, 1)}  # LEFT RIGHT UP DOWN
    moved = torch.nonzero((true - prev).abs().sum(1) > 0.5).flatten().tolist()
    hits = [float((pred[i] - prev[i])[axis_sign[int(action[i])][0]] * axis_sign[int(action[i])][1] > 0.5)
            for i in moved]
    return psnr(out, f[:, L]), psnr(f[:, L - 1], f[:, L]), float(np.mean(hits)), len(hits)


@pytest.mark.slow
def test_learns_the_block_game_and_follows_the_action(tmp_path, block_store):
    """About a minute of CPU training: one-step PSNR beats repeating the last frame by 4 dB, and
    the generated block moves the way the given action says in at least 90% of held-out moves."""
    train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
              "train.steps=800", "train.batch_size=16", "train.eval_every=100000", "train.sample_every=0",
              "train.save_every=100000", "optim.lr=0.002", "diffusion.context_noise_max=0.1", "data.val_fraction=0",
              timeout=600)
    model, cfg, _ = load_model(tmp_path / "tiny")
    held_out = tmp_path / "held_out.zarr"  # another seed: episodes the model never saw
    run_cli("-m", "dreamcade", "record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "600",
            "--max-hold", "6", "--seed", "2", "--quiet", "--out", str(held_out))
    val = WindowDataset([held_out], context=cfg.data.context, split="all")
    p_model, p_last, acc, n = direction_accuracy(model, cfg, val)
    print(f"block game: model {p_model:.2f} dB, repeat-last {p_last:.2f} dB, direction {acc:.1%} of {n}")
    assert n > 100
    assert p_model > p_last + 4.0, f"model {p_model:.2f} dB vs repeat-last {p_last:.2f} dB"
    assert acc >= 0.9, f"the block moved the right way in {acc:.0%} of {n} held-out moves"


@pytest.mark.slow
def test_learns_a_real_atari_game_beyond_repeating_the_last_frame(tmp_path):
    """Breakout at 32x32 from the sticky bot, scored on a recording with another seed, from the
    real past without context noise. About a minute of CPU training (1,200 steps) brings the
    one-step prediction above repeating the last frame (measured: 45.85 vs 42.83 dB; the scene
    is redrawn to the 8-bit level), 7 dB above the mean frame, and 2 dB above the untrained
    model (whose residual output starts near a copy). With the residual base taken from the
    clean frame (before the context noise) the same 1,200 steps reached only 42.66 to 42.81 dB
    (train seeds 0, 1, 2; the same with or without context noise when generating): it failed this
    test. The noisy base is what lets it beat the copy."""
    store, held_out = tmp_path / "breakout.zarr", tmp_path / "held_out.zarr"
    for path, seed, steps in ((store, 0, 2000), (held_out, 1, 400)):  # held out: another seed
        run_cli("-m", "dreamcade", "record", "env", "--env", "ALE/Breakout-v5", "--steps", str(steps), "--size", "32x32",
                "--seed", str(seed), "--quiet", "--out", str(path))
    val = WindowDataset([held_out], context=2, split="all")
    b = val.__getitems__(np.arange(len(val)))
    f = b.frames_float()
    psnr = lambda x, y: -10 * math.log10(((x - y) ** 2).mean().item() / 4)
    mean_frame = torch.from_numpy(open_store(store).read_frames()).float().mean(0).permute(2, 0, 1)
    mean_frame = (mean_frame / 127.5 - 1)[None]
    p_mean, p_last = psnr(mean_frame.expand_as(f[:, 2]), f[:, 2]), psnr(f[:, 1], f[:, 2])
    scores = []
    for steps in (1, 1200):
        model, cfg = train_model(tmp_path, store, steps)
        cfg.sampler.context_noise = 0.0  # the prediction from the real past as it is
        with torch.no_grad():
            out = next_frame(model, f[:, :2], b.actions[:, :2], b.mask[:, :2], cfg.sampler,
                                 torch.Generator().manual_seed(0))
        scores.append(psnr(out, f[:, 2]))
    untrained, trained = scores
    print(f"untrained {untrained:.2f} dB, trained {trained:.2f}, repeat-last {p_last:.2f}, mean frame {p_mean:.2f}")
    assert trained > p_last + 1.0, f"trained {trained:.2f} dB vs repeat-last {p_last:.2f}"
    assert trained > p_mean + 5, f"trained {trained:.2f} dB vs the mean frame's {p_mean:.2f}"
    assert trained > untrained + 1.0, f"trained {trained:.2f} dB vs untrained {untrained:.2f}"


def train_model(tmp_path, store, steps):
    name = f"atari{steps}"
    train_cli("--config", "configs/tiny.yaml", "--data", str(store), f"out_dir={tmp_path}", f"name={name}",
              f"train.steps={steps}", "train.batch_size=16", "train.eval_every=100000", "train.sample_every=0",
              "train.save_every=100000", "optim.lr=0.002", "diffusion.sigma_data=0.25", "data.val_fraction=0",
              "diffusion.offset_noise=0.0", "diffusion.context_noise_max=0.1", timeout=600)
    model, cfg = load_model(tmp_path / name)[:2]
    return model, cfg


@pytest.mark.slow
def test_a_rollout_removes_a_blob_of_noise_from_its_context(tmp_path, block_store):
    """The residual base is the last frame as the network sees it (context noise included), so
    the model learns to correct its base. Rolled out from a context whose last frame carries a
    6x6 blob of random pixels, it removes the blob within a few steps: PSNR to the rollout from
    the clean context (same actions, same noise) is measured at 34 dB after 8 steps and 43 dB
    after 16 (mean of 6 held-out episodes). With the base taken from the clean frame, the same
    training left the blob in place: 16.8 and 17.4 dB."""
    train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
              "train.steps=800", "train.batch_size=16", "train.eval_every=100000", "train.sample_every=0",
              "train.save_every=100000", "optim.lr=0.002", "data.val_fraction=0", timeout=600)
    model, cfg, _ = load_model(tmp_path / "tiny")
    held_out = tmp_path / "held_out.zarr"
    run_cli("-m", "dreamcade", "record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "600",
            "--max-hold", "6", "--seed", "2", "--quiet", "--out", str(held_out))
    ds = WindowDataset([held_out], context=2, split="all")
    rng = np.random.default_rng(0)
    scores = {8: [], 16: []}
    for ep in range(6):
        frames, actions = ds.episode_steps(ep, 18)
        clean = frames[None, :2]
        blob = clean.copy()
        y, x = rng.integers(0, 10, 2)
        blob[0, -1, y:y + 6, x:x + 6] = rng.integers(0, 256, (6, 6, 3))
        runs = []
        for context in (clean, blob):
            env = WorldModelEnv(model, cfg.sampler, seed=0)
            env.reset(context, actions[None, :1])
            runs.append(np.stack([env.step(actions[None, 1 + t])[0].numpy() for t in range(16)]))
        for k in scores:
            err = ((runs[0][k - 1].astype(float) - runs[1][k - 1].astype(float)) / 255) ** 2
            scores[k].append(-10 * math.log10(max(err.mean(), 1e-10)))
    at8, at16 = np.mean(scores[8]), np.mean(scores[16])
    print(f"blob removal: PSNR to the clean rollout {at8:.1f} dB after 8 steps, {at16:.1f} after 16")
    assert at8 > 27.0, f"the blob is still there after 8 steps ({at8:.1f} dB to the clean rollout)"
    assert at16 > 33.0, f"the blob is still there after 16 steps ({at16:.1f} dB to the clean rollout)"


@pytest.mark.slow
def test_a_tiny_model_rolled_out_2000_steps_on_the_block_game_keeps_its_healthy_horizon(tmp_path, block_store):
    """Trained about a minute (2,400 steps) and sampled in 4 steps, then driven 2,000 steps by
    the recorded actions of 3 held-out episodes: every 100-step window stays in the band of the
    real frames. The store's identity is fixed (conftest's block_store), so the held-out episodes
    are the same in every run: with a fresh recording's identity each run drew another split (the
    one thing that changed between runs: training is the same bit for bit at a given split and
    thread count), and this test failed in 2 of a few full suites (one episode left the band at
    200 or 1,200 steps by the nearest real frame). The fixed split and seven others, each trained
    on one thread: 2,000 in every episode, PSNR 27.0 to 45.9 dB pooled against the frozen frame's
    13.0 to 13.6.
    The same training with the residual base taken from the clean frame left the band within
    the first window in every episode. In 2 sampler steps this model's frames are grainy
    (colour distance 0.014, nearest 0.019: the band is left at once); with the 16-bin colour
    histogram of before, any band was left at once (the real block frames all have the same
    histogram, a band of [0, 0])."""
    train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
              "train.steps=2400", "train.batch_size=16", "train.eval_every=100000", "train.sample_every=0",
              "train.save_every=100000", "optim.lr=0.002", "sampler.steps=4", timeout=900)
    run_cli("-m", "dreamcade", "eval", "drift", "--checkpoint", str(tmp_path / "tiny"), "--horizon", "2000", "--episodes", "3",
            "--videos", "0", "--idm-steps", "300", "--out", str(tmp_path / "report"), "--quiet", timeout=600)
    r = json.loads((tmp_path / "report" / "metrics.json").read_text())["rollouts"]
    hh = r["healthy_horizon"]
    print(f"healthy horizon {hh['per_episode']} of 2000, left by {hh['left_by']}")
    assert len(hh["per_episode"]) == 3 and hh["of"] == [2000] * 3
    assert hh["per_episode"] == [2000] * 3, f"left the band at {hh['per_episode']} by {hh['left_by']}"
    assert r["psnr"]["pooled"] > r["frozen_frame"]["psnr"]["pooled"] + 10


def error_levels(model, sampler, windows, steps: int, seeds: int = 3) -> float:
    """Mean absolute difference in 8-bit levels between `model`'s next frames (in `steps`
    sampler steps, no hold) and the real ones, over `seeds` draws of the noise."""
    from dataclasses import replace

    frames, out = windows.frames_float(), []
    for seed in range(seeds):
        gen = next_frame(model, frames[:, :-1], windows.actions[:, :-1], windows.mask[:, :-1],
                         replace(sampler, steps=steps, hold_levels=0), torch.Generator().manual_seed(seed))
        out.append(((gen - frames[:, -1]).abs() * 127.5).mean().item())
    return float(np.mean(out))


@pytest.mark.slow
def test_a_distilled_one_step_student_closes_most_of_the_gap_to_its_four_step_teacher(tmp_path, block_store):
    """The tiny model of the 2,000-step test (4 sampler steps) is grainy in 1 step: on held-out
    windows its frames are 2.46 levels from the real ones in 1 step, 1.05 in 4. Distilled into 1
    step (600 iterations, about a minute, through the training loop), the student is 1.45 levels
    from them: it closes 71% of the gap (a student of 1 iteration, the teacher's copy: none of it). Its long sessions are
    not asserted: this 0.2 M-parameter student leaves the healthy band at 100 to 300 steps (by
    colour) where its teacher holds 2,000; the demo's student holds 10,000 (docs/distill.md).
    The recording has a fixed identity (conftest's block_store), so its train/validation split
    and every figure here are the same in every run."""
    train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
              "train.steps=2400", "train.batch_size=16", "train.eval_every=100000", "train.sample_every=0",
              "train.save_every=100000", "optim.lr=0.002", "sampler.steps=4", "train.threads=1", timeout=900)
    run_cli("-m", "dreamcade", "distill", "--checkpoint", str(tmp_path / "tiny"), "--steps", "1", "--iterations", "600",
            "--batch-size", "16", "--lr", "0.001", "--threads", "1", "--quiet", timeout=900)
    student_run = tmp_path / "tiny-1step"
    assert {"model", "config.yaml", "distill.json", "stats.jsonl", "world"} <= {
        p.name for p in student_run.iterdir()}
    teacher, tcfg, _ = load_model(tmp_path / "tiny")
    student, scfg, meta = load_model(student_run)
    assert scfg.sampler.steps == 1 and tcfg.sampler.steps == 4
    assert json.loads(meta["distilled"])["teacher_steps"] == 4
    val = WindowDataset([open_store(block_store)], context=tcfg.data.context, split="val")
    windows = val.__getitems__(np.linspace(0, len(val) - 1, 256).astype(int))
    one, four = error_levels(teacher, tcfg.sampler, windows, 1), error_levels(teacher, tcfg.sampler, windows, 4)
    distilled = error_levels(student, tcfg.sampler, windows, 1)
    closed = (one - distilled) / (one - four)
    print(f"levels from the real frames: teacher in 1 step {one:.3f}, in 4 {four:.3f}; student in 1 {distilled:.3f} "
          f"({closed:.0%} of the gap closed)")
    assert one > four + 0.5, "the teacher in 1 step should be grainy: no gap to close"
    assert closed > 0.5, (one, four, distilled)


def test_a_students_target_is_the_teachers_guided_frame():
    """With guidance on the input the teacher's sample a student learns is the guided one, rescaled
    as the teacher rescales it: a student that is the teacher, sampled as the teacher samples, has
    no loss; sampled without the guidance or without its rescale it has."""
    import copy

    from dreamcade.dataset import Control, ControlSpec
    from dreamcade.dataset.batch import Batch
    from dreamcade.files.config_file import load_config
    from dreamcade.model.denoiser import Denoiser
    from dreamcade.training.distill import distill_loss

    cfg = load_config("configs/tiny.yaml", ["diffusion.action_drop=0.1", "sampler.guidance=2",
                                            "sampler.guidance_rescale=0.7"])
    torch.manual_seed(0)
    teacher = Denoiser.build(cfg.model, cfg.diffusion, ControlSpec((Control("left"), Control("right"))),
                             cfg.data.context, (16, 16))
    for p in teacher.parameters():  # an untrained network's last layer is zero: give it something to say
        p.data += 0.05 * torch.randn_like(p)
    student = copy.deepcopy(teacher)
    g = torch.Generator().manual_seed(0)
    L = cfg.data.context
    batch = Batch(torch.randint(0, 256, (4, L + 1, 3, 16, 16), dtype=torch.uint8, generator=g),
                  torch.randint(0, 2, (4, L + 1, 2), generator=g).float(), torch.ones(4, L + 1, dtype=torch.bool))
    loss = lambda student_sampler: float(distill_loss(teacher, student, batch, cfg.sampler, student_sampler,
                                                      torch.Generator().manual_seed(1)))
    assert loss(cfg.sampler) == 0 and loss(replace(cfg.sampler, guidance=1.0)) > 1e-6
    assert loss(replace(cfg.sampler, guidance_rescale=0.0)) > 1e-6


def test_a_rollout_student_follows_the_teachers_session_from_the_same_noises():
    """--rollout N: the student's frames fed back to it and the teacher's to the teacher. The
    teacher as its own student, sampled alike, has no loss along 3 steps (both sides draw the
    same noises and keys); a 1-step student has, and its first step's share is the 1-frame loss
    drawn from the same seed, so what the later steps add is their own."""
    import copy

    from dreamcade.dataset import Control, ControlSpec
    from dreamcade.dataset.batch import Batch
    from dreamcade.files.config_file import load_config
    from dreamcade.model.denoiser import Denoiser
    from dreamcade.training.distill import distill_loss

    cfg = load_config("configs/tiny.yaml", ["sampler.steps=3", "diffusion.motion_weight=2"])
    torch.manual_seed(0)
    teacher = Denoiser.build(cfg.model, cfg.diffusion, ControlSpec((Control("left"), Control("right"))),
                             cfg.data.context, (16, 16))
    for p in teacher.parameters():  # an untrained network's last layer is zero: give it something to say
        p.data += 0.05 * torch.randn_like(p)
    g = torch.Generator().manual_seed(0)
    L = cfg.data.context
    batch = Batch(torch.randint(0, 256, (4, L + 1, 3, 16, 16), dtype=torch.uint8, generator=g),
                  torch.randint(0, 2, (4, L + 1, 2), generator=g).float(), torch.ones(4, L + 1, dtype=torch.bool))
    one = replace(cfg.sampler, steps=1)
    loss = lambda student, sampler, n: distill_loss(teacher, student, batch, cfg.sampler, sampler,
                                                    torch.Generator().manual_seed(1), rollout=n)
    assert float(loss(copy.deepcopy(teacher), cfg.sampler, 3)) == 0
    student = copy.deepcopy(teacher).requires_grad_(True)
    first, three = float(loss(student, one, 1)), loss(student, one, 3)
    assert first > 1e-6 and float(three) * 3 - first > 1e-6
    three.backward()
    assert all(p.grad is not None for p in student.parameters() if p.requires_grad)


def test_distill_writes_a_student_run_and_refuses_what_it_cannot_do(tmp_path, block_store):
    """A few iterations from a random-init teacher (speed, not learning: the slow test above
    learns): the student's run folder loads like any run, with its steps and its origin."""
    from dreamcade.files.checkpoint import save_model
    from dreamcade.files.config_file import load_config
    from dreamcade.model.denoiser import Denoiser

    cfg = load_config("configs/tiny.yaml", ["sampler.steps=3", "sampler.method=heun", "diffusion.action_drop=0.1",
                                            "sampler.guidance=2", "sampler.guidance_rescale=0.7",
                                            f"data.stores={json.dumps([str(block_store)])}"])
    teacher = tmp_path / "teacher"
    spec = open_store(block_store).spec
    save_model(teacher, Denoiser.build(cfg.model, cfg.diffusion, spec, cfg.data.context, (16, 16)), cfg, 7)
    distill = lambda *a, check=True: run_cli("-m", "dreamcade", "distill", "--checkpoint", str(teacher), *a, "--quiet",
                                             check=check)
    proc = distill("--steps", "3", check=False)
    assert proc.returncode == 2 and "--steps 3: the student needs at least 1 sampler step and fewer than the " \
                                    "teacher's 3" in proc.stderr
    proc = distill("--iterations", "2", "--batch-size", "4", "--threads", "1")
    assert "one-step PSNR on" in proc.stderr
    run = tmp_path / "teacher-1step"
    model, scfg, meta = load_model(run)
    record = json.loads(meta["distilled"])
    assert scfg.sampler.steps == 1 and scfg.name == "teacher-1step" and meta["step"] == "7"
    assert scfg.sampler.method == "euler"  # a Heun teacher's student: one network call a step
    assert scfg.sampler.guidance == 1, "it learns the teacher's guided frames: one call a step, not two"
    assert scfg.sampler.guidance_rescale == 0
    assert model.diffusion.action_drop == 0 == scfg.diffusion.action_drop, "so guidance is refused on it"
    assert record["teacher"] == str(teacher) and record["iterations"] == 2 and record["teacher_steps"] == 3
    assert record["teacher_method"] == "heun" and record["teacher_guidance"] == 2
    assert record["teacher_guidance_rescale"] == 0.7
    card = (run / "world" / "README.md").read_text()
    assert "distilled from" in card and f"dreamcade distill --checkpoint {teacher} --steps 1" in card
    assert "(3 sampler steps, heun, guidance 2 on the input, rescaled 0.7, trained 7 steps)" in card, card
    assert "1 sampler steps (euler) |" in card
    in_process("export", str(teacher), "--out", str(tmp_path / "teacher-world"), "--episodes", "1", "--frames", "8")
    assert "3 sampler steps (heun, guidance 2 on the input, rescaled 0.7) |" in (tmp_path / "teacher-world" / "README.md").read_text()
    proc = distill("--iterations", "2", check=False)
    assert proc.returncode == 2 and "a run of this name exists" in proc.stderr
    # train on from that student along the teacher's session: it starts from the student's weights
    on_proc = distill("--init", str(run), "--rollout", "2", "--iterations", "1", "--batch-size", "4",
                      "--lr", "1e-12", "--threads", "1", "--name", "on")
    on, _, on_meta = load_model(tmp_path / "on")
    apart = lambda a, b: max(float((x.float() - y.float()).abs().max()) for x, y in zip(a.state_dict().values(),
                                                                                         b.state_dict().values()))
    assert apart(on, model) < 1e-8 < 1e-6 < apart(model, load_model(teacher)[0])
    record = json.loads(on_meta["distilled"])
    assert record["rollout"] == 2 and record["init"] == str(run)
    card = (tmp_path / "on" / "world" / "README.md").read_text()
    assert f"--rollout 2 --init {run}" in card
    assert f"in 1 iterations along 2 frames of the teacher's session from the student {run}, " in card
    assert "note: --rollout" not in proc.stderr + on_proc.stderr
    err = in_process("distill", "--checkpoint", str(teacher), "--rollout", "3", "--name", "teacher", check=False).stderr
    assert err.startswith("note: --rollout 3 starts from the teacher's own weights;") and "pass it as --init" in err
    assert "error: --name/--out-dir" in err, "a note, then the refusal as before"
    proc = distill("--rollout", "0", check=False)
    assert proc.returncode == 2 and "--rollout 0: at least 1" in proc.stderr
    other = tmp_path / "other"
    save_model(other, Denoiser.build(replace(cfg.model, channels=[8, 16]), cfg.diffusion, spec, cfg.data.context,
                                     (16, 16)), cfg, 1)
    proc = distill("--init", str(other), "--name", "x", check=False)
    assert proc.returncode == 2 and f"--init {other}: its network is not the teacher's" in proc.stderr
    for into in (["--name", "teacher"], ["--name", "x", "--out-dir", str(teacher)]):  # never into the teacher
        err = in_process("distill", "--checkpoint", str(teacher), *into, "--iterations", "1", check=False).stderr
        assert err.startswith("error: --name/--out-dir") and str(teacher) in err, err
    assert (teacher / "model" / "config.json").is_file() and not (teacher / "x").exists()
    proc = run_cli("-m", "dreamcade", "distill", "--checkpoint", str(tmp_path / "nothing"), check=False)
    assert proc.returncode == 2 and "no such checkpoint" in proc.stderr


@pytest.mark.slow
def test_a_distillation_runs_through_the_training_loop_and_resumes_to_the_same_weights(tmp_path, block_store):
    """distill is a Task of the one loop: it checkpoints, and a student stopped at iteration 2
    and resumed to 4 ends with the weights of one distilled to 4 without a stop."""
    from dreamcade.files.checkpoint import save_model
    from dreamcade.files.config_file import load_config
    from dreamcade.model.denoiser import Denoiser

    cfg = load_config("configs/tiny.yaml", ["sampler.steps=3", "train.save_every=2",
                                            f"data.stores={json.dumps([str(block_store)])}"])
    teacher = tmp_path / "teacher"
    torch.manual_seed(0)
    save_model(teacher, Denoiser.build(cfg.model, cfg.diffusion, open_store(block_store).spec, cfg.data.context,
                                       (16, 16)), cfg, 7)
    distill = lambda name, n, *a: run_cli("-m", "dreamcade", "distill", "--checkpoint", str(teacher), "--name", name,
                                         "--iterations", str(n), "--batch-size", "4", "--threads", "1", "--quiet", *a)
    distill("whole", 4)
    distill("stopped", 2)
    assert (tmp_path / "stopped" / "checkpoints" / "step_00000002" / "state.json").is_file()
    distill("stopped", 4, "--resume")
    weights = "model/diffusion_pytorch_model.safetensors"
    a, b = load_file(str(tmp_path / "whole" / weights)), load_file(str(tmp_path / "stopped" / weights))
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses = [json.loads(line) for line in (tmp_path / "stopped" / "stats.jsonl").read_text().splitlines()]
    assert any("distill/loss" in x for x in losses)



def test_a_one_episode_store_trains_with_validation_held_out_by_time(tmp_path):
    """A single recording still gets validation: its last frames, held out by time; the log has
    val/ figures and the world's card measured them."""
    store = one_episode_store(tmp_path / "one.zarr")
    proc = in_process("train", "--config", "configs/tiny.yaml", "--data", str(store), f"out_dir={tmp_path}",
                      "train.steps=4", "train.eval_every=2", "train.sample_every=0", "train.threads=1", *FAST[:3],
                      "--quiet")
    assert (f"validation: the last 20% (24 frames, 96-119) of episode 0 of {open_store(store).path}, held out by time"
            in proc.stderr)
    assert "23 validation" in proc.stderr
    stats = [json.loads(line) for line in (tmp_path / "tiny" / "stats.jsonl").read_text().splitlines()]
    assert [r["step"] for r in stats if "val/loss" in r] == [2, 4]
    assert json.loads((tmp_path / "tiny" / "world" / "world.json").read_text())["training"]["val_psnr"] is not None
