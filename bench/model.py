"""World-model speed on this machine.

1. Efficiency: one denoiser forward at batch 1 (inference) in GFLOP/s, for the atari-64 preset
   and a DIAMOND-shaped network (4 levels x 64 channels, 2 blocks, no attention: the FLOPs of
   DIAMOND's Atari denoiser), per speed switch, beside this machine's ceiling measured in the
   same run: a 4096 sgemm and a 64-channel 3x3 convolution at 64x64 (batch 32, channels_last).
   FLOPs are counted by torch's FlopCounterMode (convolutions, matrix products, attention).
2. Time of one next frame (batch 1, inference) and training throughput (denoiser passes =
   forward + backward of one sample, per second), per preset and per speed switch
   (channels_last, inference_mode, bf16 autocast, torch.compile).

`python -m bench.model [--device cpu|cuda] [--compile] [--repeats N] [--only efficiency|speed]`
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.common import report
from dreamcade.dataset import Control, ControlSpec
from dreamcade.dataset.batch import Batch
from dreamcade.files.config_file import load_config
from dreamcade.model.denoiser import Denoiser
from dreamcade.model.sampler import next_frame
from dreamcade.model.device import configure

SIZES = {"demo": 32, "atari-64": 64, "screen-64": 64}
ATARI = ControlSpec(tuple(Control(f"a{i}") for i in range(6)), exclusive=True)


DIAMOND_SHAPE = ["model.channels=[64,64,64,64]", "model.blocks=2", "model.attention_levels=[]"]
NETWORKS = {"atari-64": ("atari-64", []), "DIAMOND-shaped": ("atari-64", DIAMOND_SHAPE)}


def build(preset: str, device: torch.device, precision: str, channels_last: bool, compile: bool,
          overrides: list[str] | None = None):
    cfg = load_config(f"configs/{preset}.yaml", overrides or [])
    torch.manual_seed(0)
    model = Denoiser.build(cfg.model, cfg.diffusion, ATARI, cfg.data.context, (SIZES[preset], SIZES[preset]))
    mode = "reduce-overhead" if compile and device.type == "cuda" else None
    model, speed = configure(model, device, precision, channels_last, compile, mode)
    return model, speed, cfg


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeats: int, warmup: int = 3) -> float:
    """Seconds per call of fn, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / repeats


def next_frame_ms(preset, device, precision="auto", channels_last=True, inference=True, compile=False,
                  repeats=10, steps=3, method: str | None = None) -> float:
    return next_frame_ms_per_steps(preset, device, precision, channels_last, inference, compile, repeats,
                                   (steps,), method)[steps]


def next_frame_ms_per_steps(preset, device, precision="auto", channels_last=True, inference=True, compile=False,
                            repeats=10, steps=(1, 3), method: str | None = None) -> dict[int, float]:
    """ms per next frame at each number of sampler steps, one model built (and compiled) for all;
    `method` None: the preset's sampler.method."""
    model, speed, cfg = build(preset, device, precision, channels_last, compile)
    cfg.sampler.method = method or cfg.sampler.method
    model.eval()
    s, L = SIZES[preset], cfg.data.context
    ctx = torch.rand(1, L, 3, s, s, device=device) * 2 - 1
    act = torch.zeros(1, L, len(ATARI), device=device)
    g = torch.Generator(device).manual_seed(0)
    mode = torch.inference_mode() if inference else torch.no_grad()
    out = {}
    for n in steps:
        cfg.sampler.steps = n
        with mode:
            sec = timed(lambda: next_frame(model, ctx, act, None, cfg.sampler, g, speed), device, repeats,
                        5 if compile else 3)
        out[n] = sec * 1000
    return out


