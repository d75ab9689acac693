"""A world as a web page: `dreamcade export RUN --web OUT` writes the model's stages as ONNX graphs
that give the PyTorch model's frames from the same inputs and noise, and a page that plays the
world offline in a real (headless) Chromium with the keys held through the DevTools protocol."""

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import in_process, run_cli
from dreamcade.dataset import open_store
from dreamcade.dataset.pixels import LEVEL

onnxruntime = pytest.importorskip("onnxruntime")
from dreamcade.web.browser import Browser, Server, chromium_path  # noqa: E402
from dreamcade.web.folder import PACKAGE  # noqa: E402

HAVE_RUNTIME = (PACKAGE / "dist").is_dir() or bool(os.environ.get("DREAMCADE_ORT_WEB"))
needs_runtime = pytest.mark.skipif(not HAVE_RUNTIME, reason="onnxruntime-web is not installed: `make web`")
needs_chromium = pytest.mark.skipif(chromium_path() is None, reason="no chromium: `apt-get install chromium`")


def train_cli(*args, **kw):
    return run_cli("train.py", *args, "--quiet", **kw)


def run_graph(path: Path, feeds: dict) -> np.ndarray:
    sess = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v.numpy() for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}})[0]


def test_the_graphs_give_the_pytorch_frames_from_the_same_inputs_and_noise(tmp_path, small_spec, one_thread):
    """Both stages, with attention, two Heun steps, context noise and no hold (every pixel counts):
    the page's graphs against model.sampler.next_frame and Upsampler.upsample, their noise drawn
    from the same generator in the same order, within 2 levels (mean absolute) and with most
    pixels equal."""
    from dreamcade.model.config import DiffusionConfig, NetworkConfig, SamplerConfig
    from dreamcade.model.denoiser import Denoiser
    from dreamcade.model.sampler import next_frame, schedule
    from dreamcade.model.upsampler import Upsampler
    from dreamcade.web.graphs import (NEXT_FRAME, UPSAMPLE, NextFrameGraph, UpsampleGraph, export_graph,
                                      next_frame_inputs, upsample_inputs)

    torch.manual_seed(0)
    net = NetworkConfig(channels=[16, 32], blocks=1, attention_levels=[1], cond_dim=32, action_dim=8, groups=8)
    model = Denoiser.build(net, DiffusionConfig(context_noise_max=0.3, action_drop=0.1), small_spec, 3, (12, 16)).eval()
    for p in model.parameters():  # an untrained network's last layer is zero: give it something to say
        p.data += 0.05 * torch.randn_like(p)
    sampler = SamplerConfig(steps=2, method="heun", context_noise=0.1, hold_levels=0.0)
    export_graph(NextFrameGraph(model, sampler), next_frame_inputs(model, (12, 16)), NEXT_FRAME, tmp_path / "nf.onnx")
    context = torch.rand(1, 3, 3, 12, 16) * 2 - 1
    actions = torch.tensor([[[1.0, 0.0, 12.0], [0.0, 1.0, -30.0], [1.0, 1.0, 4.0]]])
    mask = torch.tensor([[False, True, True]])
    ref = next_frame(model, context, actions, mask, sampler, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)  # next_frame's order: the start noise, then the context's
    noise, context_noise = torch.randn(1, 3, 12, 16, generator=g), torch.randn(1, 3, 3, 12, 16, generator=g)
    out = run_graph(tmp_path / "nf.onnx", dict(context=context, actions=actions, mask=mask.float(), noise=noise,
                                               context_noise=context_noise))
    diff = np.abs(out - ref.numpy()) / LEVEL
    print(f"next frame: {diff.mean():.3f} levels mean, {diff.max():.0f} max, {(diff > 0.5).mean():.1%} differ")
    assert ref.std() > 0.05 and diff.mean() <= 0.25 and (diff > 0.5).mean() < 0.1
    # with another start noise the frame is another: the graph uses its noise
    other = run_graph(tmp_path / "nf.onnx", dict(context=context, actions=actions, mask=mask.float(),
                                                 noise=torch.randn(1, 3, 12, 16), context_noise=context_noise))
    assert np.abs(other - out).mean() / LEVEL > 2.0
    # guidance on the input (two denoiser calls a step, one batch) and its rescale unroll into the graph too
    guided = SamplerConfig(steps=2, method="heun", context_noise=0.1, hold_levels=0.0, guidance=2.5,
                           guidance_rescale=0.7)
    export_graph(NextFrameGraph(model, guided), next_frame_inputs(model, (12, 16)), NEXT_FRAME, tmp_path / "g.onnx")
    ref_g = next_frame(model, context, actions, mask, guided, torch.Generator().manual_seed(5))
    out_g = run_graph(tmp_path / "g.onnx", dict(context=context, actions=actions, mask=mask.float(), noise=noise,
                                                context_noise=context_noise))
    diff_g = np.abs(out_g - ref_g.numpy()) / LEVEL
    assert diff_g.mean() <= 0.25 and (diff_g > 0.5).mean() < 0.1
    assert np.abs(out_g - out).mean() / LEVEL > 0.5  # and it is another frame than the unguided one
    unscaled = next_frame(model, context, actions, mask, replace(guided, guidance_rescale=0.0),
                          torch.Generator().manual_seed(5))
    assert np.abs(out_g - unscaled.numpy()).mean() / LEVEL > 0.5  # and than the guided one not rescaled

    up = Upsampler(scale=2, frame_size=[24, 32], channels=[8, 16], blocks=1, cond_dim=32, groups=8, sigma_data=0.25,
                   p_mean=-0.4, p_std=1.2, sigma_min=0.002, sigma_max=20.0, cond_noise_max=0.1).eval()
    for p in up.parameters():
        p.data += 0.05 * torch.randn_like(p)
    up_sampler = SamplerConfig(steps=2, method="euler")
    export_graph(UpsampleGraph(up, up_sampler), upsample_inputs(up, (12, 16)), UPSAMPLE, tmp_path / "up.onnx")
    low = ref
    g = torch.Generator().manual_seed(6)
    big = up.upsample(low, schedule(up_sampler), "euler", 0.0, g)
    g = torch.Generator().manual_seed(6)
    out = run_graph(tmp_path / "up.onnx", dict(low=low, noise=torch.randn(1, 3, 24, 32, generator=g)))
    diff = np.abs(out - big.numpy()) / LEVEL
    print(f"upsample: {diff.mean():.3f} levels mean, {diff.max():.0f} max")
    assert out.shape == (1, 3, 24, 32) and diff.mean() <= 0.25 and (diff > 0.5).mean() < 0.1


