"""`dreamcade data info STORE...`: what a store holds and anything wrong with it.
`dreamcade data build RAW... --out TRAIN --size 64x64`: a training store from recordings."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from dreamcade.dataset.build import BuildOptions, build
from dreamcade.dataset.controls import BINARY
from dreamcade.dataset.errors import boundary, plural
from dreamcade.dataset.store import Store, StoreError, open_store


def duration_s(t, episodes, fps: float) -> float:
    """Seconds of play: each episode's span plus one frame, summed. A store built from several
    recordings holds clocks that each start again, so the span from its first frame to its last
    is not its length."""
    return round(sum(float(t[e.stop - 1] - t[e.start]) + 1.0 / fps for e in episodes), 3)


def input_use(store: Store) -> tuple[dict | None, dict | None]:
    """(presses of each binary control, fraction of frames in which each continuous control is
    non-zero), from the action rows; (None, None) when they cannot be read (damage is reported
    with the problems). A press is a rise from 0 to 1 within an episode, so a control on in an
    episode's first frame is one press. The rows, not the raw events: they are what a model
    learns from and every store has them, where only a screen recording keeps events (and two
    taps within one frame are one press in the rows)."""
    try:
        actions = store.read_actions()
    except StoreError:
        return None, None
    binary = np.array([c.kind == BINARY for c in store.spec.controls], bool)
    on = actions[:, binary] >= 0.5
    before = np.zeros_like(on)
    before[1:] = on[:-1]
    before[store.episode_starts] = False
    presses = (on & ~before).sum(0)
    moved = (actions[:, ~binary] != 0).mean(0) if len(actions) else np.zeros((~binary).sum())
    names = np.array(store.spec.names)
    return ({str(n): int(k) for n, k in zip(names[binary], presses)},
            {str(n): round(float(f), 3) for n, f in zip(names[~binary], moved)})


def capture_stats(store: Store) -> dict | None:
    """What `record screen` measured (its `capture_stats` attribute), with the fps asked for and
    the fraction of frame deadlines dropped; None for a store without them."""
    stats = store.attrs.get("capture_stats")
    if not isinstance(stats, dict):
        return None
    slots = int(stats.get("captured", 0)) + int(stats.get("dropped", 0))
    return {**stats, "asked_fps": store.fps,
            "dropped_fraction": round(int(stats.get("dropped", 0)) / slots, 3) if slots else 0.0}


def describe(store: Store) -> dict:
    episodes = store.episodes()
    t = store.time
    presses, nonzero = input_use(store)
    return {
        "path": str(store.path),
        "frames": store.n_frames,
        "duration_s": duration_s(t, episodes, store.fps),
        "fps": store.fps,
        "frame_size": f"{store.width}x{store.height}",
        "capture_size": "x".join(map(str, store.attrs.get("capture_size", []))),
        "episodes": len(episodes),
        "episode_frames": {"min": min(map(len, episodes)), "max": max(map(len, episodes))} if episodes else {},
        "source": store.attrs.get("source"),
        "control_spec": store.spec.to_dict(),
        "presses": presses,
        "nonzero_fraction": nonzero,
        "events": int(store.committed.get("events", 0)),
        "capture_stats": capture_stats(store),
        "bytes_on_disk": store.nbytes_on_disk(),
        "software_version": store.attrs.get("software_version"),
        "problems": store.problems(),
    }


def print_info(d: dict) -> None:
    spec = d["control_spec"]
    controls = ", ".join(f"{c['name']}" + ("" if c["kind"] == "binary" else f"[{c['low']:g},{c['high']:g}]")
                         for c in spec["controls"])
    ep = d["episode_frames"]
    rows = [
        ("frames", f"{d['frames']}  ({d['duration_s']:.1f} s at {d['fps']:g} fps)"),
        ("size", f"{d['frame_size']} (captured at {d['capture_size']})"),
        ("episodes", f"{d['episodes']}" + (f"  ({ep['min']}-{ep['max']} frames each)" if ep else "")),
        ("source", json.dumps(d["source"])),
        ("controls", f"{len(spec['controls'])}{' exclusive (one-hot)' if spec['exclusive'] else ''}: {controls}"),
        ("presses", wrap([f"{k} {n}" for k, n in d["presses"].items()]) if d["presses"] else None),
        ("non-zero", wrap([f"{k} {f:.0%}" for k, f in d["nonzero_fraction"].items()], " of frames")
         if d["nonzero_fraction"] else None),
        ("events", str(d["events"])),
        *capture_rows(d["capture_stats"]),
        ("on disk", f"{d['bytes_on_disk'] / 2**20:.2f} MiB"
                    + (f" ({d['bytes_on_disk'] / d['frames']:.0f} bytes/frame)" if d["frames"] else "")),
    ]
    print(d["path"])
    for k, v in rows:
        if v is not None:
            print(f"  {k:<9} {v}")
    for p in d["problems"]:
        print(f"  problem   {p}")


def capture_rows(c: dict | None) -> list[tuple[str, str]]:
    """The rows of what the screen recorder measured: the rate it reached against the one asked
    for, the frames it dropped, why it stopped, and the keys pressed that no control records."""
    if c is None:
        return []
    dropped = int(c.get("dropped", 0))
    rows = [("capture", f"{float(c.get('achieved_fps', 0)):.1f} fps of {c['asked_fps']:g} asked, {dropped} of "
             f"{plural(int(c.get('captured', 0)) + dropped, 'frame')} dropped ({c['dropped_fraction']:.0%}), "
             f"stopped: {c.get('stop_reason') or 'done'}")]
    keys = c.get("unrecorded_keys")
    if isinstance(keys, dict) and keys:
        rows.append(("unmapped", wrap([f"{k} {n}" for k, n in sorted(keys.items(), key=lambda kv: -kv[1])],
                                      " (presses of keys that no control records)")))
    return rows


def wrap(items: list[str], end: str = "") -> str:
    """A row's value: `items` joined by commas, then `end`, on lines of at most 100 characters
    that start under the first (an item is never cut in two)."""
    lines = [""]
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else end)
        if lines[-1] and len(lines[-1]) + 1 + len(piece) > 100 - 12:
            lines.append("")
        lines[-1] += (" " if lines[-1] else "") + piece
    return ("\n" + " " * 12).join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    failed = 0
    out = []
    for path in args.stores:
        try:
            store = open_store(path)
            d = describe(store)
            damaged = store.verify() if args.verify else [d.message for d in store.missing_chunks()]
            d["problems"] += [x for x in damaged if x not in d["problems"]]  # missing files are there already
        except StoreError as e:
            print(f"error: {e}", file=sys.stderr)
            failed += 1
            continue
        failed += bool(damaged)
        out.append(d)
        if not args.json:
            print_info(d)
    if args.json:
        print(json.dumps(out, indent=2))
    return 1 if failed else 0


def parse_ints(text: str, n: int, sep: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.lower().split(sep))
    except ValueError:
        values = ()
    if len(values) != n:
        raise argparse.ArgumentTypeError(f"{what}, got {text!r}")
    return values


MAX_SIDE = 8192  # pixels: an 8K screen; a frame past it is a typo (100000x100000 would be 30 GB)


def parse_size(text: str) -> tuple[int, int]:
    """"64x64" -> (64, 64); "256x144" -> (256, 144) as (width, height), both positive and at
    most MAX_SIDE."""
    w, h = parse_ints(text, 2, "x", "size must be WIDTHxHEIGHT, e.g. 64x64")
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    if max(w, h) > MAX_SIDE:
        raise argparse.ArgumentTypeError(f"size {text!r} is past {MAX_SIDE} pixels a side; a frame that large "
                                         "would not fit in memory (e.g. 256x144)")
    return w, h


def parse_crop(text: str) -> tuple[int, int, int, int]:
    return parse_ints(text, 4, ",", "crop must be X,Y,WIDTH,HEIGHT in source pixels, e.g. 0,20,160,160")


def cmd_build(args: argparse.Namespace) -> int:
    opts = BuildOptions(size=args.size, fps=args.fps, crop=args.crop, action_lag_ms=args.action_lag,
                        drop_idle_s=args.drop_idle, drop_dark=args.drop_dark)
    summary = build(args.raw, args.out, opts, overwrite=args.overwrite, progress=not args.quiet,
                    skip_damaged=args.skip_damaged)
    for line in summary["skipped"]:
        print(f"note: {line}", file=sys.stderr)
    print(f"wrote {summary['out']}: {summary['frames_out']} frames in {plural(summary['episodes_out'], 'episode')} "
          f"at {summary['size']}, {summary['fps']:g} fps (from {summary['frames_in']} frames in "
          f"{plural(summary['episodes_in'], 'episode')})")
    return 0


def build_parser(prog: str = "dreamcade data") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Inspect recording stores and "
                                "build training stores from them.")
    sub = p.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="frames, duration, fps, size, episodes, controls and their presses, what the "
                          "screen recorder measured, bytes, problems",
                          description="Print what each store holds and any problem found: a tail "
                          "left by a killed writer, arrays of different lengths, damaged chunks "
                          "(with --verify). Exit status 1 when a store cannot be opened or has damaged chunks, "
                          "0 when every store is healthy.")
    info.add_argument("stores", nargs="+", metavar="STORE", help="store folders (.zarr)")
    info.add_argument("--verify", action="store_true", help="decode every chunk to find damaged ones (slow)")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.set_defaults(func=cmd_info)
    b = sub.add_parser("build", help="build a training store (size, fps, crop, action lag, idle cut)",
                       description="Build a training store from one or more recordings with the same "
                       "control spec: crop, area-resize, resample the frame rate (actions of skipped "
                       "frames are merged: a held or tapped key stays held, mouse deltas add up), "
                       "shift actions by the input lag, and optionally cut idle stretches and fades "
                       "to black. Episodes are kept; the sources and options are recorded in the "
                       "output's attributes.")
    b.add_argument("raw", nargs="+", metavar="RAW", help="recording stores (.zarr)")
    b.add_argument("--out", required=True, help="training store to write")
    b.add_argument("--size", type=parse_size, required=True,
                   help="WIDTHxHEIGHT of the training frames, any size no larger than the source (e.g. 64x64, "
                   "64x36 for a 16:9 game)")
    b.add_argument("--fps", type=float, default=None,
                   help="target frame rate, the source rate divided by a whole number (default: keep)")
    b.add_argument("--crop", type=parse_crop, default=None, help="X,Y,W,H region of the source frames")
    b.add_argument("--action-lag", type=float, default=0.0, metavar="MS",
                   help="delay actions by this many milliseconds (input latency); the first frames "
                   "of each episode, which have no input yet, are dropped (default: 0)")
    b.add_argument("--drop-idle", type=float, default=None, metavar="SECONDS",
                   help="cut stretches longer than this with no input and no change on screen; "
                   "the frames after one start a new episode")
    b.add_argument("--drop-dark", type=float, default=None, metavar="LEVEL",
                   help="cut frames darker than this mean level (0-255; e.g. 40) and the fade "
                   "into each run of them (a death's fade to black, a loading screen); the "
                   "frames after one start a new episode")
    b.add_argument("--overwrite", action="store_true",
                   help="replace an existing store at --out (the old one stays until the new one is complete)")
    b.add_argument("--skip-damaged", action="store_true",
                   help="leave out episodes that touch a missing or damaged chunk, and say which "
                   "(default: refuse damaged sources)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=cmd_build)
    return p


def main(argv: list[str] | None = None, prog: str = "dreamcade data") -> int:
    args = build_parser(prog).parse_args(argv)
    return boundary(lambda: args.func(args), "interrupted: no store written (what was at --out is as it was)"
                    if args.command == "build" else "interrupted")


if __name__ == "__main__":
    sys.exit(main())
