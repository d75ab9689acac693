"""The web folder of a world (`dreamcade export RUN --web OUT`): a static page that plays the
world offline in a browser.

    OUT/
      index.html, play.js     the page (dreamcade/web/page/)
      sw.js                   its service worker: the folder served cross-origin isolated (threads)
      next_frame.onnx         the dynamics model's next frame, its sampler unrolled (graphs.py)
      upsample.onnx           a two-stage world's second stage
      starts.bin              real start contexts: per start, the L context frames at the model's
                              size (uint8 HWC), the newest at the size shown, the actions and mask
      web.json                what the page reads: sizes, stages, starts, controls, health band
      runtime/                onnxruntime-web (WebAssembly; and WebGPU with --webgpu) and its licence
      README.md               how to open and share it

Nothing is fetched when the page runs: the runtime comes from the npm package that `make web`
installs into dreamcade/web/node_modules (or DREAMCADE_ORT_WEB, a folder holding its dist/ files)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from dreamcade.dataset.errors import UserError

WEB_FORMAT = "dreamcade.web"
WEB_VERSION = 1
PAGE = Path(__file__).parent / "page"
PACKAGE = Path(__file__).parent / "node_modules" / "onnxruntime-web"
WASM_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
WEBGPU_FILES = ("ort.webgpu.min.mjs", "ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.wasm")
INFO_FILE = "web.json"
HEALTH_WINDOW = 30
PAGE_FILES = ("index.html", "play.js", "sw.js")
MIT = """MIT License

Copyright (c) Microsoft Corporation.

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


class WebExportError(UserError):
    """A web export that cannot be made; the message says why and the fix."""


def runtime_dist() -> Path:
    """The folder of onnxruntime-web's dist files: DREAMCADE_ORT_WEB, else the npm package that
    `make web` installs. WebExportError with the fix when neither is there."""
    env = os.environ.get("DREAMCADE_ORT_WEB")
    dist = Path(env) if env else PACKAGE / "dist"
    missing = [f for f in WASM_FILES if not (dist / f).is_file()]
    if missing:
        where = f"DREAMCADE_ORT_WEB={env}" if env else str(dist)
        raise WebExportError(f"{where}: onnxruntime-web's {missing[0]} is not there; run `make web` in the clone "
                             "(npm ci in dreamcade/web, once: it needs the npm registry) or set DREAMCADE_ORT_WEB "
                             "to a folder holding onnxruntime-web's dist/ files")
    return dist


def student_of(path: Path) -> Path | None:
    """A 1-step student of the run at `path` (`dreamcade distill`'s runs/<name>-1step beside it,
    distilled from it), or None."""
    from dreamcade.files.checkpoint import model_home

    home = model_home(path)
    student = home.parent / f"{home.name}-1step"
    try:
        record = json.loads((student / "distill.json").read_text())
        same = model_home(record["teacher"]) == home
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return student if same and (student / "model").is_dir() else None