def test_web_export_refuses_in_one_line_without_losing_anything(tmp_path, monkeypatch, capsys):
    from dreamcade.export import main

    monkeypatch.setenv("DREAMCADE_ORT_WEB", str(tmp_path / "nowhere"))
    assert main([str(tmp_path / "run"), "--web", str(tmp_path / "page")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nowhere" in err and "make web" in err
    assert not (tmp_path / "page").exists()
    with pytest.raises(SystemExit):
        main([str(tmp_path / "run"), "--out", str(tmp_path / "w"), "--webgpu"])
    assert "--webgpu goes with --web" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "run"), "--web", str(tmp_path / "w"), "--data", "a.zarr", "b.zarr"])
    assert "one store" in capsys.readouterr().err


def test_a_run_is_exported_as_its_1_step_student_when_one_is_beside_it(tmp_path):
    from dreamcade.web.folder import student_of

    run, student = tmp_path / "demo", tmp_path / "demo-1step"
    (run / "model").mkdir(parents=True)
    assert student_of(run) is None
    (student / "model").mkdir(parents=True)
    (student / "distill.json").write_text(json.dumps({"teacher": str(tmp_path / "other")}))
    assert student_of(run) is None  # a student of another run
    (student / "distill.json").write_text(json.dumps({"teacher": str(run)}))
    assert student_of(run) == student


