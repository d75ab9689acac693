"""Videos for the report: real and generated frames side by side, with the metric drawn under
them as a curve over the whole video (a cursor marks the current frame) and a line of text."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dreamcade.eval.video import VideoWriter, upscale

GAP = 4  # pixels between the real and the generated frame
TEXT_H, CURVE_H = 16, 44  # strip rows, pixels


def _font():
    """pygame-ce's bundled font, or None where pygame cannot load (the text line is left blank)."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import pygame.font

        pygame.font.init()
        return pygame.font.Font(None, 15)
    except Exception:  # no pygame, or no font support in this build
        return None


def text_image(text: str, width: int, font=None) -> np.ndarray:
    """`text` in white on black, uint8 [TEXT_H, width, 3] (cut at the right edge)."""
    out = np.zeros((TEXT_H, width, 3), np.uint8)
    if font is None:
        return out
    import pygame.surfarray

    img = pygame.surfarray.array3d(font.render(text, True, (255, 255, 255), (0, 0, 0))).transpose(1, 0, 2)
    h, w = min(TEXT_H, img.shape[0]), min(width - 4, img.shape[1])
    out[(TEXT_H - h) // 2:(TEXT_H - h) // 2 + h, 4:4 + w] = img[:h, :w]
    return out


def curve_image(values: np.ndarray, width: int, lines: tuple[float, ...] = ()) -> np.ndarray:
    """A curve of `values` [T] (NaN gaps allowed) filling uint8 [CURVE_H, width, 3], step t at
    x = (t + 0.5) / T * width; horizontal `lines` dotted (thresholds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width / 100, CURVE_H / 100), dpi=100, facecolor="black")
    ax = fig.add_axes([0, 0, 1, 1], facecolor="black")
    T = len(values)
    ok = np.isfinite(values)
    if ok.any():
        lo, hi = float(values[ok].min()), float(values[ok].max())
        pad = max(hi - lo, 1e-6) * 0.1
        ax.set_ylim(lo - pad, hi + pad)
        for y in lines:
            ax.axhline(y, color="#c04040", ls=":", lw=0.8)
        ax.plot(np.arange(T) + 0.5, values, color="#5fa8ff", lw=1.2)
    ax.set_xlim(0, T)
    ax.axis("off")
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return img[:CURVE_H, :width]


def video_scale(height: int, target: int = 256) -> int:
    """Nearest-neighbour upscale factor that brings a frame near `target` pixels high."""
    return max(1, target // max(1, height))


def write_comparison(path: str | Path, generated: np.ndarray, real: np.ndarray | None, curve: np.ndarray,
                     texts: list[str], fps: float, lines: tuple[float, ...] = (), scale: int = 0) -> int:
    """One MP4 frame per generated frame: a label row, [recorded | generated] (only generated
    when `real` is None; a dark frame where the recording has ended), upscaled, then a strip with
    `curve` (one value per frame) and a cursor, and texts[t] under it. Returns the frame count."""
    T, h, w, _ = generated.shape
    s = scale or video_scale(h)
    panes = 1 if real is None else 2
    width = panes * w * s + (panes - 1) * GAP
    strip = curve_image(np.asarray(curve, np.float64), width, lines)
    font = _font()
    blank = np.full((h, w, 3), 24, np.uint8)
    labels = [text_image("generated", w * s, font)]
    if real is not None:
        labels = [text_image("recorded", w * s, font), np.zeros((TEXT_H, GAP, 3), np.uint8), labels[0]]
    header = np.concatenate(labels, 1)
    with VideoWriter(path, fps) as out:
        for t in range(T):
            tiles = [upscale(generated[t], s)]
            if real is not None:
                r = real[t] if t < len(real) else blank
                tiles = [upscale(r, s), np.zeros((h * s, GAP, 3), np.uint8), tiles[0]]
            frame_strip = strip.copy()
            x = min(width - 1, int((t + 0.5) / T * width))
            frame_strip[:, max(0, x - 1):x + 1] = (255, 80, 80)
            out.write(np.concatenate([header, np.concatenate(tiles, 1), frame_strip, text_image(texts[t], width, font)], 0))
    return T
