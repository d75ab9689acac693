"""Data at recording scale: a real Atari recording (Breakout, sticky bot) of N frames at
256x144, built to 64x64, then read for training. Each stage runs in its own process, so its
time and peak memory are its own: record, build, the training windows in RAM and streamed
(setup time, windows/s, memory), and the time from starting train.py (atari-64 preset,
streaming) to its first optimizer step. `python -m bench.scale --frames 400000`
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import report
from dreamcade.record.status import folder_bytes

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], stop_when=None) -> tuple[float, float]:
    """Run `python args...` in the repository root; (seconds, peak memory in MiB) of that process
    alone. `stop_when()` true ends it early (SIGTERM), timed at that moment."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seconds = None
    while stop_when is not None and proc.poll() is None:
        if stop_when():
            seconds = time.perf_counter() - t0
            proc.terminate()
            break
        time.sleep(0.05)
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read().decode(errors="replace")
    seconds = seconds if seconds is not None else time.perf_counter() - t0
    if stop_when is None and os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{out}")
    return seconds, usage.ru_maxrss / 1024


def loader_child(path: str, mode: str, seconds: float, batch: int) -> None:
    """In its own process: open the training windows in `mode`, then read batches for `seconds`."""
    from bench.loader import measure, rss_mib
    from dreamcade.dataset import WindowDataset

    before = rss_mib()
    t0 = time.perf_counter()
    ds = WindowDataset([path], context=4, split="train", mode=mode)
    setup = time.perf_counter() - t0
    held = rss_mib() - before
    rate = measure(ds, 0, seconds, batch)
    print(json.dumps({"windows": len(ds), "setup_s": setup, "windows_per_s": rate, "held_MiB": held,
                      "rss_MiB": rss_mib()}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--frames", type=int, nargs="+", default=[20000, 400000], help="recording lengths")
    p.add_argument("--seconds", type=float, default=10.0, help="loader measuring time per mode")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--keep", metavar="DIR", help="keep the stores in DIR (default: a temporary folder)")
    p.add_argument("--loader-child", nargs=2, metavar=("STORE", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.loader_child:
        return loader_child(*args.loader_child, args.seconds, args.batch)
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in args.frames:
            raw, built, runs = root / f"raw{n}.zarr", root / f"b64_{n}.zarr", root / f"runs{n}"
            row = {"frames": n}
            if not (raw / "zarr.json").is_file():
                row["record_s"], row["record_MiB"] = run(
                    ["-m", "dreamcade", "record", "env", "--env", "ALE/Breakout-v5", "--policy", "sticky", "--steps", str(n),
                     "--size", "256x144", "--quiet", "--out", str(raw)])
            row["raw_store_MiB"] = folder_bytes(raw) / 2**20
            row["build_s"], row["build_MiB"] = run(["-m", "dreamcade", "data", "build", str(raw), "--size", "64x64",
                                                    "--out", str(built), "--overwrite"])
            row["built_store_MiB"] = folder_bytes(built) / 2**20
            for mode in ("ram", "stream"):
                out = subprocess.run([sys.executable, "-m", "bench.scale", "--loader-child", str(built), mode,
                                      "--seconds", str(args.seconds), "--batch", str(args.batch)], cwd=ROOT,
                                     capture_output=True, text=True, check=True).stdout
                m = json.loads(out.strip().splitlines()[-1])
                row["windows"] = m["windows"]
                row[f"{mode}_setup_s"], row[f"{mode}_windows_per_s"] = m["setup_s"], m["windows_per_s"]
                row[f"{mode}_MiB"] = m["rss_MiB"]
            shutil.rmtree(runs, ignore_errors=True)
            stats = runs / "first" / "stats.jsonl"
            start = time.time()
            run(["train.py", "--config", "atari-64", "--data", str(built), f"out_dir={runs}", "name=first",
                 "data.mode=stream", "train.log_every=1", "train.eval_every=0", "train.sample_every=0",
                 "train.save_every=0", "--quiet"],
                stop_when=lambda: stats.is_file() and stats.stat().st_size > 0)
            first = json.loads(stats.read_text().splitlines()[0])
            row["first_step_s"] = first["time"] - start
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report("scale", rows, ["frames", "record_s", "record_MiB", "raw_store_MiB", "build_s", "build_MiB",
                           "built_store_MiB", "windows", "ram_setup_s", "ram_windows_per_s", "ram_MiB",
                           "stream_setup_s", "stream_windows_per_s", "stream_MiB", "first_step_s"])


if __name__ == "__main__":
    main()
