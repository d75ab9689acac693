"""The whole loop in one command: record a real Atari game with the sticky bot, build the
training store, train the `demo` preset, measure its drift, and play it (or, with no display,
point at the generated-gameplay video). `make demo` runs this after setting up the venv.

`--screen` does the same from the screen, as a person records their own game: SuperTux (a
platformer from Debian's packages, installed when missing) runs in a virtual X server, a bot
plays it through xdotool key presses, `dreamcade record screen` records the window with the keys
of the `platformer` profile, and the world trains with the `screen-demo` preset; without a
display the play stage runs in a virtual X server of its own, driven by the same bot, and writes
a video of the session.
`make demo-screen` runs it.

Every stage runs the same command a user would type (printed before it runs), and every stage is
resumable: a finished stage is skipped, an unfinished store is recorded again (and the training
store rebuilt from it), an interrupted training resumes from its last checkpoint, and the report
is redone when the model is newer. Stage times go to <out>/demo_times.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dreamcade import demo_game
from dreamcade.dataset import StoreError, open_store
from dreamcade.dataset.errors import boundary

HOME = Path(__file__).resolve().parents[1]
"""The folder that holds the dreamcade package (a clone's root, or site-packages): each stage
finds the same dreamcade, installed or not, from the user's own folder."""


SCREEN_SECONDS = 240
SCREEN_FPS = 15
SCREEN_RECORD_SIZE = "128x72"
TWO_STAGE_SIZES = {"screen-128": "128x72"}
"""The two-stage presets (model/upsampler.py) and the size their store is built at: the size
the world shows, which the dynamics model reads shrunk."""
TWO_STAGE_SECONDS = {"screen-128": 720}
"""What the screen demo records for a two-stage preset: 4 minutes leave its world without the
player and the action classifier without enough held-out frames (docs/recipe.md#screen-size)."""
SCREEN_DROP_DARK = 40  # SuperTux's deaths fade to black; a world trained on the fades fades for good (docs/recipe.md)
DEFAULTS = {"out": ("demo", "demo-screen"), "size": ("32x32", "64x36"), "preset": ("demo", "screen-demo"),
            "horizon": (1000, 2000)}
"""Option -> (its default for the Atari demo, for the screen demo)."""


def parse_args(argv=None, prog: str = "python demo.py") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--screen", action="store_true", help="record SuperTux from a virtual screen instead of an "
                   "Atari game (default out: demo-screen)")
    p.add_argument("--out", default=None, help="folder for the data, the run and the report (default: demo, "
                   "or demo-screen with --screen)")
    p.add_argument("--game", default="ALE/Breakout-v5", help="gymnasium game to record (default: ALE/Breakout-v5)")
    p.add_argument("--frames", type=int, default=20000, help="frames to record (default: 20000, 22 minutes of play)")
    p.add_argument("--seconds", type=int, default=None, help="--screen: seconds of play to record "
                   f"(default: {SCREEN_SECONDS}, or {TWO_STAGE_SECONDS['screen-128']} with --preset screen-128)")
    p.add_argument("--size", default=None, help="training frame size (default: 32x32, or 64x36 with --screen, or "
                   "128x72 with --preset screen-128: the size its two-stage world shows)")
    p.add_argument("--preset", default=None, help="config preset in configs/ (default: demo, or screen-demo "
                   "with --screen)")
    p.add_argument("--horizon", type=int, default=None, help="rollout length of the drift report (default: 1000, "
                   "or 2000 with --screen)")
    p.add_argument("--episodes", type=int, default=8, help="held-out episodes rolled out (default: 8)")
    p.add_argument("--no-play", action="store_true", help="do not open the play window at the end")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="training config overrides, e.g. train.steps=500")
    args = p.parse_args(argv)
    if args.size is None and args.preset in TWO_STAGE_SIZES:  # the store at the size the world shows
        args.size = TWO_STAGE_SIZES[args.preset]
    if args.seconds is None:
        args.seconds = TWO_STAGE_SECONDS.get(args.preset, SCREEN_SECONDS)
    for name, (atari, screen) in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, screen if args.screen else atari)
    return args