def export_web(path: str | Path, out: str | Path, *, data: list[str] | None = None, webgpu: bool = False,
               starts: int = 16, seed: int = 0, overwrite: bool = False, command: str = "") -> dict:
    """Write the web folder of the model at `path` (a run or world folder; a run's 1-step
    student where one exists) beside `out` and move it into place whole; returns web.json's
    content."""
    from dreamcade.dataset.outputs import Output
    from dreamcade.files.frames import check_frames
    from dreamcade.files.inference import load_for_inference
    from dreamcade.files.world import is_world
    from dreamcade.model.runtime import Runtime
    from dreamcade.play.contexts import Contexts

    dist = runtime_dist()
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise WebExportError(f"{e.name}: not installed, and the ONNX export needs it; pip install "
                             "'dreamcade[web]' (onnx, onnxscript)") from None
    if webgpu:
        missing = [f for f in WEBGPU_FILES if not (dist / f).is_file()]
        if missing:
            raise WebExportError(f"{dist / missing[0]}: missing, the WebGPU runtime; reinstall onnxruntime-web "
                                 "(`make web`) or leave out --webgpu")
    path = Path(path)
    student = None if is_world(path) else student_of(path)
    model_path = student or path
    # on the CPU in float32, eager: the graphs are traced from the model as it is
    runtime = Runtime(device="cpu", precision="no", channels_last=False)
    model, cfg, meta, _, _, upsampling = load_for_inference(model_path, runtime)
    if cfg.sampler.churn > 0:
        raise WebExportError(f"{model_path}: sampler.churn {cfg.sampler.churn:g}: the web graphs draw no noise of "
                             "their own, so stochastic churn cannot be exported; train or distill with "
                             "sampler.churn=0")
    start = data[0] if data else cfg.data.stores[0] if is_world(model_path) else None
    contexts = Contexts.load(start, model.spec, cfg.data.context, cfg.data.stores, cfg.data.val_fraction, seed)
    check_frames(contexts.first, model, cfg)
    output = Output(out, what="web folder", inputs=list(cfg.data.stores) + list(data or []), around=[model_path],
                    overwrite=overwrite, option="--web",
                    replaces=is_web)
    with output as o:
        tmp = o.path
        graphs = write_graphs(tmp, model, cfg, upsampling, contexts.first.frame_shape[:2])
        info = {"format": WEB_FORMAT, "format_version": WEB_VERSION, "name": cfg.name,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": str(model_path),
                "student": student is not None or bool(meta.get("distilled")), "step": int(meta.get("step", 0)),
                "fps": float(contexts.first.fps), "context": model.context, **graphs,
                "starts": write_starts(tmp / "starts.bin", contexts, upsampling, starts),
                "controls": controls(model.spec), "health": health_band(contexts),
                "runtime": copy_runtime(dist, tmp / "runtime", webgpu), "command": command}
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
        for f in PAGE_FILES:
            shutil.copy(PAGE / f, tmp / f)
        (tmp / "README.md").write_text(readme(info))
        info["bytes"] = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
    return info