def ceiling(device: torch.device, repeats: int = 10) -> list[dict]:
    """GFLOP/s of a 4096 sgemm and of a 64-channel 3x3 convolution at 64x64 (batch 32,
    channels_last): what these cores do at their best on the work a UNet is made of."""
    g = torch.Generator(device).manual_seed(0)
    n = 4096
    a, b = (torch.randn(n, n, device=device, generator=g) for _ in range(2))
    sgemm = timed(lambda: a @ b, device, max(3, repeats // 2))
    x = torch.randn(32, 64, 64, 64, device=device, generator=g).to(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).to(device, memory_format=torch.channels_last)
    with torch.inference_mode():
        conv_s = timed(lambda: conv(x), device, repeats)
    conv_flops = 2 * 32 * 64 * 64 * 64 * 64 * 9
    return [{"network": "ceiling", "switches": f"sgemm {n}", "gflop": 2 * n**3 / 1e9, "ms": sgemm * 1000,
             "gflop_s": 2 * n**3 / sgemm / 1e9},
            {"network": "ceiling", "switches": "conv 3x3, 64 ch, 64x64, batch 32", "gflop": conv_flops / 1e9,
             "ms": conv_s * 1000, "gflop_s": conv_flops / conv_s / 1e9}]


def forward_case(network: str, device, precision="auto", channels_last=True, compile=False, repeats=20) -> dict:
    """One denoiser forward at batch 1, 64x64: its GFLOP (counted eagerly), ms and GFLOP/s."""
    preset, overrides = NETWORKS[network]
    model, speed, cfg = build(preset, device, precision, channels_last, compile, overrides)
    model.eval()
    s, L = SIZES[preset], cfg.data.context
    g = torch.Generator(device).manual_seed(0)
    x = torch.randn(1, 3, s, s, device=device, generator=g)
    ctx = torch.rand(1, L, 3, s, s, device=device, generator=g) * 2 - 1
    args = (x, torch.full((1,), 1.0, device=device), ctx, torch.full((1,), 0.05, device=device),
            torch.zeros(1, L, len(ATARI), device=device), torch.ones(1, L, dtype=torch.bool, device=device))
    with torch.inference_mode():
        counter = FlopCounterMode(display=False)
        with counter:
            model(*args)  # eager, in float32: what the FLOPs are counted on
        flops = counter.get_total_flops()
        sec = timed(lambda: model(*args, speed), device, repeats, warmup=5 if compile else 3)
    return {"network": network, "gflop": flops / 1e9, "ms": sec * 1000, "gflop_s": flops / sec / 1e9}


def efficiency(device: torch.device, threads: list[int], compile: bool, repeats: int) -> list[dict]:
    """The ceiling, then each network per switch; of_sgemm and of_conv: its share of each ceiling figure."""
    rows = []
    for n in threads:
        if device.type == "cpu":
            torch.set_num_threads(n)
        tag = f"{n} threads, " if device.type == "cpu" else ""
        top = ceiling(device, repeats)
        for r in top:
            r["switches"] = tag + r["switches"]
        rows += top
        variants = [("default", {}), ("no channels_last", {"channels_last": False})]
        if compile and n == threads[-1]:
            variants.append(("torch.compile", {"compile": True}))
        for network in NETWORKS:
            for name, kw in variants:
                r = forward_case(network, device, repeats=repeats, **kw)
                rows.append({**r, "switches": tag + name})
        for r in rows[-len(NETWORKS) * len(variants):]:
            r["of_sgemm"] = r["gflop_s"] / top[0]["gflop_s"]
            r["of_conv"] = r["gflop_s"] / top[1]["gflop_s"]
    return rows


def train_passes_per_s(preset, device, precision="auto", channels_last=True, compile=False,
                       batch=32, repeats=3) -> float:
    model, speed, cfg = build(preset, device, precision, channels_last, compile)
    model.train()
    s, L = SIZES[preset], cfg.data.context
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (batch, L + 1, 3, s, s), dtype=torch.uint8, generator=g)
    actions = torch.nn.functional.one_hot(torch.randint(0, 6, (batch, L + 1), generator=g), 6).float()
    b = Batch(frames, actions, torch.ones(batch, L + 1, dtype=torch.bool)).to(device)

    def step():
        loss = model.loss(b, speed=speed)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return batch / timed(step, device, repeats, warmup=2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--compile", action="store_true", help="also measure torch.compile (slow to start)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--batch", type=int, default=32, help="training batch")
    p.add_argument("--only", choices=["efficiency", "speed"], help="one of the two tables")
    args = p.parse_args()
    dev = torch.device(args.device)
    if args.only != "speed":
        threads = sorted({1, args.threads}) if dev.type == "cpu" else [args.threads]
        rows = efficiency(dev, threads, args.compile, max(args.repeats, 20))
        report(f"forward-{dev.type}", rows, ["network", "switches", "gflop", "ms", "gflop_s", "of_sgemm", "of_conv"])
        print()
    if args.only == "efficiency":
        return
    torch.set_num_threads(args.threads)
    rows = []
    variants = [("default", {}), ("no channels_last", {"channels_last": False}),
                ("no_grad, not inference_mode", {"inference": False}), ("bf16 autocast", {"precision": "bf16"})]
    if args.compile:
        variants.append(("torch.compile", {"compile": True}))
    for preset in ("atari-64", "demo"):
        for name, kw in variants:
            for steps in ((1, 2, 3) if name == "default" else (3,)):
                ms = next_frame_ms(preset, dev, repeats=args.repeats, steps=steps, method="euler", **kw)
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
        n = sum(p.numel() for p in Denoiser.build(cfg.model, cfg.diffusion, ATARI, cfg.data.context, None).parameters())
        rows.append({"preset": preset, "measure": "parameters", "switches": "", "ms": None, "per_s": n / 1e6})
    report(f"model-{dev.type}", rows, ["preset", "measure", "switches", "ms", "per_s"])


if __name__ == "__main__":
    main()
