"""Store write throughput: frames/s appended (flushed chunk by chunk) and bytes per frame.

Frames are real Atari frames (Breakout, random play) resized to each size, and uniform noise as
the incompressible worst case. `python -m bench.store [--frames N]`
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import cv2
import gymnasium as gym
import numpy as np

from bench.common import report
from dreamcade.dataset import Control, ControlSpec, StoreWriter, open_store


def atari_frames(n: int) -> np.ndarray:
    import ale_py
    gym.register_envs(ale_py)
    env = gym.make("ALE/Breakout-v5", repeat_action_probability=0.0)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    out = []
    for _ in range(n):
        out.append(obs)
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    return np.stack(out)


def bench_write(frames: np.ndarray, total: int, root: Path) -> dict:
    h, w = frames.shape[1:3]
    spec = ControlSpec(tuple(Control(f"k{i}") for i in range(8)))
    path = root / f"w{w}x{h}.zarr"
    action = np.zeros(8, np.float32)
    t0 = time.perf_counter()
    with StoreWriter(path, spec=spec, fps=30, frame_size=(w, h), source={"kind": "bench"},
                     flush_seconds=1e9, overwrite=True) as wr:
        for i in range(total):
            wr.append(frames[i % len(frames)], action, i / 30)
    dt = time.perf_counter() - t0
    s = open_store(path)
    assert len(s) == total
    nbytes = s.nbytes_on_disk()
    return {"fps_written": total / dt, "bytes_per_frame": nbytes / total,
            "raw_bytes_per_frame": h * w * 3, "chunk_frames": s.frames.chunks[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--frames", type=int, default=4096, help="frames written per case")
    args = p.parse_args()
    src = atari_frames(1024)
    rng = np.random.default_rng(0)
    rows = []
    root = Path(tempfile.mkdtemp(prefix="bench-store-"))
    try:
        for w, h in ((64, 64), (256, 144)):
            atari = np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in src])
            noise = rng.integers(0, 256, (64, h, w, 3), dtype=np.uint8)
            for content, frames in (("atari", atari), ("noise", noise)):
                r = bench_write(frames, args.frames, root)
                rows.append({"size": f"{w}x{h}", "content": content, "frames": args.frames, **r})
    finally:
        shutil.rmtree(root)
    report("store", rows, ["size", "content", "frames", "chunk_frames", "fps_written",
                           "bytes_per_frame", "raw_bytes_per_frame"])


if __name__ == "__main__":
    main()
