"""The demo pipeline, run small (the tiny preset, a few hundred frames): every artifact it
promises, and a second run that skips what is done."""

import json

import pytest

from conftest import run_cli
from dreamcade.dataset import open_store
from dreamcade.files.checkpoint import load_model


@pytest.mark.slow
def test_demo_runs_every_stage_then_skips_what_is_done(tmp_path):
    args = ["demo.py", "--out", str(tmp_path), "--frames", "300", "--preset", "tiny", "--horizon", "12",
            "--episodes", "2", "--no-play", "train.steps=6", "train.save_every=3", "train.sample_every=0"]
    first = run_cli(*args, timeout=900).stdout
    for stage in ("record", "build", "train", "eval", "export"):
        assert f"== {stage}\n$ " in first, f"the {stage} stage ran and printed its command"
    raw, train = open_store(tmp_path / "data" / "raw.zarr"), open_store(tmp_path / "data" / "train32x32.zarr")
    assert len(raw) == 300 and raw.closed_cleanly and raw.attrs["source"]["env_id"] == "ALE/Breakout-v5"
    assert train.frame_shape == (32, 32, 3) and len(train) == 300
    run_dir = tmp_path / "runs" / "tiny"
    assert load_model(run_dir)[2]["step"] == "6"
    report = tmp_path / "reports" / "tiny"
    assert (report / "index.html").is_file() and (report / "metrics.json").is_file()
    videos = sorted((report / "videos").glob("episode_*.mp4"))
    assert videos, "the generated-gameplay video"
    times = json.loads((tmp_path / "demo_times.json").read_text())
    assert set(times) == {"record", "build", "train", "eval", "export"} and all(t > 0 for t in times.values())
    for promise in (str(run_dir), str(report / "index.html"), str(videos[0]),
                    f"dreamcade play --checkpoint {tmp_path / 'world'}", "dreamcade eval drift --checkpoint"):
        assert promise in first, f"the summary names {promise}"

    card = (tmp_path / "world" / "README.md").read_text()
    assert "healthy horizon" in card and "of 12 |" in card, "the card carries the report's figures"
    second = run_cli(*args, timeout=900).stdout
    for stage in ("record", "build", "train", "eval", "export"):
        assert f"== {stage}: done already, skipped" in second

    # an unfinished recording (a killed recorder) is recorded again and the training store rebuilt;
    # the finished training is kept
    meta = json.loads((tmp_path / "data" / "raw.zarr" / "zarr.json").read_text())
    meta["attributes"]["closed"] = False
    (tmp_path / "data" / "raw.zarr" / "zarr.json").write_text(json.dumps(meta))
    third = run_cli(*args, timeout=900).stdout
    assert "== record\n$ " in third and "== build\n$ " in third and "== train: done already, skipped" in third
    assert open_store(tmp_path / "data" / "raw.zarr").closed_cleanly


@pytest.mark.slow
def test_screen_demo_records_a_real_game_from_the_screen_and_plays_its_world(tmp_path):
    """SuperTux under Xvfb, played by the bot through xdotool, recorded by `record screen`: the
    whole loop, small (20 s of play, the tiny preset), then the bot plays the world."""
    from dreamcade import demo_game

    if demo_game.missing_programs():
        pytest.skip(f"the screen demo needs {', '.join(demo_game.missing_programs())} "
                    "(Debian: apt-get install supertux xvfb xdotool)")
    args = ["demo.py", "--screen", "--out", str(tmp_path), "--seconds", "20", "--preset", "tiny", "--size", "32x18",
            "--horizon", "12", "train.steps=6", "train.save_every=3", "train.sample_every=0"]
    env = {k: "" for k in ("DISPLAY", "WAYLAND_DISPLAY")}  # no display: the play stage runs in Xvfb
    out = run_cli(*args, timeout=900, env=env).stdout
    for stage in ("record", "build", "train", "eval", "export", "play"):
        assert f"== {stage}\n" in out, f"the {stage} stage ran and printed its command"
    assert "record screen --window SuperTux --controls platformer" in out
    assert "data build" in out and "--drop-dark 40" in out, "the deaths' fades to black are cut"
    raw = open_store(tmp_path / "data" / "raw.zarr")
    assert raw.closed_cleanly and raw.attrs["source"]["kind"] == "screen"
    assert "SuperTux" in raw.attrs["source"]["window"]
    assert len(raw) >= 0.9 * 20 * 15, "20 s at 15 fps, few frames dropped"
    names = list(raw.spec.names)
    actions = raw.actions[: len(raw)]
    for key in ("right", "space"):  # the bot holds right most of the time and jumps often
        assert actions[:, names.index(key)].sum() > 0, f"the bot's {key} presses reached the store"
    assert (tmp_path / "play.mp4").stat().st_size > 0, "the bot played the world, on video"
    second = run_cli(*args, timeout=900, env=env).stdout
    for stage in ("record", "build", "train", "eval", "export", "play"):
        assert f"== {stage}: done already, skipped" in second
