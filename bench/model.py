"""World-model speed on this machine: time of one next frame (batch 1, inference) and training
throughput (denoiser passes = forward + backward of one sample, per second), per preset and
per speed switch (channels_last, inference_mode, bf16 autocast, torch.compile).

`python -m bench.model [--device cpu|cuda] [--compile] [--repeats N]`
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.common import report
from dataset import Control, ControlSpec
from dataset.batch import Batch
from model.config_file import load_config
from model.denoiser import Denoiser
from model.sampler import next_frame
from model.device import configure

SIZES = {"demo": 32, "atari-64": 64, "screen-64": 64}
ATARI = ControlSpec(tuple(Control(f"a{i}") for i in range(6)), exclusive=True)


def build(preset: str, device: torch.device, precision: str, channels_last: bool, compile: bool):
    cfg = load_config(f"configs/{preset}.yaml")
    torch.manual_seed(0)
    model = Denoiser(cfg.model, cfg.diffusion, ATARI, cfg.data.context)
    return configure(model, device, precision, channels_last, compile), cfg


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def next_frame_ms(preset, device, precision="auto", channels_last=True, inference=True, compile=False,
                  repeats=10, steps=3) -> float:
    model, cfg = build(preset, device, precision, channels_last, compile)
    model.eval()
    cfg.sampler.steps = steps
    s, L = SIZES[preset], cfg.data.context
    ctx = torch.rand(1, L, 3, s, s, device=device) * 2 - 1
    act = torch.zeros(1, L, len(ATARI), device=device)
    g = torch.Generator(device).manual_seed(0)
    mode = torch.inference_mode() if inference else torch.no_grad()
    with mode:
        for _ in range(3 if not compile else 5):
            next_frame(model, ctx, act, None, cfg.sampler, g)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            next_frame(model, ctx, act, None, cfg.sampler, g)
        sync(device)
    return (time.perf_counter() - t0) / repeats * 1000


def train_passes_per_s(preset, device, precision="auto", channels_last=True, compile=False,
                       batch=32, repeats=3) -> float:
    model, cfg = build(preset, device, precision, channels_last, compile)
    model.train()
    s, L = SIZES[preset], cfg.data.context
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (batch, L + 1, 3, s, s), dtype=torch.uint8, generator=g)
    actions = torch.nn.functional.one_hot(torch.randint(0, 6, (batch, L + 1), generator=g), 6).float()
    b = Batch(frames, actions, torch.ones(batch, L + 1, dtype=torch.bool)).to(device)

    def step():
        loss = model.loss(b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    sync(device)
    return batch * repeats / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--compile", action="store_true", help="also measure torch.compile (slow to start)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--batch", type=int, default=32, help="training batch")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    rows = []
    variants = [("default", {}), ("no channels_last", {"channels_last": False}),
                ("no_grad, not inference_mode", {"inference": False}), ("bf16 autocast", {"precision": "bf16"})]
    if args.compile:
        variants.append(("torch.compile", {"compile": True}))
    for preset in ("atari-64", "demo"):
        for name, kw in variants:
            for steps in ((1, 2, 3) if name == "default" else (3,)):
                ms = next_frame_ms(preset, dev, repeats=args.repeats, steps=steps, **kw)
                rows.append({"preset": preset, "measure": f"next frame, {steps} Euler steps", "switches": name,
                             "ms": ms, "per_s": 1000 / ms})
    train_variants = [("default", {}), ("no channels_last", {"channels_last": False})]
    if dev.type == "cuda":
        train_variants.append(("fp32 (no bf16)", {"precision": "no"}))
    if args.compile:
        train_variants.append(("torch.compile", {"compile": True}))
    for name, kw in train_variants:
        rate = train_passes_per_s("atari-64", dev, batch=args.batch, **kw)
        rows.append({"preset": "atari-64", "measure": f"training, batch {args.batch}", "switches": name,
                     "ms": args.batch / rate * 1000, "per_s": rate})
    rate = train_passes_per_s("demo", dev, batch=args.batch)
    rows.append({"preset": "demo", "measure": f"training, batch {args.batch}", "switches": "default",
                 "ms": args.batch / rate * 1000, "per_s": rate})
    for preset in ("atari-64", "demo"):
        cfg = load_config(f"configs/{preset}.yaml")
        n = sum(p.numel() for p in Denoiser(cfg.model, cfg.diffusion, ATARI, cfg.data.context).parameters())
        rows.append({"preset": preset, "measure": "parameters", "switches": "", "ms": None, "per_s": n / 1e6})
    report(f"model-{dev.type}", rows, ["preset", "measure", "switches", "ms", "per_s"])


if __name__ == "__main__":
    main()