def test_the_starts_of_a_two_stage_world_hold_both_sizes(tmp_path):
    """starts.bin, as play.js reads it: per start the context at the model's size (shrunk as
    training shrinks it), the newest frame at the size shown, then the actions and the masks."""
    from conftest import one_episode_store
    from dreamcade.dataset.pixels import downscale
    from dreamcade.model.upsampler import Bicubic
    from dreamcade.play.contexts import Contexts
    from dreamcade.web.folder import write_starts

    store = one_episode_store(tmp_path / "s.zarr", n=40, size=16)
    contexts = Contexts.load(str(store), open_store(store).spec, 3, [], 0.0, seed=0)
    info = write_starts(tmp_path / "starts.bin", contexts, Bicubic(2), 3)
    blob, L, A = (tmp_path / "starts.bin").read_bytes(), 3, 2
    per = L * 8 * 8 * 3 + 16 * 16 * 3
    assert info["count"] == 3 and info["frames_bytes"] == 3 * per and len(blob) == 3 * per + 3 * L * A * 4 + 3 * L
    contexts = Contexts.load(str(store), open_store(store).spec, 3, [], 0.0, seed=0)  # the same picks again
    for k in range(3):
        frames, actions, mask, _ = contexts.pick(0)
        low = np.frombuffer(blob, np.uint8, L * 8 * 8 * 3, k * per).reshape(L, 8, 8, 3)
        full = np.frombuffer(blob, np.uint8, 16 * 16 * 3, k * per + L * 8 * 8 * 3).reshape(16, 16, 3)
        shrunk = downscale(torch.as_tensor(frames).movedim(-1, -3), 2).movedim(-3, -1).numpy()
        assert (low == shrunk).all() and (full == frames[-1]).all()
        got = np.frombuffer(blob, "<f4", L * A, info["actions_offset"] + k * L * A * 4).reshape(L, A)
        assert (got[:-1] == actions).all() and (got[-1] == 0).all()
        assert (np.frombuffer(blob, np.uint8, L, info["mask_offset"] + k * L) == mask).all()


def page_noise(seed: int):
    """The page's noise (play.js `generator`: mulberry32 and Box-Muller), n numbers at a time."""
    import math

    state = seed & 0xFFFFFFFF

    def uniform() -> float:
        nonlocal state
        state = (state + 0x6D2B79F5) & 0xFFFFFFFF
        t = state
        t = ((t ^ (t >> 15)) * (t | 1)) & 0xFFFFFFFF
        t = (t ^ ((t + ((t ^ (t >> 7)) * (t | 61))) & 0xFFFFFFFF)) & 0xFFFFFFFF
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296

    def draw(n: int) -> torch.Tensor:
        out = np.zeros(n, np.float32)
        for i in range(0, n, 2):
            r, th = math.sqrt(-2 * math.log(1 - uniform())), 2 * math.pi * uniform()
            out[i] = r * math.cos(th)
            if i + 1 < n:
                out[i + 1] = r * math.sin(th)
        return torch.from_numpy(out)
    return draw


