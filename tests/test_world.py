"""A world you can share: `dreamcade export` writes a self-contained world folder (diffusers'
layout, safetensors only, start contexts, model card) that play and eval load on a machine that
has never seen the recordings; one `dreamcade` command spells every job."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, in_process, run_cli
from dreamcade.dataset import open_store

SMALL = ["--horizon", "20", "--episodes", "2", "--idm-steps", "30", "--windows", "32", "--bank", "200",
         "--threads", "1", "--quiet"]


def dreamcade(*args: str, check: bool = True, cwd: Path = ROOT):
    proc = subprocess.run([sys.executable, "-m", "dreamcade", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"dreamcade {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny block-game run (4 steps) and its store, in a folder of their own."""
    tmp = tmp_path_factory.mktemp("world")
    data = tmp / "block.zarr"
    dreamcade("record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "600", "--quiet",
              "--out", str(data))
    dreamcade("train", "--config", "tiny", "--data", str(data), f"out_dir={tmp}", "train.steps=4",
              "train.sample_every=0", "--quiet")
    return tmp / "tiny", data


@pytest.fixture
def no_pickle(monkeypatch):
    """torch.load fails: whatever loads a world must not unpickle."""
    def refuse(*args, **kwargs):
        raise AssertionError("torch.load (a pickle) was called")
    monkeypatch.setattr(torch, "load", refuse)


def test_a_world_plays_and_is_evaluated_alone_and_never_unpickles(run, tmp_path, monkeypatch, no_pickle):
    run_dir, data = run
    made = tmp_path / "made"
    out = in_process("export", str(run_dir), "--out", str(made / "world")).stdout
    assert "play it with `dreamcade play --checkpoint" in out
    # another machine: the folder copied, the recordings and the run gone
    there = tmp_path / "elsewhere"
    shutil.copytree(made / "world", there / "world")
    shutil.rmtree(made)
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    run_dir.rename(hidden / "run")
    data.rename(hidden / "block.zarr")
    try:
        world = there / "world"
        assert sorted(p.name for p in world.iterdir()) == ["README.md", "model", "reference.zarr", "world.json"]
        assert sorted(p.name for p in (world / "model").iterdir()) == ["config.json", "diffusion_pytorch_model.safetensors"]
        from dreamcade.model.denoiser import Denoiser
        w = Denoiser.from_pretrained(str(world), subfolder="model")  # the field's loader, as any diffusers model
        assert w.config.context == 2 and w.frame_size == (16, 16)
        monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
        monkeypatch.chdir(tmp_path)
        import dreamcade.play.__main__ as play
        assert play.main(["--checkpoint", str(world), "--frames", "50", "--save", str(tmp_path / "s.zarr"),
                          "--seed", "0", "--threads", "1"]) == 0
        session = open_store(tmp_path / "s.zarr")
        assert len(session) >= 50 and session.spec == w.spec
        from dreamcade.eval.__main__ import main as eval_main
        assert eval_main(["drift", "--checkpoint", str(world), "--session", str(tmp_path / "s.zarr"),
                          "--out", str(tmp_path / "report"), "--precision", "no", "--no-channels-last", *SMALL]) == 0
        m = json.loads((tmp_path / "report" / "metrics.json").read_text())
        assert len(m["sessions"]["sequences"]) == 1 and 0 <= m["sessions"]["healthy_horizon"]["min"] <= len(session)
        assert m["data"] == [str((world / "reference.zarr").resolve())]
    finally:
        (hidden / "run").rename(run_dir)
        (hidden / "block.zarr").rename(data)


