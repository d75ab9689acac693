"""dreamcade: record your own gameplay, train an action-conditioned diffusion world model, play
it, measure its drift. Everything installs under this one name: dreamcade.record, .dataset,
.model, .eval, .play (the repository's top-level folders), .training and .files (the rooms above
the model) and .cli (the `dreamcade` command)."""

from pathlib import Path as _Path

_clone = _Path(__file__).resolve().parent.parent
if (_clone / "pyproject.toml").is_file() and (_clone / "dataset" / "__init__.py").is_file():
    # a clone: dreamcade.dataset is ./dataset, dreamcade.model ./model and so on, the same
    # modules the wheel installs as dreamcade/dataset, dreamcade/model (pyproject's package-dir)
    __path__.append(str(_clone))
