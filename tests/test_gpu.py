"""The CUDA path: bf16 training and resume, the sampler under torch.compile with CUDA graphs,
the play loop headless. Marked `gpu`; skipped without a CUDA GPU (`make bench-gpu` runs them
where there is one)."""

import json

import pytest
import torch

from conftest import run_cli
from dreamcade.dataset import open_store
from dreamcade.files.inference import load_for_inference
from dreamcade.model.runtime import Runtime
from dreamcade.model.sampler import next_frame

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")]

TINY = ["--config", "configs/tiny.yaml", "train.device=cuda", "train.precision=bf16", "train.eval_every=0",
        "train.sample_every=0", "train.log_every=2", "train.save_every=2", "--quiet"]


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory, block_store):
    out = tmp_path_factory.mktemp("gpu")
    run_cli("train.py", *TINY, "--data", str(block_store), f"out_dir={out}", "train.steps=4")
    return out / "tiny", block_store, out


def test_a_tiny_training_in_bf16_on_cuda_then_resume(cuda_run, block_store):
    run, _, out = cuda_run
    stats = [json.loads(line) for line in (run / "stats.jsonl").read_text().splitlines()]
    assert [r["step"] for r in stats if "train/loss" in r] == [2, 4]
    assert all(r["train/loss"] == r["train/loss"] for r in stats if "train/loss" in r)  # finite, not NaN
    proc = run_cli("train.py", *TINY, "--data", str(block_store), f"out_dir={out}", "train.steps=6", "--resume")
    assert "at step 4" in proc.stderr
    assert (run / "checkpoints" / "latest").read_text() == "step_00000006"


def test_the_sampler_under_compile_and_cuda_graphs_matches_eager(cuda_run):
    run = cuda_run[0]
    eager, cfg, _, dev, plain = load_for_inference(run, Runtime("cuda"))
    graphs, _, _, _, fast = load_for_inference(run, Runtime("cuda", compile=True))
    L, s = cfg.data.context, 16
    g = torch.Generator(dev).manual_seed(0)
    ctx = torch.rand(2, L, 3, s, s, device=dev, generator=g) * 2 - 1
    act = torch.zeros(2, L, len(eager.spec), device=dev)
    frames = []
    for model, speed in ((eager, plain), (graphs, fast), (graphs, fast), (graphs, fast)):  # graphs replayed
        frames.append(next_frame(model, ctx, act, None, cfg.sampler, torch.Generator(dev).manual_seed(1), speed))
    for f in frames[1:]:
        assert (f - frames[0]).abs().max().item() <= 4 / 127.5 + 1e-6  # bf16 kernels differ by a level or two


def test_the_play_loop_runs_headless_on_cuda(cuda_run, tmp_path):
    run, store, _ = cuda_run
    run_cli("play.py", "--checkpoint", str(run), "--data", str(store), "--device", "cuda", "--frames", "30",
            "--fps", "0", "--compile", "--save", str(tmp_path / "s.zarr"), "--save-dir", str(tmp_path),
            env={"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"})
    session = open_store(tmp_path / "s.zarr")  # what the compiled model played on the GPU, frame by frame
    assert len(session) >= 30 and session.frame_shape == open_store(store).frame_shape


def test_eval_drift_runs_on_cuda(cuda_run, tmp_path):
    """Every stage of a drift report on the GPU: the action classifier, one-step figures and
    compiled rollouts (the classifier once moved its inputs back to the CPU)."""
    run, store, _ = cuda_run
    run_cli("-m", "dreamcade", "eval", "drift", "--checkpoint", str(run), "--data", str(store), "--device", "cuda",
            "--compile", "--horizon", "16", "--episodes", "2", "--windows", "16", "--bank", "64", "--idm-steps", "5",
            "--chunks", "2", "--health-window", "8", "--videos", "0", "--quiet", "--out", str(tmp_path / "r"))
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["device"].startswith("cuda") and m["rollouts"]["horizon"] == 16
    assert m["rollouts"]["action_following"]["ceiling"] is not None
