"""Training-window throughput: windows/s (L=4, 64x64, batch 64) from RAM and streamed from disk,
with 0 and 2 workers, and the memory used. The data is a real Atari recording (Breakout, sticky
bot) built to 64x64. `python -m bench.loader [--frames N] [--seconds S]`
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from bench.common import report
from dreamcade.dataset import WindowDataset, make_loader
from dreamcade.record.gym_game import EnvRecording, Recorder


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(ds: WindowDataset, workers: int, seconds: float, batch: int) -> float:
    dl = make_loader(ds, batch_size=batch, num_workers=workers, seed=0)
    n, t0, it = 0, None, iter(dl)
    while True:
        try:
            b = next(it)
        except StopIteration:
            it = iter(dl)
            continue
        if t0 is None:  # the first batch pays for starting the workers
            t0 = time.perf_counter()
            continue
        n += len(b)
        if time.perf_counter() - t0 >= seconds:
            return n / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--frames", type=int, default=20000, help="frames in the recording")
    p.add_argument("--seconds", type=float, default=5.0, help="measuring time per case")
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-loader-"))
    try:
        path = root / "breakout64.zarr"
        Recorder(EnvRecording(env_id="ALE/Breakout-v5", steps=args.frames, size=(64, 64),
                              out=str(path))).run(progress=False)
        rows = []
        for mode in ("ram", "stream"):
            before = rss_mib()
            ds = WindowDataset([path], context=4, split="train", mode=mode)
            held = rss_mib() - before
            for workers in (0, 2):
                rate = measure(ds, workers, args.seconds, args.batch)
                rows.append({"mode": mode, "workers": workers, "windows": len(ds),
                             "windows_per_s": rate, "dataset_MiB": ds.nbytes / 2**20,
                             "rss_growth_MiB": held})
            del ds
    finally:
        shutil.rmtree(root)
    report("loader", rows, ["mode", "workers", "windows", "windows_per_s", "dataset_MiB", "rss_growth_MiB"])


if __name__ == "__main__":
    main()
