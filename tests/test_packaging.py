"""The wheel: built from the repository, installed (not editable) into a fresh venv beside another
distribution that owns a top-level `dataset` module, it runs the tiny pipeline end to end from a
folder that holds a user's own model.py and eval.py: record -> build -> train -> export -> play
headless -> eval, with the presets and control profiles it ships. Everything of ours is
dreamcade.*, so neither shadows nor is shadowed."""

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
    # another distribution with a top-level `dataset` package (PyPI has one), installed after ours
    other = tmp_path / "other"
    (other / "dataset").mkdir(parents=True)
    (other / "dataset" / "__init__.py").write_text('OWNER = "the other distribution"\n')
    (other / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                          '"setuptools.build_meta"\n[project]\nname = "dataset"\nversion = "1.0"\n'
                                          '[tool.setuptools]\npackages = ["dataset"]\n')
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", other,
       cwd=tmp_path)
    sh(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index",
       next((tmp_path / "dist").glob("dataset-*.whl")), cwd=tmp_path)
    shown = sh(venv / "bin" / "python", "-m", "pip", "show", "-f", "dreamcade", cwd=tmp_path).stdout
    ours = {Path(f).parts[0] for f in shown.split("Files:")[1].split() if not f.startswith("..")}  # ../bin: scripts
    assert ours == {"dreamcade", "dreamcade-0.1.0.dist-info"}, ours

    work = tmp_path / "work"
    work.mkdir()
    for mine in ("model.py", "eval.py", "play.py", "train.py"):  # a user's own modules, where they run
        (work / mine).write_text(f"raise SystemExit('the user\\'s {mine} was imported')\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "SDL_VIDEODRIVER": "dummy",
           "SDL_AUDIODRIVER": "dummy"}
    where = sh(venv / "bin" / "python", "-c", "import dataset, dreamcade.dataset, dreamcade.model, dreamcade.play; "
               "print(dataset.OWNER); print(*(m.__file__ for m in (dreamcade.dataset, dreamcade.model, dreamcade.play)))",
               cwd=tmp_path, env=env)
    owner, files = where.stdout.splitlines()
    assert owner == "the other distribution" and all(f.startswith(str(site / "dreamcade")) for f in files.split())

    dc = venv / "bin" / "dreamcade"
    sh(dc, "record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "400", "--quiet",
       "--out", "raw.zarr", cwd=work, env=env)
    sh(venv / "bin" / "python", "-m", "dreamcade", "data", "build", "raw.zarr", "--size", "16x16", "--out",
       "train.zarr", "--quiet", cwd=work, env=env)  # -m puts the folder, with the user's modules, first
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