def test_the_world_folder_holds_what_it_says(run, tmp_path):
    run_dir, data = run
    world = tmp_path / "world"
    dreamcade("export", str(run_dir), "--out", str(world), "--episodes", "3", "--frames", "40")
    cfg = json.loads((world / "model" / "config.json").read_text())
    assert cfg["_class_name"] == "Denoiser" and cfg["context"] == 2 and cfg["frame_size"] == [16, 16]
    assert cfg["_dreamcade"]["step"] == 4 and cfg["_dreamcade"]["config"]["data"]["context"] == 2
    assert cfg["control_spec"] == open_store(data).spec.to_dict()
    ref = open_store(world / "reference.zarr")
    assert len(ref.episodes()) == 3 and all(len(e) == 40 for e in ref.episodes())
    assert ref.attrs["source"] == open_store(data).attrs["source"]  # play rebuilds the real game from it
    first = ref.episodes()[0]
    src = open_store(data)
    held = [e for e in src.episodes() if np.array_equal(src.read_frames(e.start, e.start + 40),
                                                        ref.read_frames(first.start, first.stop))]
    assert held, "the reference frames are the recording's own, unchanged"
    size = sum(p.stat().st_size for p in (world / "reference.zarr").rglob("*") if p.is_file())
    assert size < 5 << 20
    info = json.loads((world / "world.json").read_text())
    assert info["data"]["frames"] == len(src) and info["step"] == 4 and info["game"] == "dreamcade/Block-v0"
    card = (world / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: diffusers\n")
    for text in ("dreamcade/Block-v0", f"{len(src):,} frames", "4 steps", "one-step PSNR", "healthy horizon",
                 "action following", "dreamcade train --config", "dreamcade export"):
        assert text in card, text


def test_the_card_names_a_screen_recorded_game_by_its_window(run, tmp_path):
    import yaml
    import zarr

    run_dir, data = run
    for source, game in (({"window": "SuperTux: Milestone 1", "window_class": "supertux2"}, "SuperTux: Milestone 1"),
                         ({"window": "", "window_class": "supertux2"}, "supertux2"),
                         ({"region": [0, 0, 320, 240]}, "a screen recording")):
        screen = tmp_path / f"{game[:5]}.zarr"
        shutil.copytree(data, screen)
        zarr.open_group(str(screen), mode="r+").attrs["source"] = {"kind": "screen", **source, "capture": "mss"}
        world = tmp_path / f"{game[:5]} world"
        in_process("export", str(run_dir), "--data", str(screen), "--out", str(world), "--episodes", "1",
                   "--frames", "20")
        card = (world / "README.md").read_text()
        assert json.loads((world / "world.json").read_text())["game"] == game
        assert f"# tiny: a dreamcade world of {game}\n" in card and f"| game | {game} |" in card, card
        assert "| start contexts | 1 episode, 20 frames" in card, card
        tags = yaml.safe_load(card.split("---\n")[1])["tags"]
        assert tags[3:] == ([] if game == "a screen recording" else [game]), tags


def test_the_card_carries_the_reports_action_following(run, tmp_path):
    """Exported with the report of an eval whose classifier reads the block's moves, the card
    gives the action following with the keys it is scored on, the ceiling and chance."""
    from dreamcade.files.world import scored_on

    run_dir, _ = run
    report = tmp_path / "report"
    in_process("eval", "drift", "--checkpoint", str(run_dir), "--out", str(report), "--horizon", "20", "--episodes",
               "2", "--idm-steps", "300", "--windows", "32", "--bank", "200", "--threads", "1", "--quiet")
    m = json.loads((report / "metrics.json").read_text())
    a, c = m["rollouts"]["action_following"], m["reference"]["action_classifier"]
    assert a["unmeasured"] is None, c
    keys = a["per_key"]  # each action: how often the classifier reads it where it was given, and where not
    n = 20 * len(m["rollouts"]["episodes"])  # one action a transition: each is held in one key's count
    assert list(keys) == c["scored_controls"] and sum(k["held"] for k in keys.values()) == n, keys
    assert any(k["real_shown_when_held"] > k["real_shown_when_not_held"] for k in keys.values()
               if k["real_shown_when_held"] is not None), keys
    assert "Each key: of the transitions that held it" in (report / "index.html").read_text()
    in_process("export", str(run_dir), "--out", str(tmp_path / "world"), "--report", str(report), "--episodes", "1",
               "--frames", "20")
    card = (tmp_path / "world" / "README.md").read_text()
    assert (f"| action following | {a['accuracy']:.3f}{scored_on(c)} (real-data ceiling {a['ceiling']:.3f}, "
            f"chance {a['chance']:.3f}) |") in card, card


def test_export_refuses_what_would_lose_or_mislead(run, tmp_path):
    run_dir, data = run
    for out, says in ((data / "w", "lies inside the input"), (data, "is the input"),
                      (run_dir.parent, "contains the input")):
        proc = in_process("export", str(run_dir), "--out", str(out), "--overwrite", check=False)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert open_store(data).verify() == [] and (run_dir / "model" / "config.json").is_file()
    world = tmp_path / "world"
    in_process("export", str(run_dir), "--out", str(world))
    proc = in_process("export", str(run_dir), "--out", str(world), check=False)
    assert proc.returncode == 2 and "--overwrite" in proc.stderr
    proc = in_process("export", str(world), "--out", str(tmp_path / "again"), check=False)
    assert proc.returncode == 2 and "is a world folder already" in proc.stderr
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "keep.txt").write_text("mine")
    proc = in_process("export", str(run_dir), "--out", str(tmp_path / "plain"), "--overwrite", check=False)
    assert proc.returncode == 2 and "not a world folder" in proc.stderr
    assert (tmp_path / "plain" / "keep.txt").read_text() == "mine"


