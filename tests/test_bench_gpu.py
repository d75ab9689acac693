"""`make bench-gpu` on a machine without CUDA: it says so and exits 0 (on one, tests/test_gpu.py
and the benchmarks run)."""

import pytest
import torch

from conftest import run_cli


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA machine it runs the GPU checks")
def test_bench_gpu_without_cuda_says_so_and_exits_0():
    proc = run_cli("-m", "bench.gpu", "--frames", "10")
    assert proc.returncode == 0 and "no CUDA GPU here" in proc.stdout