def pytorch_frames(run: Path, page: Path, seed: int, n: int) -> list[np.ndarray]:
    """The first `n` frames the page makes from its start 0 with no input held, made by the
    PyTorch model from the same start and the page's noise (NextFrameGraph runs the sampler as
    model.sampler.next_frame does, with the noise given)."""
    from dreamcade.files.inference import load_for_inference
    from dreamcade.web.graphs import NextFrameGraph

    info = json.loads((page / "web.json").read_text())
    model, cfg, *_ = load_for_inference(run)
    (h, w), L, A = info["model_size"], info["context"], info["actions"]
    blob = (page / "starts.bin").read_bytes()
    ctx = torch.from_numpy(np.frombuffer(blob, np.uint8, L * h * w * 3).reshape(L, h, w, 3).copy())
    ctx = ctx.permute(0, 3, 1, 2).float()[None] / 127.5 - 1
    a0 = info["starts"]["actions_offset"]
    actions = torch.from_numpy(np.frombuffer(blob, "<f4", L * A, a0).reshape(1, L, A).copy())
    mask = torch.from_numpy(np.frombuffer(blob, np.uint8, L, info["starts"]["mask_offset"]).astype(np.float32))[None]
    graph, randn, out = NextFrameGraph(model, cfg.sampler), page_noise(seed), []
    for _ in range(n):
        actions[0, -1] = torch.from_numpy(model.spec.one_hot(0))  # nothing held: action 0
        noise, context_noise = randn(3 * h * w).reshape(1, 3, h, w), randn(L * 3 * h * w).reshape(1, L, 3, h, w)
        with torch.no_grad():
            frame = graph(ctx, actions, mask, noise, context_noise)
        ctx = torch.cat([ctx[:, 1:], frame[:, None]], 1)
        actions = torch.cat([actions[:, 1:], torch.zeros(1, 1, A)], 1)
        mask = torch.cat([mask[:, 1:], torch.ones(1, 1)], 1)
        out.append(((frame[0].permute(1, 2, 0) + 1) * 127.5).round().clamp(0, 255).numpy().astype(np.uint8))
    return out


def block_centre(rgb: list[int], size: int = 16) -> np.ndarray:
    """(x, y) of the block game's yellow block in a frame given as RGB bytes."""
    f = np.asarray(rgb, np.uint8).reshape(size, size, 3)
    ys, xs = np.nonzero(f[..., 0] > 191)
    return np.array([xs.mean(), ys.mean()]) if len(xs) else np.array([np.nan, np.nan])


