"""The wheel: built from the repository, installed (not editable) into a fresh venv, it runs the
tiny pipeline end to end from a folder that holds no source: record -> build -> train -> export
-> play headless -> eval, with the presets and control profiles it ships."""

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

SOURCES = ["pyproject.toml", "README.md", "train.py", "demo.py", "configs", "dreamcade", "dataset", "record",
           "model", "eval", "play"]


def sh(*args, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_tiny_pipeline(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:  # a copy, so the build leaves nothing in the repository
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(
            ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}))
    built = sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", src,
               cwd=tmp_path)
    assert "Deprecat" not in built.stdout + built.stderr, "our pyproject makes setuptools warn"
    wheel, = (tmp_path / "dist").glob("dreamcade-*.whl")

    # a fresh venv; the dependencies (torch and the rest, already here) are lent to it by a .pth
    # line after its own site-packages, so what it imports of ours comes from the wheel alone
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    sh(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index",
       wheel, cwd=tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "SDL_VIDEODRIVER": "dummy",
           "SDL_AUDIODRIVER": "dummy"}
    where = sh(venv / "bin" / "python", "-c", "import dataset, model, play, eval, dreamcade, train; "
               "print(*(m.__file__ for m in (dataset, model, play, eval, dreamcade, train)))", cwd=work, env=env)
    assert all(path.startswith(str(site)) for path in where.stdout.split()), where.stdout

    dc = venv / "bin" / "dreamcade"
    sh(dc, "record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "400", "--quiet",
       "--out", "raw.zarr", cwd=work, env=env)
    sh(dc, "data", "build", "raw.zarr", "--size", "16x16", "--out", "train.zarr", "--quiet", cwd=work, env=env)
    sh(dc, "train", "--config", "tiny", "--data", "train.zarr", "out_dir=runs", "train.steps=4",
       "train.sample_every=0", "--quiet", cwd=work, env=env)
    sh(dc, "export", "runs/tiny", "--out", "world", cwd=work, env=env)
    shutil.rmtree(work / "raw.zarr")
    shutil.rmtree(work / "train.zarr")
    sh(dc, "play", "--checkpoint", "world", "--frames", "20", "--save", "session.zarr", "--no-real", cwd=work,
       env=env)
    sh(dc, "eval", "drift", "--checkpoint", "world", "--session", "session.zarr", "--out", "report", "--bank", "100",
       "--idm-steps", "20", "--threads", "1", "--quiet", cwd=work, env=env)
    m = json.loads((work / "report" / "metrics.json").read_text())
    assert len(m["sessions"]["sequences"]) == 1
    assert sh(dc, "--help", cwd=work, env=env).stdout.startswith("usage: dreamcade JOB")
