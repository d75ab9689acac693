"""bench.peer: DIAMOND's denoiser beside ours. Its code is the user's checkout, which CI cannot
fetch; the end-to-end test runs where DREAMCADE_DIAMOND_SRC names one (a clone of
https://github.com/eloialonso/diamond, with `pip install omegaconf`)."""

import json
import os

import pytest

from conftest import run_cli

DIAMOND = os.environ.get("DREAMCADE_DIAMOND_SRC")


def test_without_diamond_src_it_says_how_to_get_it_and_exits_2():
    proc = run_cli("-m", "bench.peer", check=False)
    assert proc.returncode == 2
    assert "git clone https://github.com/eloialonso/diamond" in proc.stderr and "--diamond-src" in proc.stderr


def test_a_folder_that_is_not_diamond_is_refused_by_name(tmp_path):
    proc = run_cli("-m", "bench.peer", "--diamond-src", str(tmp_path), "--ours", str(tmp_path), "--out",
                   str(tmp_path / "o"), check=False)
    assert proc.returncode == 2
    assert f"--diamond-src {tmp_path}" in proc.stderr and "src/models/diffusion/denoiser.py" in proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.skipif(not DIAMOND, reason="needs a DIAMOND checkout: set DREAMCADE_DIAMOND_SRC")
def test_diamond_trains_on_our_store_and_both_are_scored_by_the_same_report(tmp_path, block_store):
    run_cli("train.py", "--config", "configs/tiny.yaml", "--data", str(block_store), f"out_dir={tmp_path}",
            "data.context=4", "train.steps=6", "train.eval_every=0", "train.sample_every=0", "train.log_every=2",
            "--quiet")
    out = tmp_path / "peer"
    args = ["-m", "bench.peer", "--diamond-src", DIAMOND, "--ours", str(tmp_path / "tiny"), "--out", str(out),
            "--seconds", "5", "--threads", "1", "--horizon", "24", "--episodes", "1", "--windows", "16",
            "--bank", "100", "--idm-steps", "10", "--chunks", "2", "--health-window", "8", "--videos", "0",
            "--quiet"]
    proc = run_cli(*args, check=False)
    assert proc.returncode == 0, proc.stderr
    trained = json.loads((out / "diamond" / "diamond.json").read_text())
    assert trained["steps"] > 0 and trained["budget_seconds"] == 5 and trained["num_actions"] == 5
    assert (out / "diamond" / "diffusion_pytorch_model.safetensors").is_file()
    rows = json.loads((out / "report" / "peer.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["dreamcade", "DIAMOND"]
    for r, folder in zip(rows, ("ours", "diamond")):
        m = json.loads((out / "report" / folder / "metrics.json").read_text())
        assert m["rollouts"]["horizon"] == 24 and r["one_step_psnr"] == m["one_step"]["model"]["psnr_pooled"]
        assert r["fps_1_step"] > r["fps_3_steps"] > 0
    speed = run_cli(*args, "--stage", "speed", check=False)  # measured again, into the same report
    assert speed.returncode == 0, speed.stderr
    again_rows = json.loads((out / "report" / "peer.json").read_text())["rows"]
    assert [{k: v for k, v in r.items() if not k.startswith("fps")} for r in again_rows] == \
        [{k: v for k, v in r.items() if not k.startswith("fps")} for r in rows]
    assert all(r["fps_1_step"] > r["fps_3_steps"] > 0 for r in again_rows)
    # made before: refused without --overwrite, and left as it was
    again = run_cli(*args, check=False)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert json.loads((out / "diamond" / "diamond.json").read_text()) == trained
