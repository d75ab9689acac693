"""The real game beside the model in the play window (DIAMOND's model/real toggle): the gymnasium
game a store was recorded from, rebuilt from the store's `source` attribute and driven by the
same one-hot actions, its frames brought to the model's size the way the store's were made.

A raw `record env` store keeps the game in `source` (kind "env": env_id, frameskip,
repeat_action_probability); a training store from `dreamcade data build` keeps each recording's source
in `source.sources[i].source`, and its options (size, crop, fps) in `source.options`. A screen
recording has no game to rebuild, and play says so.
"""

from __future__ import annotations

import numpy as np

from dreamcade.dataset.build import BuildOptions, transform
from dreamcade.dataset.controls import ControlSpec
from dreamcade.dataset.source import SCREEN, game_name, is_screen
from dreamcade.dataset.store import Store, StoreError, open_store


def game_source(store: Store) -> tuple[dict | None, int, dict, str]:
    """(the env source, model frames per recorded frame, build options, why not) of a store."""
    src = store.attrs.get("source") or {}
    if src.get("kind") == "env":
        return src, 1, {}, ""
    if is_screen(src):
        name = game_name(src)
        return None, 1, {}, ("it runs only for gymnasium recordings, and this model's data was recorded from the "
                             "screen" + (f" ({name})" if name != SCREEN else ""))
    if src.get("kind") != "build":
        return None, 1, {}, "its frames do not come from a gymnasium game"
    games = [s.get("source") or {} for s in src.get("sources", [])]
    if not games or any(g.get("kind") != "env" or g.get("env_id") != games[0].get("env_id") for g in games):
        return None, 1, {}, "its training store was not built from recordings of one gymnasium game"
    first = src["sources"][0]
    factor = int(round(float(first.get("fps", store.fps)) / store.fps))
    return games[0], max(1, factor), src.get("options") or {}, ""


class RealGame:
    """The game, stepped `factor` times per model frame with the argmax of the action row."""

    def __init__(self, recorder, factor: int, options: BuildOptions | None) -> None:
        self.recorder, self.factor, self.options = recorder, factor, options
        self.offset = getattr(recorder.env.action_space, "start", 0)

    @classmethod
    def find(cls, store: Store, spec: ControlSpec, size: tuple[int, int]) -> tuple[RealGame | None, str]:
        """The real game of `store` at `size` (width, height), or None and the reason."""
        game, factor, opts, why = game_source(store)
        if game is None:
            return None, f"no real game to show beside the model: {why}"
        if not spec.exclusive:
            return None, f"no real game: {game['env_id']} has no discrete actions to replay"
        first_size, options = _sizes(store, opts, size)
        if first_size == "unknown":
            return None, "no real game: its store was cropped and the raw recording is not here to size the crop"
        from dreamcade.record.gym_game import EnvRecording, Recorder

        rec = EnvRecording(env_id=game["env_id"], policy="random", frameskip=int(game.get("frameskip", 1)),
                           repeat_action_probability=float(game.get("repeat_action_probability", 0.0)),
                           size=first_size)
        try:
            recorder = Recorder(rec)
        except Exception as e:  # not installed, or the game fails to start
            return None, f"no real game: {e}"
        diff = recorder.spec.differences(spec)
        if diff:
            recorder.env.close()
            return None, f"no real game: {game['env_id']} here has other actions than the model ({'; '.join(diff)})"
        return cls(recorder, factor, options), f"real game: {game['env_id']} beside the model (V switches views)"

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self.recorder.env.reset(seed=seed)
        return self._frame(obs)

    def step(self, action: np.ndarray) -> np.ndarray:
        a = int(np.argmax(action)) + self.offset
        for _ in range(self.factor):
            obs, _, done = self.recorder.step(a)
            if done:
                return self.reset()
        return self._frame(obs)

    def _frame(self, obs) -> np.ndarray:
        frame = self.recorder.frame(obs)
        return frame if self.options is None else transform(frame[None], self.options)[0]

    def close(self) -> None:
        self.recorder.env.close()


def _sizes(store: Store, opts: dict, size: tuple[int, int]):
    """(the recording's frame size, the build's crop-and-resize) that bring a game frame to `size`."""
    if store.attrs["source"].get("kind") == "env":
        return tuple(size), None
    crop = tuple(opts["crop"]) if opts.get("crop") else None
    raw = None
    try:
        raw = open_store(store.attrs["source"]["sources"][0]["path"]).attrs["frame_size"]
    except (StoreError, KeyError, OSError):
        if crop:
            return "unknown", None
    first = tuple(raw) if raw else tuple(size)
    return first, BuildOptions(size=tuple(size), crop=crop)
