"""The report folder of `dreamcade eval drift`: metrics.json (every figure, with the command,
versions, checkpoint step and data paths), PNG plots, one MP4 per episode (recorded | generated,
the metric drawn under it) and index.html, which shows it all on one page.

A report is written to a temporary folder beside the target and renamed into place at the end
(dataset.outputs), so an interrupted evaluation never leaves a folder that looks complete.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from dreamcade.dataset.errors import plural
from dreamcade.dataset.outputs import Output
from dreamcade.dataset.store import software_version
from dreamcade.eval import html as H
from dreamcade.eval.drift import ModelEval
from dreamcade.eval.plots import GEN, REAL, plot_health, plot_quality, plot_sweep
from dreamcade.eval.results import Reference, Rollouts, SessionResult
from dreamcade.eval.settings import DriftSettings
from dreamcade.eval.strip import write_comparison
from dreamcade.eval.summary import chunk_means, decade_steps, drift_means, rollout_summary, session_summary
from dreamcade.eval.sweep import COLUMNS, plot_axes
from dreamcade.model.config import guided
from dreamcade.eval.video import grid, upscale, write_image

REPORT_MARK = "metrics.json"


# -- the folder -----------------------------------------------------------------------------------------

def report_output(out: str | Path, overwrite: bool, inputs: list[str] = (), around: list[str] = ()) -> Output:
    """The report folder as an output (dataset.outputs), checked and locked before any work:
    never one of the input stores, nor inside or around one; --overwrite replaces only a report."""
    return Output(out, what="eval report", inputs=list(inputs), around=[a for a in around if a],
                  overwrite=overwrite, replaces=lambda p: (p / REPORT_MARK).is_file()).__enter__()


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=1, allow_nan=False) + "\n")


def versions() -> dict:
    import torch

    return {"dreamcade": software_version(), "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def provenance(command: list[str], checkpoint: dict | None, data: list[str], sessions: list[str],
               device: str, settings: DriftSettings) -> dict:
    s = {k: v for k, v in vars(settings).items() if k != "progress"}
    return {"command": " ".join(command), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "versions": versions(),
            "device": device, "checkpoint": checkpoint, "data": data, "session_stores": sessions,
            "settings": {**s, "chunk_frames": settings.chunk}}


def command_line(argv: list[str] | None = None) -> list[str]:
    """How this evaluation was started, as a person would type it: `argv` is what followed
    `dreamcade eval` (by default this process's arguments)."""
    return ["dreamcade", "eval", *(sys.argv[1:] if argv is None else argv)]


# -- metrics.json ---------------------------------------------------------------------------------------

def drift_metrics(prov: dict, ref: Reference, ev: ModelEval | None, sess: list[SessionResult],
                  settings: DriftSettings, sampler: dict | None) -> dict:
    m = {**prov, "notes": list(ref.notes), "reference": ref.summary(), "sampler": sampler}
    if ev is not None:
        m["one_step"] = {"windows": int(len(ev.one_step.scores["model"]["psnr"])), **ev.one_step.summary()}
        m["rollouts"] = rollout_summary(ev.rollouts, settings, ref)
    if sess:
        m["sessions"] = session_summary(sess, settings, ref)
        m["notes"] += [r.note for r in sess if r.note]
    return m


# -- plots and videos -------------------------------------------------------------------------------------

def _levels(ref: Reference) -> list:
    if ref.idm is None:
        return []
    real = "real held-out" if ref.data.held_out_by else "real"
    return [(ref.idm.ceiling, f"ceiling: {real} transitions", "--"), (ref.idm.chance, "chance", ":")]


def rollout_files(out: Path, ev: ModelEval, ref: Reference, settings: DriftSettings, n_videos: int) -> dict:
    r = ev.rollouts
    files = {"quality_plot": "quality.png", "health_plot": "health.png", "one_step_samples": "one_step.png"}
    plot_quality(out / "quality.png", r.psnr, r.ssim, r.static_psnr, r.static_ssim,
                 settings.psnr_thresholds, settings.ssim_thresholds)
    size = settings.chunk
    starts = list(range(0, r.psnr.shape[1], size))
    series = [{"label": "generated", "colour": GEN, "health": r.health, "starts": starts,
               "drift": drift_means(r.drift, len(starts)),
               "action": chunk_means(r.action, size) if ref.action_scored else None,
               "action_levels": _levels(ref)},
              {"label": "recorded (same episodes)", "colour": REAL, "health": r.real_health, "starts": starts,
               "drift": drift_means(r.real_drift, len(starts)), "ls": "--",
               "action": chunk_means(r.real_action, size) if ref.action_scored else None}]
    plot_health(out / "health.png", ref.health, series, "rollouts")
    s = ev.one_step.samples
    write_image(out / "one_step.png", grid([upscale(row, max(1, 64 // row.shape[1])) for row in s]))
    steps = write_steps_image(out / "steps.png", r)
    files["steps_image"] = {"file": "steps.png", "steps": steps}
    files["videos"] = episode_videos(out, r, ref, settings, n_videos)
    return files


def shown_steps(horizon: int) -> list[int]:
    """Steps 1, 10, 100, 1,000, 10,000 ... up to the horizon, and the horizon itself."""
    steps = decade_steps(horizon)
    return steps + ([horizon] if steps[-1] != horizon else [])


def write_steps_image(path: Path, r: Rollouts, episodes: int = 4) -> list[int]:
    """For up to `episodes` rollouts, a row of recorded frames (dark once the recording has
    ended) over a row of generated ones, at steps 1, 10, 100, ... (shown_steps)."""
    steps = shown_steps(min(len(g) for g in r.generated))
    rows = []
    for case, gen in list(zip(r.cases, r.generated))[:episodes]:
        dark = np.full(gen.shape[1:], 24, np.uint8)
        rows.append(np.stack([case.real[t - 1] if t <= case.reference_steps else dark for t in steps]))
        rows.append(np.stack([gen[t - 1] for t in steps]))
    write_image(path, grid([upscale(row, max(1, 64 // row.shape[1])) for row in rows]))
    return steps


def episode_videos(out: Path, r: Rollouts, ref: Reference, settings: DriftSettings, n: int) -> list[dict]:
    (out / "videos").mkdir(exist_ok=True)
    files = []
    todo = list(zip(r.cases, r.generated))[:n]
    for i, (case, gen) in enumerate(tqdm(todo, desc="videos", disable=not settings.progress, leave=False)):
        T, R = len(gen), case.reference_steps
        sharp = r.health[i].sharpness / max(ref.health.sharpness, 1e-12)
        texts = [f"step {t + 1}/{T}   PSNR {r.psnr[i, t]:.1f} dB   SSIM {r.ssim[i, t]:.3f}" if t < R else
                 f"step {t + 1}/{T}   past the recording: no ground truth   sharpness x{sharp[t]:.2f}"
                 for t in range(T)]
        name = f"videos/episode_{i:02d}.mp4"
        frames = write_comparison(out / name, gen, case.real, r.psnr[i], texts, ref.data.fps,
                                  tuple(settings.psnr_thresholds))
        files.append({"file": name, "frames": frames, "store": case.path, "start": case.start,
                      "reference_steps": R})
    return files


def session_files(out: Path, sess: list[SessionResult], ref: Reference, settings: DriftSettings, n_videos: int) -> dict:
    size = settings.chunk
    T = max(len(r.seq.frames) for r in sess)
    starts = list(range(0, T, size))
    acts = [r.action for r in sess if r.action is not None and len(r.action)]
    action = None
    if acts and ref.action_scored:
        arr = np.stack([np.concatenate([a, np.full(T - len(a), np.nan)]) for a in acts])
        action = chunk_means(arr, size)
    series = [{"label": "session", "colour": "tab:purple", "health": [r.health for r in sess], "starts": starts,
               "drift": drift_means([r.drift for r in sess], len(starts)), "action": action,
               "action_levels": _levels(ref)}]
    plot_health(out / "sessions_health.png", ref.health, series, "saved sessions")
    (out / "videos").mkdir(exist_ok=True)
    videos = []
    for i, r in enumerate(sess[:n_videos]):
        h, f = r.health, r.seq.frames
        ratio = h.sharpness / max(ref.health.sharpness, 1e-12)
        texts = [f"frame {t + 1}/{len(f)}   sharpness x{ratio[t]:.2f}   colour {h.colour_distance[t]:.3f}   "
                 f"nearest {h.nearest[t]:.3f}" for t in range(len(f))]
        name = f"videos/session_{i:02d}.mp4"
        videos.append({"file": name, "frames": write_comparison(out / name, f, None, ratio, texts, ref.data.fps),
                       "store": r.seq.path, "episode": r.seq.episode})
    return {"health_plot": "sessions_health.png", "videos": videos}


# -- index.html ---------------------------------------------------------------------------------------------

def _ms(s: dict, d: int = 2) -> str:
    return "–" if s["mean"] is None else f"{s['mean']:.{d}f} ± {s['std']:.{d}f}"


def _header(m: dict) -> list[str]:
    ck = m.get("checkpoint") or {}
    s = m["settings"]
    many = m.get("checkpoints") or []
    rows = [["checkpoint", ck.get("path") or ", ".join(c["path"] for c in many) or "–"],
            ["checkpoint step", ck.get("step") or ", ".join(str(c["step"]) for c in many) or "–"],
            ["data", ", ".join(m["data"])], ["held out", m["reference"]["held_out"]],
            ["sessions", ", ".join(m["session_stores"]) or "–"], ["device", m["device"]],
            ["horizon (steps)", s["horizon"]], ["drift chunk (frames)", s["chunk_frames"]]]
    if m.get("sampler"):
        rows += [["sampler steps", f"{m['sampler']['steps']} ({m['sampler'].get('method', 'euler')}"
                                   f"{guided(m['sampler'].get('guidance', 1), m['sampler'].get('guidance_rescale', 0))})"],
                 ["context noise (asked / used)", f"{m['sampler']['context_noise']} / {m['sampler']['context_noise_used']}"]]
        if m["sampler"].get("upsampler"):
            u = m["sampler"]["upsampler"]
            rows.append(["upsampler (two stages)", f"x{u['scale']}, {u['dynamics_size']} to {u['size']}, {u['steps']} "
                                                   f"sampler steps ({u['method']})"])
    v = m["versions"]
    rows.append(["versions", f"dreamcade {v['dreamcade']}, torch {v['torch']}, python {v['python']}"])
    out = [H.table(["", ""], rows), f"<pre>{H.esc(m['command'])}</pre>"]
    out += [H.para(n, "note") for n in m["notes"]]
    return out


def _real(ref: dict) -> str:
    """"real held-out" when the data held something out, else "real" (every episode was used)."""
    return "real held-out" if ref.get("held_out_by") else "real"


def _measured_on(ref: dict) -> str:
    """What the figures are measured on, in words: the held-out data, or every episode."""
    return ref["held_out"] if ref.get("held_out_by") else "every episode (nothing is held out)"


def _one_step(m: dict) -> str:
    names = {"model": "model", "repeat_last": "repeat the last frame", "mean_frame": "mean training frame",
             "bicubic": "the model's low frame widened bicubically"}
    rows = [[names[k], _ms(v["psnr"]), v["psnr_pooled"], _ms(v["ssim"], 3)] for k, v in m["one_step"].items()
            if k in names]
    return H.section("One step, teacher-forced", H.para(
        f"Each of {m['one_step']['windows']} windows of {_measured_on(m['reference'])}: the next frame predicted "
        "from the real past "
        "frames and actions. Pooled PSNR is that of the mean squared error over all windows (identical frames "
        "cannot inflate it)."), H.table(["predictor", "PSNR dB (mean ± std)", "PSNR dB pooled", "SSIM"], rows),
        H.image("one_step.png", "one-step samples"),
        H.para("Rows: last real context frame, predicted next frame, real next frame."))


def _crossing_rows(c: list[dict], n: int, unit: str) -> list[list]:
    return [[f"{x['threshold']}{unit}", x["curve_step"], f"{x['episodes_below']} of {n}",
             ", ".join("–" if e is None else str(e) for e in x["episodes"])] for x in c]


def _rollouts(m: dict) -> str:
    r = m["rollouts"]
    n = len(r["episodes"])
    fz = r["frozen_frame"]
    overall = H.table(["", "PSNR dB (mean ± std)", "PSNR dB pooled", "SSIM (mean ± std)"],
                      [["model", _ms(r["psnr"]["overall"]), r["psnr"]["pooled"], _ms(r["ssim"]["overall"], 3)],
                       ["frozen last frame", _ms(fz["psnr"]["overall"]), fz["psnr"]["pooled"],
                        _ms(fz["ssim"]["overall"], 3)]]
                      + ([["the model's low frames widened bicubically", _ms(r["bicubic"]["psnr"]["overall"]),
                           r["bicubic"]["psnr"]["pooled"], _ms(r["bicubic"]["ssim"]["overall"], 3)]]
                         if r.get("bicubic") else []))
    at = r["psnr_at_steps"]
    names = {"model": "model", "frozen_frame": "frozen last frame",
             "bicubic": "the model's low frames widened bicubically"}
    at_steps = H.table(["PSNR dB pooled over the episodes, at step"] + [f"{s:,}" for s in at["steps"]],
                       [[names[k]] + at[k] for k in names if k in at])
    rows = _crossing_rows(r["psnr"]["crossings"], n, " dB") + _crossing_rows(r["ssim"]["crossings"], n, " SSIM")
    below = r["psnr_below_frozen_frame_from_step"]
    ref = m["reference"]
    part = "segment" if ref.get("held_out_by") == "time" else "episode"
    return H.section("Open-loop rollouts", _healthy(r["healthy_horizon"], r["horizon"], _real(ref)), H.para(
        f"{rollout_count(n, ref)}, each started from its first real frames and driven by its recorded "
        f"actions for {r['horizon']} steps. Ground truth lasts as long as the {part} ({r['reference_steps']['min']} to "
        f"{r['reference_steps']['max']} steps here): PSNR and SSIM stop there, the health figures below run on. "
        f"Past the recording the {part}'s actions are replayed from its start. Held out: {ref['held_out']}."),
        overall, at_steps,
        H.image("steps.png", "recorded and generated frames at steps " + ", ".join(map(str, shown_steps(r["horizon"])))),
        H.para("Steps " + ", ".join(f"{t:,}" for t in shown_steps(r["horizon"])) + " of the first episodes: in "
               "each pair of rows the recording above (dark once it has ended), the model below."),
        H.image("quality.png", "PSNR and SSIM against step"),
        H.para("The model's pooled PSNR first falls below the frozen last frame's at step "
               f"{'–' if below is None else below}."),
        H.table(["falls below", "step (all episodes)", "episodes below", "step per episode"], rows),
        H.para("Step (all episodes): where the curve over episodes first falls below the threshold (PSNR pooled: "
               "that of the mean squared error over episodes; SSIM: the mean)."),
        H.para(f"Generation: {H.fmt(r['generated_frames_per_second'], 1)} frames/s (all episodes of a batch together)."))


def rollout_count(n: int, ref: dict) -> str:
    """The rollouts, counted: "2 held-out episodes", "1 held-out segment" (held out by time) or
    "2 episodes, nothing held out"."""
    by = ref.get("held_out_by")
    if by is None:
        return f"{plural(n, 'episode')}, nothing held out"
    return plural(n, "held-out segment" if by == "time" else "held-out episode")


def _healthy(hh: dict, horizon: int, real: str) -> str:
    """The headline for long sessions: the healthy horizon, worst episode and median."""
    left = ", ".join(f"{n}{'' if k is None else f' ({k})'}" for n, k in zip(hh["per_episode"], hh["left_by"]))
    return H.para(f"Healthy horizon: {hh['min']} steps in the worst episode, {H.fmt(hh['median'], 0)} median, of "
                  f"{horizon}: the steps before the first window of {hh['window']} steps whose health (sharpness, "
                  f"detail, motion, colour distance, nearest-frame RMSE) leaves the band windows of {real} frames "
                  f"occupy. Per episode (the figure that left first): {left}.")


def at(values: list, k: int):
    """values[k], or None (an empty cell) past its end."""
    return values[k] if k < len(values) else None


def _chunk_table(health: dict, real: dict | None, action: dict | None, frames: int, real_frames: str,
                 low_colour: list | None = None) -> str:
    """Health per chunk; `low_colour`: a two-stage world's colour distance of its own low frames
    widened bicubically, per chunk (beside the world's: which stage moved the colours)."""
    g = health
    header = ["steps", "sharpness / real", "colour distance"] + (["…low frames widened"] if low_colour else []) + [
        "nearest RMSE", "drift score"]
    if real:
        header += ["drift score, recorded"]
    if action and action.get("unmeasured"):
        action = None  # no column of dashes: _action says why
    if action:
        header += ["action accuracy"] + (["…recorded"] if real else [])
    rows = []
    for k, ratio in enumerate(g["sharpness"]["per_chunk_ratio_to_real"]):
        row = [f"{k * frames + 1}–{(k + 1) * frames}", ratio, g["colour_distance"]["per_chunk_mean"][k]]
        row += [at(low_colour, k)] if low_colour else []
        row += [g["nearest"]["per_chunk_mean"][k], g["drift_score"]["per_chunk_mean"][k]]
        if real:
            row.append(at(real["drift_score"]["per_chunk_mean"], k))
        if action:  # a session shorter than the horizon has fewer chunks of transitions than of frames
            row.append(at(action["per_chunk"], k))
            if real:
                row.append(at(action["real_per_chunk"], k))
        rows.append(row)
    real_row = [f"{real_frames} frames", 1.0, g["colour_distance"]["real_level"]] + ([None] if low_colour else [])
    real_row += [g["nearest"]["real_level"], 0.0]
    rows.append(real_row + [None] * (len(header) - len(real_row)))
    return H.table(header, rows)


HEALTH_HELP = ("Sharpness is the variance of the Laplacian of the luma, shown as a ratio to that of real frames "
               "(below 1: blurrier). Motion is the mean absolute change from one frame to the next (0: frozen). Colour distance is the earth mover's distance between a frame's "
               "distribution of levels and the training data's, per channel (k levels off everywhere: k / 255). Nearest RMSE is the distance to the closest of the "
               "bank of training frames ([0, 1] units). The drift score compares each chunk with the first: "
               "|log2 sharpness ratio| + colour histogram shift + the rise in nearest distance over the spread of the "
               "real frames (the mean distance between two training frames); 0 = unchanged, and each term reaches 1 "
               "at a clear change. The recorded episodes' own score shows how much the game itself changes.")


def _health(m: dict) -> str:
    r = m["rollouts"]
    frames = r["health"]["drift_score"]["chunk_frames"]
    low = ((r.get("bicubic") or {}).get("colour_distance") or {}).get("per_chunk_mean")
    return H.section("Health against time (no ground truth needed)", H.para(HEALTH_HELP + (
        " In a two-stage world the colour distance of its own low frames widened bicubically sits beside the "
        "world's: the dynamics model's colours without the upsampler. Where both are high, the dynamics model "
        "moved them; where only the world's is, the upsampler did." if low else "")),
                     H.image("health.png", "health against time"),
                     _chunk_table(r["health"], r["real_health"], r.get("action_following"), frames,
                                  _real(m["reference"]), low))


def _action(a: dict | None, ref: dict, recorded: bool) -> str:
    if a is None:
        return H.section("Action following", H.para("Not scored (no classifier: see the notes)."))
    c = ref["action_classifier"]
    rows = [[f"{_real(ref)} transitions (ceiling)", c["ceiling"]], ["chance (most common action)", c["chance"]],
            ["generated, whole horizon", a["accuracy"]]]
    if a.get("unmeasured"):
        return H.section("Action following", H.unmeasured(a["unmeasured"]), H.table(["", "accuracy"], rows[:2]))
    if recorded:
        rows += [["generated, recorded steps only", a["on_recorded_steps"]],
                 ["recorded, same steps", a["real_on_recorded_steps"]]]
    rows.append(["generated, whole horizon, from chance (0) to the ceiling (1)", a["from_chance"]])
    return H.section("Action following", H.para(
        f"An inverse-dynamics classifier trained on {c['train_transitions']} real transitions (frame t, frame t+1 "
        f"-> action; controls {', '.join(c['scored_controls'])}) reads each generated transition; accuracy is how "
        "often it sees the action that was given."
        + (f" Not scored: {', '.join(c['unread_controls'])}, which it does not read on real frames (no visible "
           "effect, or hardly ever let go)." if c.get("unread_controls") else "")), H.table(["", "accuracy"], rows),
        *_keys(a.get("per_key")))


def _keys(keys: dict | None) -> list[str]:
    """Each key's row: how often the classifier reads it held where it was, and where it was not."""
    if not keys:
        return []
    return [H.para("Each key: of the transitions that held it, the share in which the classifier reads it held; "
                   "of the others, the share in which it reads it anyway (generated over the whole horizon, "
                   "recorded over the recorded steps)."),
            H.table(["key", "generated: held in", "read when held", "…when not held", "recorded: held in",
                     "read when held", "…when not held"],
                    [[name, k["held"], k["shown_when_held"], k["shown_when_not_held"], k.get("real_held"),
                      k.get("real_shown_when_held"), k.get("real_shown_when_not_held")] for name, k in keys.items()])]


def _videos(files: list[dict], what: str) -> str:
    items = [H.video(f["file"], f"{what} {i}: {f['store']} from frame {f.get('start', '')}")
             for i, f in enumerate(files)]
    return f'<div class="videos">{"".join(items)}</div>'


def _sessions(m: dict) -> str:
    s = m["sessions"]
    frames = s["health"]["drift_score"]["chunk_frames"]
    rows = [[q["store"], q["episode"], q["frames"], q["note"] or ""] for q in s["sequences"]]
    return H.section("Saved sessions (reference-free)", H.para(
        "Sessions have no ground truth: only health, drift and action following are measured. " + HEALTH_HELP),
        _healthy(s["healthy_horizon"], max(q["frames"] for q in s["sequences"]), _real(m["reference"])),
        H.table(["store", "episode", "frames", "note"], rows), H.image("sessions_health.png", "session health"),
        _chunk_table(s["health"], None, s.get("action_following"), frames, _real(m["reference"])),
        _action(s.get("action_following"), m["reference"], False),
        _videos(m["files"]["sessions"]["videos"], "session"))


def drift_html(m: dict) -> str:
    name = (m.get("checkpoint") or {}).get("path") or ", ".join(m["session_stores"])
    body = _header(m)
    if "rollouts" in m:
        body += [_one_step(m), _rollouts(m), _health(m),
                 _action(m["rollouts"].get("action_following"), m["reference"], True),
                 H.section("Videos", H.para("Left: the recording; right: generated from the same start with the "
                                            "same actions. Under them: PSNR over the rollout (the red cursor "
                                            "marks the frame) and the figures of the frame."),
                           _videos(m["files"]["rollouts"]["videos"], "episode"))]
    if "sessions" in m:
        body.append(_sessions(m))
    return H.page(f"Drift report: {name}", body)


def write_drift_report(out: Path, m: dict, ev: ModelEval | None, sess: list[SessionResult], ref: Reference,
                       settings: DriftSettings, n_videos: int) -> None:
    """Plots, videos, metrics.json and index.html into `out` (the temporary folder)."""
    m["files"] = {}
    if ev is not None:
        m["files"]["rollouts"] = rollout_files(out, ev, ref, settings, n_videos)
    if sess:
        m["files"]["sessions"] = session_files(out, sess, ref, settings, n_videos)
    m["files"]["index"] = "index.html"
    write_json(out / "metrics.json", m)
    (out / "index.html").write_text(drift_html(m))


# -- the sweep's folder -------------------------------------------------------------------------------------

def write_sweep_report(out: Path, m: dict) -> None:
    """sweep.png, metrics.json and index.html into `out` (the temporary folder)."""
    rows = m["rows"]
    x, groups = plot_axes(rows)
    idm = m["reference"]["action_classifier"]
    plot_sweep(out / "sweep.png", rows, x, groups, idm["ceiling"] if idm else None)
    m["files"] = {"plot": "sweep.png", "index": "index.html"}
    write_json(out / "metrics.json", m)
    b = m.get("best")
    body = _header(m) + [H.section("Sweep", H.para(
        "One row per setting. Rollout PSNR is pooled over every recorded step of every rollout; steps to "
        f"threshold is where the mean PSNR curve first falls below {rows[0]['psnr_threshold']} dB; final drift "
        "is the drift score of the last chunk (0 = as healthy as the first chunk); final sharpness is the last "
        "chunk's sharpness over real frames'; action accuracy is the action classifier's over the whole horizon "
        f"(ceiling {H.fmt(m['reference']['action_classifier'] and m['reference']['action_classifier']['ceiling'])})."),
        H.table([h for _, h in COLUMNS], [[r[k] for k, _ in COLUMNS] for r in rows]),
        H.image("sweep.png", "sweep"),
        H.para("Most stable among the best rollout PSNRs (within 0.5 dB): " + (
            f"{b['checkpoint']}, context noise {b['context_noise_used']}, {b['sampler_steps']} steps, "
            f"{b['sampler_method']}" if b else "–")))]
    (out / "index.html").write_text(H.page("Sweep: " + ", ".join(r for r in dict.fromkeys(
        x["checkpoint"] for x in rows)), body))