@pytest.mark.slow
@needs_runtime
@needs_chromium
def test_the_page_plays_the_world_in_chromium_with_the_keys_held(tmp_path, block_store):
    """The block game after a minute of training (as test_train's learning test), exported with
    --web and played in headless Chromium: the first frame comes, the block goes where the held
    keys say, the page's health figures of its own frames are eval's, its verdict is the band's,
    and the screenshot shows the page. (This little world's colours leave the band within a few
    frames, in play as in the page; the demo world's stay in it: docs/web.md.)"""
    from dreamcade.eval.health import colour_distance, motion, sharpness

    train_cli("--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
              "train.steps=800", "train.batch_size=16", "train.eval_every=100000", "train.sample_every=0",
              "train.save_every=100000", "optim.lr=0.002", "diffusion.context_noise_max=0.1", timeout=600)
    page = tmp_path / "page"
    in_process("export", str(tmp_path / "tiny"), "--web", str(page), "--starts", "4")
    info = json.loads((page / "web.json").read_text())
    assert info["size"] == [16, 16] and info["controls"]["exclusive"] and info["starts"]["count"] == 4
    assert {"index.html", "play.js", "sw.js", "next_frame.onnx", "starts.bin"} <= {p.name for p in page.iterdir()}
    assert sorted(p.name for p in (page / "runtime").iterdir()) == sorted(
        ["LICENSE", "ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"])
    assert "python -m http.server" in (page / "README.md").read_text()
    r = in_process("export", str(tmp_path / "tiny"), "--web", str(page), check=False)
    assert r.returncode == 2 and "--overwrite" in r.stderr and (page / "web.json").is_file()

    server = Server(page)
    try:
        with Browser() as b:
            # the page's frames are the PyTorch model's from the same start and noise
            b.open(server.url + "?pace=0&seed=7&start=0&stop=4")
            b.wait("r.stopped", 60)
            made = np.asarray(b.evaluate("window.dreamcade.first_frames()"), np.uint8).reshape(4, 16, 16, 3)
            ref = np.stack(pytorch_frames(tmp_path / "tiny", page, 7, 4))
            diff = np.abs(made.astype(int) - ref.astype(int))
            print(f"page against PyTorch, 4 frames: {diff.mean():.3f} levels mean, {diff.max()} max")
            assert diff.mean() <= 2.0 and (diff > 0).mean() < 0.1 and (ref[-1] != ref[0]).any()

            b.open(server.url + "?pace=0&seed=3")
            first = b.wait("r.frames >= 1", 60)
            # cross-origin isolated by its service worker: as many threads as the machine has, up to 4
            cores = b.evaluate("navigator.hardwareConcurrency")
            assert first["backend"].startswith("WebAssembly (") and first["threads"] == min(4, cores)
            where = {}
            for key in ("left", "right", "up", "down", "left", "right", "up", "down"):
                b.key(key, True)
                n = b.report()["frames"]
                b.wait(f"r.frames >= {n + 12}", 60)
                b.key(key, False)
                where[key] = block_centre(b.evaluate("window.dreamcade.frame()"))
            # a gamepad (DevTools has no gamepads to plug: the page's getGamepads answers one in
            # the standard mapping with the d-pad's left, then its right, held)
            for name, button in (("pad_left", 14), ("pad_right", 15)):
                b.evaluate("navigator.getGamepads = () => [{axes: [0, 0, 0, 0], buttons: Array.from({length: 17}, "
                           f"(_, i) => ({{pressed: i === {button}, value: i === {button} ? 1 : 0}}))}}]")
                n = b.report()["frames"]
                b.wait(f"r.frames >= {n + 12}", 60)
                where[name] = block_centre(b.evaluate("window.dreamcade.frame()"))
            b.evaluate("navigator.getGamepads = () => []")
            r = b.wait("r.frames >= 200", 120)
            snap = b.evaluate("window.dreamcade.snapshot()")
            png = b.screenshot()
    finally:
        server.close()
    print(f"page: {r['fps']:.1f} frames/s, {r['ms_per_frame']:.1f} ms a frame, first frame at "
          f"{first['first_frame_ms']:.0f} ms, health {r['health']}, block {where}")
    assert where["right"][0] - where["left"][0] >= 3, where
    assert where["down"][1] - where["up"][1] >= 3, where
    assert where["pad_right"][0] - where["pad_left"][0] >= 3, where
    frames = np.asarray([snap["before"], snap["frame"]], np.uint8).reshape(2, 16, 16, 3)
    band = info["health"]
    levels = np.diff(np.asarray(band["levels_cdf"]), axis=1, prepend=0.0)
    ours = {"sharpness": sharpness(frames)[1], "colour_distance": colour_distance(frames, levels)[1],
            "motion": motion(frames)[1]}
    for k, v in ours.items():
        assert snap["figures"][k] == pytest.approx(v, rel=1e-4, abs=1e-7), (k, snap["figures"][k], v)
    side = next(((k, "low" if snap["means"][k] < band["low"][k] else "high") for k in band["figures"]
                 if not band["low"][k] <= snap["means"][k] <= band["high"][k]), None)
    assert snap["out"] == (list(side) if side else None)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000

    # --webgpu bundles the WebGPU build too; a browser without WebGPU (this one) runs WebAssembly and says so
    in_process("export", str(tmp_path / "tiny"), "--web", str(tmp_path / "gpu"), "--webgpu", "--starts", "1")
    assert (tmp_path / "gpu" / "runtime" / "ort.webgpu.min.mjs").is_file()
    server = Server(tmp_path / "gpu")
    try:
        with Browser() as b:
            b.open(server.url + "?stop=3")
            r = b.wait("r.stopped", 60)
    finally:
        server.close()
    assert (r["backend"] == "WebGPU" or r["backend"].startswith("WebAssembly (")) and r["frames"] == 3