def check_args(args: argparse.Namespace) -> None:
    """Every option checked before the first stage runs (a size the build would refuse must not
    cost a recording first); StoreError names the option."""
    from dreamcade.dataset.__main__ import parse_size
    from dreamcade.dataset.build import BuildOptions

    for option, value in (("--frames", args.frames), ("--horizon", args.horizon), ("--episodes", args.episodes),
                          ("--seconds", args.seconds)):
        if value < 1:
            raise StoreError(f"{option} {value}: must be at least 1")
    try:
        size = parse_size(args.size)
    except argparse.ArgumentTypeError as e:
        raise StoreError(f"--size: {e}") from None
    BuildOptions(size=size).check()


def run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    """Run one stage's command as a user would, from the folder the demo runs in (with `env` added
    to the environment, shown before the command); stop on failure."""
    shown = " ".join([*(f"{k}={v}" for k, v in (env or {}).items()), "python", *cmd])
    print(f"\n== {what}\n$ {shown}", flush=True)
    path = os.pathsep.join(p for p in (str(HOME), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, *cmd], env={**os.environ, **(env or {}), "PYTHONPATH": path})
    if proc.returncode != 0:
        raise SystemExit(f"error: the {what} stage failed (exit {proc.returncode}); fix what it said and run "
                         "the demo again: finished stages are skipped")


def store_done(path: Path, frames: int | None = None) -> bool:
    """A store that opens, was closed cleanly and (when given) holds `frames` frames."""
    try:
        s = open_store(path)
    except StoreError:
        return False
    return s.closed_cleanly and (frames is None or len(s) == frames)


def newer(a: Path, b: Path) -> bool:
    """True when file a was written after file b (a stage's output after its input)."""
    return a.is_file() and b.is_file() and a.stat().st_mtime >= b.stat().st_mtime


def model_step(run_dir: Path) -> int | None:
    from dreamcade.files.checkpoint import CheckpointError, load_model

    try:
        return int(load_model(run_dir)[2]["step"])
    except CheckpointError:
        return None


def has_display() -> bool:
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def main(argv=None, prog: str = "python demo.py") -> int:
    args = parse_args(argv, prog)
    return boundary(lambda: demo(args), "interrupted: finished stages are kept; run the demo again to go on")


def demo(args: argparse.Namespace) -> int:
    from dreamcade.files.config_file import load_config

    out = Path(args.out).resolve()
    raw, train_store = out / "data" / "raw.zarr", out / "data" / f"train{args.size}.zarr"
    run_dir, report = out / "runs" / args.preset, out / "reports" / args.preset
    overrides = [f"name={args.preset}", f"out_dir={out / 'runs'}", *args.overrides]
    check_args(args)
    cfg = load_config(args.preset, overrides)
    times: dict[str, float] = {}

    def stage(name: str, done: bool, cmd: list[str], runner=run) -> None:
        if done:
            print(f"\n== {name}: done already, skipped")
            return
        t0 = time.perf_counter()
        runner(cmd, name)
        times[name] = round(time.perf_counter() - t0, 1)

    if args.screen:
        stage("record", screen_store_done(raw, args.seconds),
              ["-m", "dreamcade", "record", "screen", "--window", demo_game.WINDOW, "--controls", "platformer",
               "--fps", str(SCREEN_FPS), "--size", SCREEN_RECORD_SIZE, "--duration", str(args.seconds),
               "--out", str(raw), "--overwrite", "--quiet"], runner=record_screen)
    else:
        stage("record", store_done(raw, args.frames),
              ["-m", "dreamcade", "record", "env", "--env", args.game, "--policy", "sticky", "--steps",
               str(args.frames), "--out", str(raw), "--overwrite"])
    built = store_done(train_store) and newer(train_store / "zarr.json", raw / "zarr.json")
    cut = ["--drop-dark", str(SCREEN_DROP_DARK)] if args.screen else []
    stage("build", built,
          ["-m", "dreamcade", "data", "build", str(raw), "--size", args.size, *cut, "--out", str(train_store),
           "--overwrite"])
    resume = ["--resume"] if (run_dir / "checkpoints" / "latest").exists() else []
    stage("train", model_step(run_dir) == cfg.train.steps,
          ["-m", "dreamcade", "train", "--config", args.preset, "--data", str(train_store), *overrides, *resume])
    stage("eval", newer(report / "metrics.json", run_dir / "model" / "config.json"),
          ["-m", "dreamcade", "eval", "drift", "--checkpoint", str(run_dir), "--horizon", str(args.horizon),
           "--episodes", str(args.episodes), "--out", str(report), "--overwrite"])
    world = out / "world"
    stage("export", newer(world / "world.json", report / "metrics.json"),
          ["-m", "dreamcade", "export", str(run_dir), "--out", str(world), "--report", str(report), "--overwrite"])
    clip = out / "play.mp4"
    if args.screen and not args.no_play and not has_display():
        stage("play", newer(clip, world / "world.json"),
              ["-m", "dreamcade", "play", "--checkpoint", str(world), "--frames", str(PLAY_FRAMES), "--seed", "0",
               "--video", str(clip), "--overwrite"], runner=play_screen)
    times_file = out / "demo_times.json"
    old = json.loads(times_file.read_text()) if times_file.is_file() else {}
    times_file.write_text(json.dumps({**old, **times}, indent=2))

    videos = sorted((report / "videos").glob("episode_*.mp4"))
    print(f"\nThe demo is ready.\n  checkpoint: {run_dir}\n  report:     {report / 'index.html'}")
    if videos:
        print(f"  video:      {videos[0]}  (real | generated)")
    if clip.is_file():
        print(f"  played:     {clip}  (the bot playing the world)")
    print(f"  world:      {world}  (to share: it plays with nothing else; its card is README.md)\n"
          f"  play again: dreamcade play --checkpoint {world}\n"
          f"  evaluate:   dreamcade eval drift --checkpoint {run_dir} --out {report} --overwrite")
    if args.no_play:
        return 0
    if not has_display():
        print("\nNo display here, so no play window: watch the generated gameplay in the video above.")
        return 0
    run(["-m", "dreamcade", "play", "--checkpoint", str(world)], "play")
    return 0


