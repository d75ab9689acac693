"""The web page's speed in a real browser on this machine: a world exported with
`dreamcade export --web` (dreamcade/web), served locally and played in headless Chromium as fast
as it can (?pace=0) with WebAssembly on one thread and on as many as the page takes (2 on 2
cores, cross-origin isolated by its service worker), a key held throughout; frames/s and ms per frame over the
measured frames (after a warm-up), the time from the page's load to its first frame, the
folder's size, and the frames whose last 30 were outside the world's health band.

With no path: random-init models of the demo preset (32x32) and screen-128 (128x72, two stages),
each stage drawing in 1 step as a distilled student does (speed does not depend on training;
their health column means nothing). With paths (run, world or web folders of trained worlds):
those, as they are.
Goals on 2 CPU cores: the demo in 1 step at 30 frames/s or more, screen-128 with both stages in 1
step at 10; the first frame within 3 s of the load; the demo's folder at most 20 MB.

`python -m bench.web [PATH ...] [--frames 300]`
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.common import report

GOAL_FPS = {(32, 32): 30.0, (72, 128): 10.0}
"""(height, width) -> frames/s with every stage in 1 step."""
GOAL_FIRST_MS, GOAL_MB = 3000.0, 20.0


def random_world(preset: str, folder: Path) -> Path:
    """A random-init run of `preset` with every stage in 1 step, exported as a web folder."""
    from bench.play import make_checkpoint
    from dreamcade.web.folder import export_web

    run, store = make_checkpoint(preset, folder, one_step=True)
    out = folder / f"{preset}-web"
    export_web(run, out, data=[str(store)])
    return out


def web_folder(path: Path, folder: Path) -> Path:
    from dreamcade.web.folder import export_web, is_web

    if is_web(path):
        return path
    out = folder / f"{path.name}-web"
    export_web(path, out)
    return out


def measure(page: Path, frames: int, one_thread: bool) -> dict:
    """Play the page in headless Chromium as fast as it can, the right arrow held (on one
    WebAssembly thread, or as many as the page takes)."""
    from dreamcade.web.browser import Browser, Server

    server = Server(page)
    try:
        with Browser() as b:
            b.open(server.url + "?pace=0&seed=0" + ("&threads=1" if one_thread else ""))
            first = b.wait("r.frames >= 1", 120)
            b.key("right", True)
            warm = max(10, frames // 10)
            b.wait(f"r.frames >= {warm}", 300)
            n0, t0 = b.report()["frames"], time.perf_counter()
            r = b.wait(f"r.frames >= {n0 + frames}", 600, poll=0.2)
            seconds = time.perf_counter() - t0
            b.key("right", False)
    finally:
        server.close()
    info = json.loads((page / "web.json").read_text())
    size = sum(f.stat().st_size for f in page.rglob("*") if f.is_file())
    h, w = info["size"]
    steps = " + ".join(str(s["steps"]) for s in info["stages"])
    fps = (r["frames"] - n0) / seconds
    goal = GOAL_FPS.get((h, w)) if all(s["steps"] == 1 for s in info["stages"]) else None
    return {"world": info["name"], "frame": f"{w}x{h}", "steps": steps, "backend": r["backend"], "fps": fps,
            "ms_per_frame": r["ms_per_frame"], "first_frame_ms": first["first_frame_ms"], "MB": size / 1e6,
            "out_of_band_frames": r["health"]["out_frames"], "frames": r["frames"], "goal_fps": goal,
            "meets_goal": None if goal is None else fps >= goal and first["first_frame_ms"] <= GOAL_FIRST_MS
            and ((h, w) != (32, 32) or size / 1e6 <= GOAL_MB)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", type=Path, help="run, world or web folders (default: random-init demo and "
                   "screen-128 models in 1 step)")
    p.add_argument("--frames", type=int, default=300, help="frames measured per world (after a warm-up)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pages = ([web_folder(path, Path(tmp)) for path in args.paths] if args.paths else
                 [random_world(preset, Path(tmp)) for preset in ("demo", "screen-128")])
        for page in pages:
            for one_thread in (True, False):
                rows.append(measure(page, args.frames, one_thread))
    report("web", rows, ["world", "frame", "steps", "backend", "fps", "ms_per_frame", "first_frame_ms", "MB",
                         "out_of_band_frames", "goal_fps", "meets_goal"])


if __name__ == "__main__":
    main()
