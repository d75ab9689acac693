import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")


def run_cli(*args: str, check: bool = True, timeout: float = 300, env: dict | None = None):
    """Run `python -m ...` or a script as a user would, in the repository root."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def in_process(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`dreamcade ARGS` in this process, through its main(argv): the exit code and what it printed
    (where a subprocess would prove nothing more and cost a second of imports)."""
    from dreamcade.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse: --help, usage errors
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    proc = subprocess.CompletedProcess(["dreamcade", *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"dreamcade {' '.join(args)} failed ({code}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def small_spec():
    from dreamcade.dataset import Control, ControlSpec
    return ControlSpec((Control("left", source="key:left"), Control("right", source="key:right"),
                        Control("mouse_dx", "continuous", "mouse:dx", -50.0, 50.0)), name="test")


def numbered_frame(t: int, h: int = 12, w: int = 16) -> np.ndarray:
    """A frame that encodes its index and is never all zeros."""
    f = np.full((h, w, 3), (t % 250) + 1, np.uint8)
    f[0, 0] = [t % 256, (t // 256) % 256, 7]
    return f


def one_episode_store(path: Path, n: int = 120, size: int = 16) -> Path:
    """One episode of n frames (a screen recording with no pause): a block moving with the
    actions of two keys, left and right."""
    from dreamcade.dataset import Control, ControlSpec, StoreWriter

    spec = ControlSpec((Control("left", source="key:left"), Control("right", source="key:right")), name="t")
    rng = np.random.default_rng(0)
    with StoreWriter(path, spec=spec, fps=10.0, frame_size=(size, size), source={"kind": "test"}) as w:
        x = size // 2
        for t in range(n):
            a = np.array([rng.random() < 0.3, rng.random() < 0.3], np.float32)
            x = int(np.clip(x + a[1] - a[0], 0, size - 4))
            f = np.full((size, size, 3), 40, np.uint8)
            f[6:10, x:x + 4] = 220
            w.append(f, a, t / 10.0)
    return path


def fixed_identity(src: Path, out: Path, created: str = "2026-01-01T00:00:00+0000") -> Path:
    """A copy of the store `src` whose identity (its creation time) is `created`: its
    train/validation split, a hash of that identity (dataset/windows.py), is the same in every run."""
    from dreamcade.dataset import StoreWriter, open_store

    s = open_store(src)
    with StoreWriter(out, spec=s.spec, fps=s.fps, frame_size=(s.width, s.height), source=s.attrs["source"],
                     extra_attrs={"created": created}) as w:
        for e in s.episodes():
            w.begin_episode()
            for f, a, t in zip(s.read_frames(e.start, e.stop), s.read_actions(e.start, e.stop),
                               s.read_time(e.start, e.stop)):
                w.append(f, a, t)
    return out


@pytest.fixture(scope="session")
def block_store(tmp_path_factory):
    """3,000 frames of our block game (16x16, NOOP/LEFT/RIGHT/UP/DOWN) played by the sticky bot,
    with a fixed identity: the same frames and the same held-out episodes in every run (a fresh
    recording's creation time would draw another split, and the tests that train would measure
    another model each time)."""
    folder = tmp_path_factory.mktemp("data")
    recorded = folder / "recorded.zarr"
    run_cli("-m", "dreamcade", "record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "3000",
            "--max-hold", "6", "--seed", "1", "--quiet", "--out", str(recorded))
    return fixed_identity(recorded, folder / "block.zarr")


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread in this process: on a shared 2-core machine two can be many times slower."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
