"""Screen recorder throughput: achieved fps, dropped frames and CPU use while `record screen`
captures a 1280x720 region and resizes it to 256x144 (30 and 60 fps) and to 64x64 (60 fps).

The benchmark starts its own Xvfb (1280x800) with the square game moving by itself at 1280x720
(something that changes every frame), then runs `dreamcade record screen --duration N` for each
case. The recorder is pinned to one core, the X server and the game to the others, so "cpu" is
the share of that one core the recorder used while recording (process CPU seconds / wall
seconds, all its threads: capture, input listeners, the store writer); "cpu_with_startup" adds
the interpreter start and imports. Goal: 60 fps at 256x144 with no drops on one core.

`python -m bench.recorder [--seconds 30]`
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import report
from dreamcade.dataset import open_store
from dreamcade.record.xvfb import Xvfb

ROOT = Path(__file__).resolve().parents[1]
CASES = (((256, 144), 30.0), ((256, 144), 60.0), ((64, 64), 60.0))
REGION = (0, 0, 1280, 720)


def pin(pid: int, cores: set[int] | None) -> None:
    if cores:
        os.sched_setaffinity(pid, cores)


def start_game(env: dict, cores: set[int] | None) -> subprocess.Popen:
    game = subprocess.Popen([sys.executable, "-m", "dreamcade.record.square_game", "--size", "1280x720", "--auto"],
                            cwd=ROOT, env={**env, "SDL_VIDEO_WINDOW_POS": "0,0", "SDL_AUDIODRIVER": "dummy"},
                            stdout=subprocess.PIPE, text=True)
    pin(game.pid, cores)
    line = game.stdout.readline()
    if "ready" not in line:
        game.kill()
        raise RuntimeError(f"the square game did not start: {line!r}")
    return game


def record(size: tuple[int, int], fps: float, seconds: float, out: Path, env: dict,
           core: set[int] | None) -> dict:
    cmd = [sys.executable, "-m", "dreamcade", "record", "screen", "--region", ",".join(map(str, REGION)),
           "--fps", str(fps), "--size", f"{size[0]}x{size[1]}", "--duration", str(seconds),
           "--controls", "platformer", "--out", str(out), "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=(lambda: pin(0, core)) if core else None)
    _, err = proc.communicate(timeout=seconds + 120)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err}")
    s = open_store(out)
    st = s.attrs["capture_stats"]
    total_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    nbytes = s.nbytes_on_disk()
    return {"size": f"{size[0]}x{size[1]}", "fps_target": fps, "seconds": st["recorded_seconds"],
            "frames": len(s), "achieved_fps": st["achieved_fps"], "dropped": st["dropped"],
            "cpu": st["cpu_fraction"], "cpu_with_startup": round(total_cpu / wall, 4),
            "MB": round(nbytes / 1e6, 2), "bytes_per_frame": round(nbytes / max(1, len(s)))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=30.0, help="recording time per case")
    p.add_argument("--no-pin", action="store_true", help="do not pin the recorder to one core")
    args = p.parse_args()
    if shutil.which("Xvfb") is None:
        raise SystemExit("error: the benchmark needs Xvfb (Debian: apt-get install xvfb)")
    cpus = sorted(os.sched_getaffinity(0))
    core = {cpus[0]} if len(cpus) > 1 and not args.no_pin else None
    others = set(cpus[1:]) if core else None
    rows = []
    root = Path(tempfile.mkdtemp(prefix="bench-recorder-"))
    with Xvfb(1280, 800) as x:
        pin(x.proc.pid, others)
        game = start_game(x.env(), others)
        try:
            for size, fps in CASES:
                out = root / f"{size[0]}x{size[1]}-{fps:g}.zarr"
                rows.append(record(size, fps, args.seconds, out, x.env(), core))
                print(f"  {rows[-1]['size']} at {fps:g} fps: {rows[-1]['achieved_fps']} fps, "
                      f"{rows[-1]['dropped']} dropped, cpu {rows[-1]['cpu']:.0%}", flush=True)
        finally:
            game.kill()
            game.wait()
            shutil.rmtree(root)
    for r in rows:
        r["pinned_to_one_core"] = core is not None
    report("recorder", rows, ["size", "fps_target", "seconds", "frames", "achieved_fps", "dropped",
                              "cpu", "cpu_with_startup", "MB", "bytes_per_frame"])


if __name__ == "__main__":
    main()