def test_a_cut_short_world_is_called_so(run, tmp_path):
    run_dir, _ = run
    world = tmp_path / "world"
    in_process("export", str(run_dir), "--out", str(world))
    weights = world / "model" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    proc = run_cli("play.py", "--checkpoint", str(world), "--frames", "2", check=False,
                   env={"SDL_VIDEODRIVER": "dummy"})
    assert proc.returncode == 2 and "truncated" in proc.stderr and str(weights) in proc.stderr


JOBS = ["record", "data", "train", "distill", "play", "eval", "export", "demo"]


def test_dreamcade_lists_the_jobs_in_order_and_each_job_has_its_help():
    out = dreamcade("--help").stdout  # the installed command, once
    assert [line.split()[0] for line in out.splitlines() if line.startswith("  ")] == JOBS
    for job in JOBS:
        proc = in_process(job, "--help")
        assert proc.stdout.startswith(f"usage: dreamcade {job}"), proc.stdout[:200]
    for job in ("record env", "record screen", "data build", "data info", "eval drift", "eval sweep"):
        assert in_process(*job.split(), "--help").stdout.startswith(f"usage: dreamcade {job}")
    proc = in_process("nosuchjob", check=False)
    assert proc.returncode == 2 and "record, data, train" in proc.stderr


def every_parser() -> list:
    """The argument parser of every job and subcommand, as the commands build them (their
    parse_args is stopped before it reads anything)."""
    import argparse
    import importlib

    from dreamcade.cli import JOBS as jobs

    class Built(Exception):
        pass

    def stop(self, *args, **kwargs):
        seen.append(self)
        raise Built

    seen, out = [], []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(argparse.ArgumentParser, "parse_args", stop)
        mp.setattr(argparse.ArgumentParser, "parse_intermixed_args", stop)
        for name, module, _ in jobs:
            try:
                importlib.import_module(module).main([], prog=f"dreamcade {name}")
            except Built:
                pass

    def walk(p):
        out.append(p)
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    walk(sub)
    for p in seen:
        walk(p)
    return out


def test_every_option_of_every_command_says_what_it_does():
    """Generated from the parsers, so no option can be added without its help (the docs point
    at --help for the option lists)."""
    parsers = every_parser()
    assert {p.prog for p in parsers} >= {"dreamcade record env", "dreamcade record screen", "dreamcade data build",
                                         "dreamcade train", "dreamcade distill", "dreamcade play", "dreamcade eval drift",
                                         "dreamcade eval sweep", "dreamcade eval video", "dreamcade export", "dreamcade demo"}
    bare = [f"{p.prog} {'/'.join(a.option_strings) or a.dest}" for p in parsers for a in p._actions
            if a.help is None and a.dest != "help" and not a.__class__.__name__.startswith("_SubParsers")]
    assert bare == []


