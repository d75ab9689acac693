"""Writing frames as images, MP4 videos and GIFs, and a store's episodes as a clip
(`dreamcade eval video`)."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np

from dreamcade.dataset.outputs import Output


def upscale(frames: np.ndarray, scale: int) -> np.ndarray:
    """Nearest-neighbour upscaling of uint8 [..., H, W, 3]."""
    if scale == 1:
        return frames
    return frames.repeat(scale, axis=-3).repeat(scale, axis=-2)


def write_video(path: str | Path, frames: np.ndarray, fps: float) -> Path:
    """uint8 [T, H, W, 3] to an H.264 MP4 (H and W are padded to even sizes)."""
    frames = np.asarray(frames, np.uint8)
    pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))
    iio.imwrite(path, frames, plugin="pyav", codec="libx264", fps=float(fps))
    return Path(path)


def write_image(path: str | Path, image: np.ndarray) -> Path:
    iio.imwrite(path, np.asarray(image, np.uint8))
    return Path(path)


def grid(rows: list[np.ndarray], gap: int = 2) -> np.ndarray:
    """Tile rows of images (each row uint8 [N, H, W, 3]) into one image with white gaps."""
    h, w = rows[0].shape[1:3]
    n = max(len(r) for r in rows)
    out = np.full((len(rows) * (h + gap) - gap, n * (w + gap) - gap, 3), 255, np.uint8)
    for i, row in enumerate(rows):
        for j, img in enumerate(row):
            out[i * (h + gap):i * (h + gap) + h, j * (w + gap):j * (w + gap) + w] = img
    return out


class VideoWriter:
    """Streams uint8 [H, W, 3] frames to an H.264 MP4 (odd sizes padded to even), so long videos
    never sit in memory whole. Use as a context manager."""

    def __init__(self, path: str | Path, fps: float) -> None:
        self.path, self.fps, self.n = Path(path), float(fps), 0
        self._file = iio.imopen(self.path, "w", plugin="pyav")
        self._started = False

    def write(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame, np.uint8)
        frame = np.pad(frame, ((0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0)))
        if not self._started:
            self._file.init_video_stream("libx264", fps=self.fps)
            self._started = True
        self._file.write_frame(np.ascontiguousarray(frame))
        self.n += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


CLIP_KINDS = (".mp4", ".gif")


def write_clip(path: str | Path, frames, fps: float, scale: int = 1) -> int:
    """Frames (an iterable of uint8 [H, W, 3]) to an MP4 (streamed) or a GIF (by the suffix),
    nearest-neighbour upscaled, at `path` (the path of a clip_output, which puts the clip in place
    when it is complete). Returns the number of frames (0: nothing was written)."""
    path = Path(path)
    if path.suffix.lower() not in CLIP_KINDS:
        raise ValueError(f"{path}: a clip is .mp4 or .gif")
    n = 0
    if path.suffix.lower() == ".mp4":
        with VideoWriter(path, fps) as w:
            for f in frames:
                w.write(upscale(np.asarray(f), scale))
                n += 1
    else:
        stack = [upscale(np.asarray(f), scale) for f in frames]
        n = len(stack)
        if n:
            iio.imwrite(path, np.stack(stack), plugin="pillow", extension=".gif", duration=1000.0 / fps, loop=0)
    return n


def is_clip(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in CLIP_KINDS


def clip_output(path: str | Path, overwrite: bool, inputs: list[str | Path] = (), option: str = "--out",
                can_overwrite: bool = True) -> Output:
    """A clip as an output (dataset.outputs), checked and locked before any frame is made:
    --overwrite replaces only a clip."""
    return Output(path, what="clip", inputs=list(inputs), overwrite=overwrite, option=option, file=True,
                  replaces=is_clip, can_overwrite=can_overwrite).__enter__()
