"""`make bench-gpu`: the CUDA checks in one go (meant to take under five minutes): the tests
marked `gpu` (bf16 training and resume, the sampler under torch.compile with CUDA graphs, the
play loop headless, a drift report), the next frame of the atari-64 and screen-64 presets (bf16,
channels_last; eager and with CUDA graphs; 1, 3 and 6 steps), one denoiser forward in
TFLOP/s beside the GPU's bf16 matmul figure, and the play loop's frames/s at 1 step and at the
preset's own steps, against its target, with the ms of each stage for the two-stage screen-256
(256x144: 64x36 dynamics and a x4 upsampler). Each row is printed as it is measured; then one table,
and bench/results/gpu.json. On a machine without CUDA it says so and exits 0.

`python -m bench.gpu [--frames 300] [--out FOLDER]`
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import torch  # noqa: E402

from bench.common import report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLAY_TARGETS = {"atari-64": 60.0, "screen-64": 30.0, "screen-256": 30.0}  # play loop frames/s at the preset's steps
STEPS = (1, 3, 6)


def gpu_tests() -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/test_gpu.py"], cwd=ROOT,
                          capture_output=True, text=True)
    tail = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-2000:], sep="\n")
    return {"check": "tests marked gpu", "result": tail, "s": time.perf_counter() - t0, "ok": proc.returncode == 0}


def bf16_matmul_tflops(dev: torch.device) -> float:
    from bench.model import timed

    n = 8192
    a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
    return 2 * n**3 / timed(lambda: a @ b, dev, 20) / 1e12


class _Rows(list):
    """The table's rows, each printed when it is added (a run cut short still shows what it measured)."""

    def append(self, row: dict) -> None:
        super().append(row)
        print("measured:", {k: v for k, v in row.items() if v not in (None, "")}, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=300, help="frames of the play loop measured per case")
    p.add_argument("--out", type=Path, default=None, help="also write gpu.json here (besides bench/results)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(f"no CUDA GPU here (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}): "
              "nothing to measure; run `make bench-gpu` on a machine with one")
        return 0
    from bench.model import forward_case, next_frame_ms_per_steps
    from bench.play import make_checkpoint, measure
    from dreamcade.files.config_file import load_config

    dev = torch.device("cuda")
    rows = _Rows()
    t = gpu_tests()
    rows.append({"check": t["check"], "preset": "", "steps": None, "switches": t["result"], "ms": t["s"] * 1000,
                 "per_s": None, "target": None, "meets": t["ok"]})
    peak = bf16_matmul_tflops(dev)
    rows.append({"check": "bf16 matmul 8192 (TFLOP/s)", "preset": "", "steps": None, "switches": "",
                 "ms": None, "per_s": peak, "target": None, "meets": None})
    for network in ("atari-64", "DIAMOND-shaped"):
        r = forward_case(network, dev, repeats=50)
        rows.append({"check": "forward, batch 1 (TFLOP/s)", "preset": network, "steps": None,
                     "switches": f"bf16, {r['gflop']:.2f} GFLOP", "ms": r["ms"], "per_s": r["gflop_s"] / 1000,
                     "target": None, "meets": None})
    for preset in ("atari-64", "screen-64"):
        method = load_config(f"configs/{preset}.yaml").sampler.method
        for compile in (False, True):
            for steps, ms in next_frame_ms_per_steps(preset, dev, compile=compile, repeats=50, steps=STEPS).items():
                rows.append({"check": f"next frame ({method})", "preset": preset, "steps": steps,
                             "switches": "bf16, CUDA graphs" if compile else "bf16, eager", "ms": ms,
                             "per_s": 1000 / ms, "target": None, "meets": None})
    play_args = argparse.Namespace(device="cuda", scale=8, compile=True)
    with tempfile.TemporaryDirectory() as tmp:
        for preset, target in PLAY_TARGETS.items():
            run, store = make_checkpoint(preset, Path(tmp))
            sampler = load_config(f"configs/{preset}.yaml").sampler
            for steps in (1, sampler.steps):
                r = measure(run, store, steps, args.frames, play_args)
                goal = target if steps == sampler.steps else None
                stages = ("" if r["upsampler_ms"] is None else
                          f", dynamics {r['dynamics_ms']:.1f} ms + upsampler {r['upsampler_ms']:.1f} ms")
                rows.append({"check": f"play loop, headless ({sampler.method})", "preset": preset, "steps": steps,
                             "switches": f"bf16, CUDA graphs, model {r['model_share']:.0%} of the loop{stages}",
                             "ms": r["ms_per_frame"], "per_s": r["fps"], "target": goal,
                             "meets": None if goal is None else r["fps"] >= goal})
    written = report("gpu", rows, ["check", "preset", "steps", "switches", "ms", "per_s", "target", "meets"])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / written.name).write_text(written.read_text())
    print(f"\n{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    return 0 if rows[0]["meets"] else 1


if __name__ == "__main__":
    sys.exit(main())
