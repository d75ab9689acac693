"""Where dreamcade's own presets live: `configs/` (config presets, `controls/` profiles) of the
source tree, or `dreamcade/configs/` of an installed wheel (the same files, shipped as package
data, one folder above this module in both). A name given on the command line is looked for in ./configs first, then here."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parents[1]


def configs_dir() -> Path:
    """The shipped configs folder: the source tree's, or the installed package's."""
    return _HERE / "configs"


def find(name: str | Path, folder: str, suffix: str) -> Path:
    """`name` itself when it is a file; else the preset of that name (or of a `configs/...`
    path, so the documented commands work from any folder) in ./configs, then in the shipped configs."""
    path = Path(name)
    if path.is_file():
        return path
    stem = path.stem if path.suffix == suffix else path.name
    for base in (Path("configs") / folder, configs_dir() / folder):
        if (base / f"{stem}{suffix}").is_file():
            return base / f"{stem}{suffix}"
    return path


def names(folder: str, suffix: str) -> list[str]:
    """The shipped presets of a kind, by name."""
    return sorted(p.stem for p in (configs_dir() / folder).glob(f"*{suffix}"))