# -- the screen demo's stages --------------------------------------------------------------------

PLAY_FRAMES = 600
"""Frames the bot plays of the world in the screen demo's play stage (40 s at the data's 15 frames/s,
longer where the CPU makes fewer: docs/benchmarks.md#play-loop)."""


def screen_store_done(path: Path, seconds: int) -> bool:
    """A recording closed cleanly that ran its --duration of `seconds` (one stopped early, by the
    game ending or a Ctrl-C, is recorded again; dropped frames are data info's to show)."""
    if not store_done(path):
        return False
    stats = open_store(path).attrs.get("capture_stats") or {}
    return stats.get("stop_reason") == "duration reached" and stats.get("recorded_seconds", 0) >= seconds - 1


def record_screen(cmd: list[str], what: str) -> None:
    """Install the game when missing, start it in a virtual X server, let the bot play, and run
    the recorder (`cmd`) on that screen until its --duration is over."""
    from dreamcade.record.xvfb import Xvfb

    demo_game.install_missing()
    with Xvfb(*demo_game.SCREEN) as x, demo_game.Game(x.display) as game:
        time.sleep(1.0)
        demo_game.xdotool(x.display, "key", "Return")  # past the level's title card
        bot = demo_game.Bot(x.display, seed=0).start()
        try:
            run(cmd, what, env={"DISPLAY": x.display})
        finally:
            bot.stop()
        if not game.running:
            print("note: the game ended before the recording did (the recorder stopped with it)")
        print(f"the bot pressed: {', '.join(f'{k} {n}x' for k, n in sorted(bot.presses.items()))}")


def play_screen(cmd: list[str], what: str) -> None:
    """Play the world in a virtual X server (no display here), the bot at its keys; the session's
    video is the stage's output."""
    from dreamcade.record.xvfb import Xvfb

    with Xvfb(*demo_game.SCREEN) as x:
        demo_game.xdotool(x.display, "mousemove", "40", "40")  # over the window: it gets the keys
        bot = demo_game.Bot(x.display, seed=1).start()
        try:
            run(cmd, what, env={"DISPLAY": x.display, "SDL_VIDEO_WINDOW_POS": "0,0", "SDL_AUDIODRIVER": "dummy"})
        finally:
            bot.stop()


if __name__ == "__main__":
    sys.exit(main())
