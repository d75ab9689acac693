"""Reading a config strictly: a YAML preset (configs/) plus `key.sub=value` overrides, into
the schema of model/config.py. Unknown keys and wrong types are errors, raised before any work,
and each names where the value came from (the file, or the override)."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Literal

import yaml

from dreamcade.dataset import presets

from dreamcade.model.config import Config, ConfigError


# -- strict conversion -----------------------------------------------------------------------------

def from_dict(cls, data: dict, where: str = "config", prefix: str = ""):
    """Build dataclass `cls` from a dict, refusing unknown keys and values of the wrong type.
    Errors read "<where>: <prefix.key>: what is wrong"."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {prefix or 'the config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(f"{where}: {prefix + ': ' if prefix else ''}unknown key {unknown[0]!r}; "
                          f"valid keys: {', '.join(names)}")
    return cls(**{k: _convert(hints[k], v, where, f"{prefix}.{k}" if prefix else k) for k, v in data.items()})


def _convert(tp, value, file: str, key: str):
    where = f"{file}: {key}"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, file, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, file, key)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_convert(args[0], v, file, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {tp}")


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def apply_override(data: dict, text: str) -> None:
    """Apply `a.b=value` (value parsed as YAML) to a config dict, checking the key exists."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. train.steps=100")
    parts = key.strip().split(".")
    cls, node = Config, data
    for i, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            prefix = ".".join(parts[:i]) or "the config"
            raise ConfigError(f"override {text!r}: {prefix} has no key {part!r}; valid keys: "
                              f"{', '.join(fields)}")
        tp = typing.get_type_hints(cls)[part]
        if i == len(parts) - 1:
            if dataclasses.is_dataclass(tp):
                raise ConfigError(f"override {text!r}: {key} is a section; set one of its keys")
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                raise ConfigError(f"override {text!r}: the value is not valid YAML") from None
            _convert(tp, value, f"override {text!r}", key)  # blame the override, not the file
            node[part] = value
        else:
            if not dataclasses.is_dataclass(tp):
                raise ConfigError(f"override {text!r}: {'.'.join(parts[:i + 1])} is not a section")
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {text!r}: {'.'.join(parts[:i + 1])} in the config file is "
                                  f"{node!r}, not a section of keys")
            cls = tp


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """A preset YAML file (or the defaults when None) plus overrides, checked strictly."""
    data: dict = {}
    where = "config"
    if path is not None:
        path = presets.find(path, "", ".yaml")
        if not path.is_file():
            raise ConfigError(f"{path}: no such config file (presets: {', '.join(presets.names('', '.yaml'))})")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: cannot be read ({e})") from None
        where = str(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of sections (data:, model:, train: ...), got a "
                              f"YAML {type(data).__name__}; see configs/tiny.yaml")
    for text in overrides:
        apply_override(data, text)
    cfg = from_dict(Config, data, where)
    cfg.check()
    return cfg
