"""Training past one process: two real processes on the CPU (torchrun, gloo), the same code a GPU
cluster runs. What each rank saw is read from the windows log, not assumed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def two_processes(data: Path, out_dir: Path, *overrides: str, resume: bool = False, wait: bool = True):
    cmd = [*TORCHRUN, "train.py", "--config", "tiny", "--data", str(data), f"out_dir={out_dir}", "train.threads=1",
           "train.sample_every=0", "--quiet", *overrides, *(["--resume"] if resume else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if not wait:
        return proc
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:  # where each worker is goes into the failure (dataset.errors.where_on_usr1)
        left = signal_all(f"out_dir={out_dir}", signal.SIGUSR1, workers_only=True)
        time.sleep(3)
        kill_all(f"out_dir={out_dir}")
        out, err = proc.communicate()
        pytest.fail(f"the run did not end in 300 s; workers left: {left or 'none'}; where they were:\n{out}\n"
                    f"{err[-20000:]}")
    finally:
        kill_all(f"out_dir={out_dir}")  # a hung run leaves no worker behind
    assert proc.returncode == 0, out + err
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def kill_all(text: str) -> None:
    """SIGKILL every process whose command line holds `text`."""
    signal_all(text, signal.SIGKILL)


def signal_all(text: str, sig: int, workers_only: bool = False) -> list[int]:
    """Send `sig` to every process whose command line holds `text` (only train.py's workers, not
    torchrun itself, with `workers_only`); the pids it reached."""
    reached = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace") if proc.name.isdigit() else ""
            if text in cmdline and not (workers_only and "torch.distributed.run" in cmdline):
                os.kill(int(proc.name), sig)
                reached.append(int(proc.name))
        except (OSError, ProcessLookupError):
            continue
    return reached


@pytest.mark.slow
def test_two_processes_split_every_step_and_one_writes(block_store, tmp_path):
    proc = two_processes(block_store, tmp_path, "train.steps=40", "train.log_every=2", "train.log_windows=true",
                         "train.save_every=20", "train.eval_every=20")
    assert "on cpu, 2 processes" in proc.stderr.replace("cpu:0", "cpu")  # seen from inside: world size 2
    run = tmp_path / "tiny"
    seen = {}
    for rank in (0, 1):
        for line in (run / "windows" / f"rank{rank}.jsonl").read_text().splitlines():
            row = json.loads(line)
            seen.setdefault(row["step"], {})[rank] = row["windows"]
    assert sorted(seen) == list(range(1, 41))
    for step, ranks in seen.items():
        assert len(ranks[0]) == len(ranks[1]) == 8, "each process takes train.batch_size windows a step"
        assert not set(ranks[0]) & set(ranks[1]), f"step {step}: the two processes saw the same window"
    everything = [w for ranks in seen.values() for ws in ranks.values() for w in ws]
    assert len(set(everything)) == len(everything) == 640, "no window twice in the epoch"
    # one set of artifacts, written once
    stats = [json.loads(line) for line in (run / "stats.jsonl").read_text().splitlines()]
    train_steps = [s["step"] for s in stats if "train/loss" in s]
    assert train_steps == list(range(2, 41, 2)), "stats.jsonl written by one process"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_00000020", "step_00000040"]
    state = json.loads((run / "checkpoints" / "step_00000040" / "state.json").read_text())
    assert state["processes"] == 2 and (run / "checkpoints" / "step_00000040" / "rng_rank1.safetensors").is_file()
    assert (run / "model" / "config.json").is_file() and (run / "world" / "world.json").is_file()
    loss = [s["train/loss"] for s in stats if "train/loss" in s]
    assert sum(loss[-5:]) / 5 < 0.8 * sum(loss[:5]) / 5, f"the loss falls: {loss}"


@pytest.mark.slow
def test_a_killed_two_process_run_resumes_to_the_same_weights(block_store, tmp_path):
    common = ["train.steps=300", "train.save_every=50", "train.eval_every=0"]
    two_processes(block_store, tmp_path / "whole", *common)
    proc = two_processes(block_store, tmp_path / "killed", *common, wait=False)
    first = tmp_path / "killed" / "tiny" / "checkpoints" / "step_00000050" / "state.json"
    deadline = time.monotonic() + 300
    while not first.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    kill_all(f"out_dir={tmp_path / 'killed'}")  # torchrun and both workers (not all in its session)
    proc.wait()
    latest = (tmp_path / "killed" / "tiny" / "checkpoints" / "latest").read_text()
    assert latest != "step_00000300", "killed before the end"
    out = two_processes(block_store, tmp_path / "killed", *common, resume=True)
    assert f"resuming from {tmp_path / 'killed' / 'tiny' / 'checkpoints' / latest}" in out.stderr
    a = load_file(str(tmp_path / "whole" / "tiny" / "model" / "diffusion_pytorch_model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "tiny" / "model" / "diffusion_pytorch_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
