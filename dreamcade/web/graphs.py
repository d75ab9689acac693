"""A world's stages as ONNX graphs for the browser: each graph makes one whole frame, the
sampler's steps unrolled in it, from its inputs and the Gaussian noise it is given (the page
draws the noise; the graph draws none), so the page's frames are those the PyTorch model makes
from the same inputs and noise, to within the float16 storage of the weights (tests/test_web.py
bounds the difference). Stochastic churn (sampler.churn > 0) has no place in them: export refuses it.

    next_frame.onnx  context [1, L, 3, h, w], actions [1, L, A], mask [1, L] (1 real, 0 padded),
                     noise [1, 3, h, w], context_noise [1, L, 3, h, w] -> frame [1, 3, h, w]
    upsample.onnx    low [1, 3, h, w], noise [1, 3, H, W] -> frame [1, 3, H, W]  (two stages only)

Frames are in the model's [-1, 1] units, rounded to 8-bit levels as model.sampler rounds them.
The sampler's settings (steps, method, context noise, hold, guidance and its rescale) are fixed in the graph at export.
The weights are stored as float16 and cast to float32 once when the page loads the graph (half
the download; the arithmetic stays float32).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from dreamcade.model.config import SamplerConfig, context_noise_used
from dreamcade.model.denoiser import Denoiser
from dreamcade.model.sampler import conditioned, hold, sample, schedule
from dreamcade.model.upsampler import Upsampler

OPSET = 18
NEXT_FRAME = ("context", "actions", "mask", "noise", "context_noise")
UPSAMPLE = ("low", "noise")


def rounded(x: torch.Tensor) -> torch.Tensor:
    """dataset.pixels.quantize in float arithmetic (ONNX has no uint8 round trip to spare)."""
    return x.clamp(-1, 1).add(1.0).mul(127.5).round().clamp(0, 255).div(127.5).sub(1.0)


class NextFrameGraph(nn.Module):
    """model.sampler.next_frame with its two noises as inputs: `noise`, the sampler's start, and
    `context_noise`, the N(0, I) the context-noise level scales (next_frame draws them in that
    order from its generator)."""

    def __init__(self, denoiser: Denoiser, sampler: SamplerConfig) -> None:
        super().__init__()
        self.denoiser = denoiser.eval()
        self.sigmas = schedule(sampler).tolist()  # floats: the steps unroll into the graph
        self.method = sampler.method
        self.level = context_noise_used(sampler.context_noise, denoiser.diffusion.context_noise_max)
        self.hold_levels = sampler.hold_levels
        self.guidance, self.rescale = sampler.guidance, sampler.guidance_rescale

    def forward(self, context, actions, mask, noise, context_noise) -> torch.Tensor:
        b = context.shape[0]
        real = mask > 0.5
        if self.level > 0:
            context_in = context + self.level * context_noise
        else:
            context_in = context
        ctx_sigma = torch.full((b,), self.level, dtype=context.dtype)
        base = self.denoiser.base(context_in)
        d = self.denoiser
        denoise = conditioned(d, context_in, ctx_sigma, actions, real, self.guidance, rescale=self.rescale)
        x = sample(denoise, noise, self.sigmas, self.method)
        return hold(rounded(base + x), context[:, -1], self.hold_levels)


class UpsampleGraph(nn.Module):
    """Upsampler.upsample (no noise on the low frame, as play runs it) with its noise as input."""

    def __init__(self, upsampler: Upsampler, sampler: SamplerConfig) -> None:
        super().__init__()
        self.upsampler = upsampler.eval()
        self.sigmas = schedule(sampler).tolist()
        self.method = sampler.method

    def forward(self, low, noise) -> torch.Tensor:
        up = self.upsampler
        level = torch.zeros(low.shape[0], dtype=low.dtype)
        base = up.widen(low)  # Upsampler.condition at level 0
        x = sample(lambda x, s: up(x, s, base, level), noise, self.sigmas, self.method)
        return rounded(base + x)


def next_frame_inputs(denoiser: Denoiser, size: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    """Example inputs of NextFrameGraph (their shapes are the graph's)."""
    L, A, (h, w) = denoiser.context, len(denoiser.spec), size
    return (torch.zeros(1, L, 3, h, w), torch.zeros(1, L, A), torch.ones(1, L), torch.zeros(1, 3, h, w),
            torch.zeros(1, L, 3, h, w))


def upsample_inputs(upsampler: Upsampler, size: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    (h, w), k = size, upsampler.scale
    return torch.zeros(1, 3, h, w), torch.zeros(1, 3, h * k, w * k)


def export_graph(module: nn.Module, inputs: tuple[torch.Tensor, ...], names: tuple[str, ...], path: Path) -> None:
    """`module` as one self-contained ONNX file at `path` (float16 weights, no external data)."""
    import onnx

    with torch.no_grad():
        program = torch.onnx.export(module, inputs, input_names=list(names), output_names=["frame"],
                                    opset_version=OPSET, dynamo=True, verbose=False)
    proto = half_weights(program.model_proto)
    for node in proto.graph.node:  # the exporter's stack traces: most of the file otherwise
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.checker.check_model(proto)
    onnx.save_model(proto, str(path))


def half_weights(proto):
    """The float32 initializers of `proto` stored as float16, each cast back to float32 by a Cast
    node (which the runtime folds when it loads the graph)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    graph = proto.graph
    kept, casts = [], []
    for init in graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT or np.prod(init.dims) < 16:
            kept.append(init)
            continue
        half = numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name + "_f16")
        kept.append(half)
        casts.append(helper.make_node("Cast", [half.name], [init.name], to=onnx.TensorProto.FLOAT))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return proto
