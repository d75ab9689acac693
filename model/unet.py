"""The network F: a UNet trained from scratch whose residual blocks are modulated by one
conditioning vector through adaptive group norm (DIAMOND's inner model, in our own code so the
high-resolution levels can stay narrow and fast on a CPU)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dreamcade.model.config import NetworkConfig


class FourierFeatures(nn.Module):
    """Random Fourier features of a scalar per sample: [B] -> [B, dim]."""

    def __init__(self, dim: int, scale: float = 16.0) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.randn(1, dim // 2) * scale, persistent=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        phase = 2 * math.pi * x.float()[:, None] * self.freqs  # [B, dim/2]
        return torch.cat([phase.cos(), phase.sin()], dim=1)


class AdaGroupNorm(nn.Module):
    """Group norm whose scale and shift come from the conditioning vector."""

    def __init__(self, channels: int, cond_dim: int, groups: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, affine=False)
        self.proj = nn.Linear(cond_dim, 2 * channels)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.proj(cond)[:, :, None, None].chunk(2, dim=1)  # [B, C, 1, 1] each
        return self.norm(x) * (1 + scale) + shift


class SelfAttention(nn.Module):
    """Multi-head self-attention over the pixels of a feature map, with a residual."""

    def __init__(self, channels: int, groups: int, head_dim: int = 32) -> None:
        super().__init__()
        self.heads = max(1, channels // head_dim)
        self.norm = nn.GroupNorm(groups, channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        qkv = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w)
        q, k, v = qkv.transpose(-1, -2).unbind(1)  # [B, heads, HW, C/heads] each
        y = F.scaled_dot_product_attention(q, k, v)  # [B, heads, HW, C/heads]
        return x + self.out(y.transpose(-1, -2).reshape(b, c, h, w))


class ResBlock(nn.Module):
    """norm -> SiLU -> conv -> norm -> SiLU -> conv, both norms conditioned, plus a skip."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, groups: int, attention: bool) -> None:
        super().__init__()
        self.norm1 = AdaGroupNorm(c_in, cond_dim, groups)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2 = AdaGroupNorm(c_out, cond_dim, groups)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        nn.init.zeros_(self.conv2.weight)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        self.attn = SelfAttention(c_out, groups) if attention else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x, cond)))
        h = self.conv2(F.silu(self.norm2(h, cond)))
        return self.attn(self.skip(x) + h)


class UNet(nn.Module):
    """F(x, cond): [B, c_in, H, W] and [B, cond_dim] -> [B, c_out, H, W], any H and W: the input is
    padded to multiples of `factor` (it halves the frame levels - 1 times) and the output cropped
    back (see pad)."""

    def __init__(self, c_in: int, c_out: int, cfg: NetworkConfig) -> None:
        super().__init__()
        ch, g, cd = cfg.channels, cfg.groups, cfg.cond_dim
        self.levels = len(ch)
        self.factor = 2 ** (self.levels - 1)
        self.conv_in = nn.Conv2d(c_in, ch[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        skips, c = [ch[0]], ch[0]
        for i, width in enumerate(ch):
            blocks = nn.ModuleList()
            for _ in range(cfg.blocks):
                blocks.append(ResBlock(c, width, cd, g, i in cfg.attention_levels))
                c = width
                skips.append(c)
            self.down.append(blocks)
            if i < self.levels - 1:
                self.downsample.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                skips.append(c)
        self.mid = ResBlock(c, c, cd, g, attention=True)
        self.up = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for i in reversed(range(self.levels)):
            blocks = nn.ModuleList()
            for _ in range(cfg.blocks + 1):
                blocks.append(ResBlock(c + skips.pop(), ch[i], cd, g, i in cfg.attention_levels))
                c = ch[i]
            self.up.append(blocks)
            if i > 0:
                self.upsample.append(nn.Conv2d(c, c, 3, padding=1))
        self.norm_out = nn.GroupNorm(g, c)
        self.conv_out = nn.Conv2d(c, c_out, 3, padding=1)
        nn.init.zeros_(self.conv_out.weight)
        nn.init.zeros_(self.conv_out.bias)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, H, W] extended at the bottom and right to the next multiples of `factor` by
        repeating its edge pixels (replicate). Zeros would draw a hard edge (mid-grey, and no
        noise in the noisy frame's channels) that the convolutions at the border would take for
        content; reflection would mirror the content near the edge (a sprite there seen twice)
        and needs a pad smaller than the frame. Repeated edges continue the frame at any size."""
        h, w = x.shape[-2:]
        pad_h, pad_w = -h % self.factor, -w % self.factor
        if pad_h == 0 and pad_w == 0:
            return x
        return F.pad(x, (0, pad_w, 0, pad_h), mode="replicate")  # [B, C, H', W'], multiples of factor

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        h = self.conv_in(self.pad(x))
        skips = [h]
        for i, blocks in enumerate(self.down):
            for block in blocks:
                h = block(h, cond)
                skips.append(h)
            if i < self.levels - 1:
                h = self.downsample[i](h)  # [B, C, H/2, W/2]
                skips.append(h)
        h = self.mid(h, cond)
        for j, blocks in enumerate(self.up):
            for block in blocks:
                h = block(torch.cat([h, skips.pop()], dim=1), cond)
            if j < self.levels - 1:
                h = self.upsample[j](F.interpolate(h, scale_factor=2.0, mode="nearest"))  # [B, C, 2H, 2W]
        out = self.conv_out(F.silu(self.norm_out(h)))  # [B, c_out, H', W']
        return out[..., :height, :width]  # [B, c_out, H, W]: the padded pixels never reach the loss