def test_help_imports_neither_torch_nor_pygame():
    """--help of every job is instant: nothing heavy is imported before the work starts."""
    code = ("import sys; from dreamcade.cli import main\n"
            f"for job in {JOBS!r}:\n"
            "    try: main([job, '--help'])\n"
            "    except SystemExit: pass\n"
            "print(sorted(m for m in ('torch', 'pygame', 'diffusers', 'accelerate') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-300:]


def test_presets_and_profiles_are_found_by_name_from_any_folder(tmp_path):
    code = ("from dreamcade.files.config_file import load_config; from dreamcade.record.screen import load_profile; "
            "print(load_config('demo').name, load_config('configs/tiny.yaml').name, len(load_profile('fps')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:2] == ["demo", "tiny"]


def test_clips_of_the_window_and_of_a_saved_session(run, tmp_path):
    import imageio.v3 as iio

    run_dir, _ = run
    gif, mp4, session = tmp_path / "window.gif", tmp_path / "window.mp4", tmp_path / "s.zarr"
    play = ["play.py", "--checkpoint", str(run_dir), "--frames", "20", "--scale", "4", "--no-real", "--seed", "0",
            "--threads", "1"]
    run_cli(*play, "--video", str(gif), "--save", str(session), env={"SDL_VIDEODRIVER": "dummy"})
    frames = open_store(session).read_frames(0, len(open_store(session)))
    shown = iio.imread(gif)
    assert shown.shape[1:] == (64, 64, 3)  # the window's scale, the game panel only
    generated = frames[-20:].repeat(4, axis=1).repeat(4, axis=2)
    kept = [0] + [i for i in range(1, 20) if not np.array_equal(generated[i], generated[i - 1])]
    assert np.array_equal(shown, generated[kept]), "the clip is what the window showed, frame for frame"
    run_cli(*play, "--video", str(mp4), "--video-hud", env={"SDL_VIDEODRIVER": "dummy"})
    hud = iio.imread(mp4, plugin="pyav")
    assert len(hud) == 20 and hud.shape[1] > 64  # the HUD lines under the game

    out = tmp_path / "session.gif"
    said = run_cli("-m", "dreamcade", "eval", "video", str(session), "--out", str(out), "--scale", "2").stdout
    assert f"wrote {out}: {len(frames)} frames" in said
    big = frames.repeat(2, axis=1).repeat(2, axis=2)
    kept = [0] + [i for i in range(1, len(big)) if not np.array_equal(big[i], big[i - 1])]
    assert np.array_equal(iio.imread(out), big[kept])  # a GIF shows a repeated frame once, for longer
    run_cli("-m", "dreamcade", "eval", "video", str(session), "--out", str(tmp_path / "s.mp4"), "--frames", "7")
    assert len(iio.imread(tmp_path / "s.mp4", plugin="pyav")) == 7
    for args, says in (([str(out)], "already exists"), ([str(tmp_path / "x.avi")], "a .mp4 or a .gif")):
        proc = run_cli("-m", "dreamcade", "eval", "video", str(session), "--out", *args, check=False)
        assert proc.returncode == 2 and says in proc.stderr
    proc = run_cli(*play, "--video", str(gif), env={"SDL_VIDEODRIVER": "dummy"}, check=False)
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_wandb_offline_gets_the_sample_grids_and_rollout_videos(run, tmp_path):
    _, data = run
    run_cli("train.py", "--config", "tiny", "--data", str(data), f"out_dir={tmp_path}", "train.steps=4",
            "train.sample_every=2", "log.wandb=offline", "--quiet",
            env={"WANDB_MODE": "offline", "WANDB_SILENT": "true", "HOME": str(tmp_path)})
    wandb_run, = (tmp_path / "tiny" / "wandb").glob("offline-run-*")
    media = wandb_run / "files" / "media"
    assert len(list((media / "images" / "samples").glob("grid_*.png"))) == 2
    assert len(list((media / "videos" / "samples").glob("rollout_*.mp4"))) == 2
    assert list(wandb_run.glob("*.wandb")), "the offline run log, for `wandb sync`"
