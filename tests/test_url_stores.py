"""Stores read through a URL that fsspec understands (memory:// in this process, file:// across
processes): the same frames, windows, damage checks, build and training as the local path."""

import uuid

import fsspec
import numpy as np
import pytest
from safetensors.torch import load_file

from conftest import run_cli
from dreamcade.dataset import StoreError, WindowDataset, open_store


@pytest.fixture
def memory_copy(block_store):
    """The block store copied into fsspec's in-memory filesystem; its URL."""
    fs = fsspec.filesystem("memory")
    root = f"/{uuid.uuid4().hex}/block.zarr"
    fs.put(str(block_store), root, recursive=True)
    yield f"memory://{root}"
    fs.rm(root.rsplit("/", 1)[0], recursive=True)


def test_a_store_read_through_a_url_is_the_local_store(block_store, memory_copy):
    local, remote = open_store(block_store), open_store(memory_copy)
    assert remote.path == memory_copy and len(remote) == len(local) == 3000
    assert remote.episodes() == local.episodes() and remote.spec == local.spec
    assert np.array_equal(remote.read_frames(), local.read_frames())
    assert np.array_equal(remote.read_actions(), local.read_actions())
    assert remote.verify() == [] and remote.nbytes_on_disk() == local.nbytes_on_disk()
    for mode in ("ram", "stream"):
        a = WindowDataset([block_store], context=2, split="train", mode=mode)
        b = WindowDataset([memory_copy], context=2, split="train", mode=mode)
        assert len(a) == len(b) and [e[1:] for e in a.episodes] == [e[1:] for e in b.episodes]
        items = list(range(0, len(a), 97))
        wa, wb = a.__getitems__(items), b.__getitems__(items)
        assert np.array_equal(wa.frames, wb.frames) and np.array_equal(wa.actions, wb.actions)


def test_a_missing_chunk_behind_a_url_is_refused_by_its_url(block_store, memory_copy):
    fs = fsspec.filesystem("memory")
    chunk = next(k for k in sorted(fs.find(memory_copy.removeprefix("memory://"))) if "/frames/c/" in k)
    fs.rm(chunk)
    store = open_store(memory_copy)
    with pytest.raises(StoreError, match=r"chunk file is missing .* would read as zeros"):
        store.read_frames()
    assert any("chunk file is missing" in line and line.startswith(memory_copy) for line in store.verify())


def test_a_url_with_nothing_there_is_named():
    with pytest.raises(StoreError, match=r"memory:///no/such\.zarr: no such store"):
        open_store("memory:///no/such.zarr")


@pytest.mark.slow
def test_a_file_url_builds_and_trains_exactly_like_its_local_path(tmp_path, block_store):
    url = f"file://{block_store}"
    for name, src in (("local", str(block_store)), ("url", url)):
        run_cli("-m", "dreamcade", "data", "build", src, "--size", "8x8", "--out", str(tmp_path / f"{name}.zarr"))
        run_cli("train.py", "--config", "configs/tiny.yaml", "--data", src, f"out_dir={tmp_path}", f"name={name}",
                "train.steps=6", "train.batch_size=4", "train.threads=1", "train.eval_every=0",
                "train.sample_every=0", "train.save_every=0", "--quiet")
    built = [open_store(tmp_path / f"{n}.zarr") for n in ("local", "url")]
    assert np.array_equal(built[0].read_frames(), built[1].read_frames()) and len(built[0]) == 3000
    weights = [load_file(tmp_path / n / "model" / "diffusion_pytorch_model.safetensors") for n in ("local", "url")]
    assert weights[0].keys() == weights[1].keys()
    assert all(np.array_equal(weights[0][k].numpy(), weights[1][k].numpy()) for k in weights[0])
    assert (tmp_path / "url" / "config.yaml").read_text().count(url) == 1  # kept as the URL, not made a path