def is_web(path: Path) -> bool:
    try:
        return json.loads((path / INFO_FILE).read_text()).get("format") == WEB_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def write_graphs(out: Path, model, cfg, upsampling, shown: tuple[int, int]) -> dict:
    """next_frame.onnx (and upsample.onnx); the sizes and sampler settings they were made with."""
    from dreamcade.web.graphs import (NEXT_FRAME, UPSAMPLE, NextFrameGraph, UpsampleGraph, export_graph,
                                      next_frame_inputs, upsample_inputs)

    scale = 1 if upsampling is None else upsampling.scale
    low = (shown[0] // scale, shown[1] // scale)
    s = cfg.sampler
    export_graph(NextFrameGraph(model, s), next_frame_inputs(model, low), NEXT_FRAME, out / "next_frame.onnx")
    stages = [{"file": "next_frame.onnx", "inputs": list(NEXT_FRAME), "steps": s.steps, "method": s.method,
               "context_noise": s.context_noise, "hold_levels": s.hold_levels, "guidance": s.guidance,
               "guidance_rescale": s.guidance_rescale}]
    if upsampling is not None:
        up = upsampling
        export_graph(UpsampleGraph(up.model, up.sampler), upsample_inputs(up.model, low), UPSAMPLE,
                     out / "upsample.onnx")
        stages.append({"file": "upsample.onnx", "inputs": list(UPSAMPLE), "steps": up.sampler.steps,
                       "method": up.sampler.method, "scale": scale})
    return {"size": list(shown), "model_size": list(low), "actions": len(model.spec), "stages": stages}


def write_starts(path: Path, contexts, upsampling, count: int) -> dict:
    """Start contexts spread over the episodes: per start the L frames at the model's size, the
    newest at the size shown (uint8 HWC), then every start's actions (float32 [L, A], the last
    row 0) and mask (uint8 [L])."""
    import torch

    from dreamcade.dataset.pixels import downscale

    scale = 1 if upsampling is None else upsampling.scale
    n = max(1, min(count, 4 * len(contexts.episodes)))
    picks = [contexts.pick(k % len(contexts.episodes)) for k in range(n)]
    frames, acts, masks = [], [], []
    for f, a, m, _ in picks:
        low = downscale(torch.as_tensor(f).movedim(-1, -3), scale).movedim(-3, -1).numpy()
        frames += [np.ascontiguousarray(low, np.uint8).tobytes(), np.ascontiguousarray(f[-1], np.uint8).tobytes()]
        acts.append(np.concatenate([a, np.zeros((1, a.shape[1]), np.float32)]).astype(np.float32))
        masks.append(np.asarray(m, np.uint8))
    blob = b"".join(frames)
    with open(path, "wb") as fh:
        fh.write(blob)
        fh.write(np.stack(acts).astype("<f4").tobytes())
        fh.write(np.stack(masks).tobytes())
    return {"file": path.name, "count": n, "frames_bytes": len(blob), "actions_offset": len(blob),
            "mask_offset": len(blob) + 4 * int(np.stack(acts).size)}


def controls(spec) -> dict:
    """The control spec as the page reads it: an exclusive game's meaning parts with the keys
    and gamepad inputs that hold them (as play's window), or each control's input source."""
    from dreamcade.play.live import PAD_AXIS_PARTS, PAD_PARTS
    from dreamcade.record.policies import DEFAULT_KEYS, meaning_parts

    out = {"exclusive": spec.exclusive, "names": spec.names,
           "controls": [{"name": c.name, "kind": c.kind, "source": c.source, "low": c.low, "high": c.high}
                        for c in spec.controls]}
    if spec.exclusive:
        out |= {"parts": [sorted(meaning_parts(n)) for n in spec.names], "keys": DEFAULT_KEYS,
                "pad_buttons": PAD_PARTS, "pad_axes": [list(a) for a in PAD_AXIS_PARTS]}
    return out


def health_band(contexts) -> dict:
    """play's HUD health (play.health_meter.Health) as numbers the page checks its frames against."""
    from dreamcade.play.health_meter import FIGURES, Health

    h = Health(contexts.sample_frames(), HEALTH_WINDOW)
    return {"window": HEALTH_WINDOW, "figures": list(FIGURES), "low": h.band.low, "high": h.band.high,
            "reference_sharpness": h.reference, "levels_cdf": np.cumsum(h.levels, -1).round(6).tolist()}


def copy_runtime(dist: Path, out: Path, webgpu: bool) -> dict:
    out.mkdir()
    files = WASM_FILES + (WEBGPU_FILES if webgpu else ())
    for f in files:
        shutil.copy(dist / f, out / f)
    version = ""
    if (dist.parent / "package.json").is_file():
        version = json.loads((dist.parent / "package.json").read_text()).get("version", "")
    (out / "LICENSE").write_text(f"onnxruntime-web {version} (https://www.npmjs.com/package/onnxruntime-web), "
                                 f"the files of this folder.\n\n{MIT}")
    return {"package": "onnxruntime-web", "version": version, "wasm": f"runtime/{WASM_FILES[0]}",
            "webgpu": f"runtime/{WEBGPU_FILES[0]}" if webgpu else None}


def readme(info: dict) -> str:
    h, w = info["size"]
    stages = " and an upsampler" if len(info["stages"]) > 1 else ""
    return f"""# {info['name']}: a world that plays in the browser

A world model of {info['name']} ({w}x{h}, the dynamics model{stages}), made by `{info['command']}`.
Everything runs in this folder: nothing is fetched from the network.

Open it: in this folder run

    python -m http.server 8000

and open http://localhost:8000 in a browser (a page opened as a file:// cannot load its model).
The page lists the controls below the picture (the keys, mouse and gamepad inputs the world was
recorded with); R starts again from a real frame, P pauses.

Share it: zip this folder and send it; the one who gets it unzips it and does the same.
The runtime is onnxruntime-web {info['runtime']['version']} (MIT licence, runtime/).
"""
