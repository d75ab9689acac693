"""`python -m dataset info STORE...`: what a store holds and anything wrong with it."""

from __future__ import annotations

import argparse
import json
import sys

from dataset.store import Store, StoreError, open_store


def describe(store: Store) -> dict:
    episodes = store.episodes()
    t = store.time
    return {
        "path": str(store.path),
        "frames": store.n_frames,
        "duration_s": round(float(t[-1] - t[0]) + 1.0 / store.fps, 3) if len(t) else 0.0,
        "fps": store.fps,
        "frame_size": f"{store.width}x{store.height}",
        "capture_size": "x".join(map(str, store.attrs.get("capture_size", []))),
        "episodes": len(episodes),
        "episode_frames": {"min": min(map(len, episodes)), "max": max(map(len, episodes))} if episodes else {},
        "source": store.attrs.get("source"),
        "control_spec": store.spec.to_dict(),
        "events": int(store.committed.get("events", 0)),
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
        ("events", str(d["events"])),
        ("on disk", f"{d['bytes_on_disk'] / 2**20:.2f} MiB"
                    + (f" ({d['bytes_on_disk'] / d['frames']:.0f} bytes/frame)" if d["frames"] else "")),
    ]
    print(d["path"])
    for k, v in rows:
        print(f"  {k:<9} {v}")
    for p in d["problems"]:
        print(f"  problem   {p}")


def cmd_info(args: argparse.Namespace) -> int:
    failed = 0
    out = []
    for path in args.stores:
        try:
            store = open_store(path)
            d = describe(store)
            damaged = store.verify() if args.verify else []
            d["problems"] += damaged
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dataset", description=__doc__.split(":")[0] +
                                ": inspect recording and training stores.")
    sub = p.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="frames, duration, fps, size, episodes, controls, bytes, problems",
                          description="Print what each store holds and any problem found: a tail "
                          "left by a killed writer, arrays of different lengths, damaged chunks "
                          "(with --verify). Exit status 1 when a store cannot be opened or has damaged chunks.")
    info.add_argument("stores", nargs="+", metavar="STORE", help="store folders (.zarr)")
    info.add_argument("--verify", action="store_true", help="decode every chunk to find damaged ones (slow)")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.set_defaults(func=cmd_info)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
