"""Every eval metric on images with known answers: identical images, a known shift, a known
blur, noise at a known level. Tolerances are stated where the answer is statistical."""

import math

import numpy as np
import pytest
import torch

from dreamcade.eval.health import (LEVEL_FLOOR, FrameHealth, HealthBand, HealthReference, colour_distance, drift_score,
                         frame_histograms, frame_health, histogram_distance, level_distribution, motion, nearest,
                         sharpness)
from dreamcade.eval.metrics import PSNR_CAP, psnr, psnr_from_mse, ssim


def even_noise(n=4, h=64, w=64, seed=0) -> np.ndarray:
    """Grey frames of white noise on the even levels 0..254 (uniform): a [1/2, 1/2] blur of them
    stays on whole levels, so no rounding enters. Variance in [0, 1] units: 4 (128^2 - 1) / 12 / 255^2."""
    g = np.random.default_rng(seed).integers(0, 128, (n, h, w, 1)) * 2
    return np.repeat(g, 3, axis=3).astype(np.uint8)


NOISE_VAR = 4 * (128**2 - 1) / 12 / 255**2


def hblur(frames: np.ndarray) -> np.ndarray:
    """The known blur: each pixel averaged with its right neighbour (wrapping around)."""
    f = frames.astype(np.int64)
    return ((f + np.roll(f, -1, axis=2)) // 2).astype(np.uint8)


def chw(frames: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(frames).permute(0, 3, 1, 2)


def checkerboard(h=16, w=16, high=255) -> np.ndarray:
    y, x = np.mgrid[:h, :w]
    return np.repeat(((x + y) % 2 * high)[None, :, :, None], 3, axis=3).astype(np.uint8)


# -- PSNR -------------------------------------------------------------------------------------------

def test_psnr_identical_is_capped():
    x = chw(even_noise(2))
    assert torch.equal(psnr(x, x), torch.full((2,), PSNR_CAP))


def test_psnr_of_a_known_shift_is_exact():
    a = torch.full((1, 3, 8, 8), 100, dtype=torch.uint8)
    b = torch.full((1, 3, 8, 8), 110, dtype=torch.uint8)
    assert psnr(a, b).item() == pytest.approx(20 * math.log10(255 / 10), abs=1e-4)
    # float frames are read as [-1, 1]: the same images give the same figure
    assert psnr(a.float() / 127.5 - 1, b.float() / 127.5 - 1).item() == pytest.approx(psnr(a, b).item(), abs=1e-4)


def test_psnr_of_a_known_blur_within_0_1_db():
    """x - blur(x) = (x - x_right) / 2 has variance var / 2 for white noise (16 frames 64x64)."""
    x = even_noise(16)
    expect = 10 * math.log10(2 / NOISE_VAR)
    pooled = psnr_from_mse(((chw(x).double() - chw(hblur(x)).double()) / 255).pow(2).mean()).item()
    assert pooled == pytest.approx(expect, abs=0.1)
    assert psnr(chw(x), chw(hblur(x))).mean().item() == pytest.approx(expect, abs=0.1)


def test_psnr_of_noise_at_a_known_level_within_0_05_db():
    sigma = 8.0  # levels; rounding to whole levels adds 1/12 level^2 of variance
    g = torch.Generator().manual_seed(0)
    clean = torch.full((4, 3, 64, 64), 128.0)
    noisy = (clean + sigma * torch.randn(clean.shape, generator=g)).round().clamp(0, 255).to(torch.uint8)
    expect = 10 * math.log10(255**2 / (sigma**2 + 1 / 12))
    assert psnr(noisy, clean.to(torch.uint8)).mean().item() == pytest.approx(expect, abs=0.05)


# -- SSIM -------------------------------------------------------------------------------------------

def test_ssim_identical_is_one():
    x = chw(even_noise(2))
    assert torch.allclose(ssim(x, x), torch.ones(2), atol=1e-5)


def test_ssim_of_a_known_shift_on_flat_images_is_exact():
    """No structure, so SSIM is the luminance term (2ab + c1) / (a^2 + b^2 + c1) alone."""
    a, b = 100 / 255, 110 / 255
    c1 = 0.01**2
    x = torch.full((1, 3, 16, 16), 100, dtype=torch.uint8)
    y = torch.full((1, 3, 16, 16), 110, dtype=torch.uint8)
    assert ssim(x, y).item() == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), abs=1e-5)


def test_ssim_of_noise_at_a_known_level_within_5_percent():
    """A flat image against itself plus noise of std s: SSIM ~ c2 / (s_hat^2 + c2), with the
    windowed variance estimate s_hat^2 = s^2 (1 - sum w^2) on average (Gaussian window)."""
    s = 0.05
    g = torch.Generator().manual_seed(0)
    clean = torch.full((4, 3, 64, 64), 0.5)
    noisy = clean + s * torch.randn(clean.shape, generator=g)
    w = torch.exp(-(torch.arange(11) - 5.0) ** 2 / (2 * 1.5**2))
    w2 = float(((w / w.sum()) ** 2).sum() ** 2)
    c2 = 0.03**2
    expect = c2 / (s * s * (1 - w2) + c2)
    got = ssim(noisy * 2 - 1, clean * 2 - 1).mean().item()
    assert got == pytest.approx(expect, rel=0.05)


def test_ssim_is_the_windowed_formula_at_every_valid_pixel():
    """Against SSIM written out pixel by pixel (the 11x11 Gaussian window at each valid position,
    in numpy) on frames of odd sizes: the separable blur leaves no position out and no row over."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (2, 13, 17, 3), dtype=np.uint8)
    y = np.clip(x.astype(int) + rng.integers(-40, 40, x.shape), 0, 255).astype(np.uint8)
    k = np.exp(-(np.arange(11) - 5.0) ** 2 / (2 * 1.5**2))
    k = np.outer(k, k) / k.sum() ** 2
    expect = []
    for a, b in zip(x / 255.0, y / 255.0):
        vals = []
        for c in range(3):
            for i in range(13 - 10):
                for j in range(17 - 10):
                    p, q = a[i:i + 11, j:j + 11, c], b[i:i + 11, j:j + 11, c]
                    mp, mq = (k * p).sum(), (k * q).sum()
                    vp, vq, cv = (k * p * p).sum() - mp**2, (k * q * q).sum() - mq**2, (k * p * q).sum() - mp * mq
                    vals.append((2 * mp * mq + 1e-4) * (2 * cv + 9e-4) / ((mp**2 + mq**2 + 1e-4) * (vp + vq + 9e-4)))
        expect.append(np.mean(vals))
    np.testing.assert_allclose(ssim(chw(x), chw(y)).numpy(), expect, rtol=1e-5)


def test_ssim_falls_with_blur():
    x = even_noise(2)
    once, twice = hblur(x), hblur(hblur(x))
    s1, s2 = ssim(chw(x), chw(once)).mean().item(), ssim(chw(x), chw(twice)).mean().item()
    assert 1 > s1 > s2 > 0


# -- sharpness --------------------------------------------------------------------------------------

def test_sharpness_of_flat_and_checkerboard_frames_is_exact():
    assert sharpness(np.full((2, 8, 8, 3), 77, np.uint8)).tolist() == [0.0, 0.0]
    # every interior Laplacian of a 0/1 checkerboard is +4 or -4, half each: variance 16
    assert sharpness(checkerboard()) == pytest.approx([16.0], rel=1e-5)
    assert sharpness(checkerboard(high=128)) == pytest.approx([16.0 * (128 / 255) ** 2], rel=1e-5)


def test_sharpness_of_noise_and_of_a_known_blur_within_3_percent():
    """White noise of variance v: Laplacian variance 20 v. Blurred by [1/2, 1/2]: 6 v."""
    x = even_noise(8)
    assert sharpness(x).mean() == pytest.approx(20 * NOISE_VAR, rel=0.03)
    assert sharpness(hblur(x)).mean() == pytest.approx(6 * NOISE_VAR, rel=0.03)
    assert (sharpness(hblur(x)) / sharpness(x)).mean() == pytest.approx(0.3, rel=0.03)


# -- colour -----------------------------------------------------------------------------------------

def test_colour_histogram_distance_known_answers():
    black, white = np.zeros((1, 8, 8, 3), np.uint8), np.full((1, 8, 8, 3), 255, np.uint8)
    half = black.copy()
    half[:, :4] = 255
    h = lambda f: frame_histograms(f)[0]
    assert frame_histograms(half)[0].sum(1).tolist() == [1.0, 1.0, 1.0]
    assert histogram_distance(h(black), h(black)) == 0.0
    assert histogram_distance(h(black), h(white)) == 1.0
    assert histogram_distance(h(half), h(black)) == 0.5
    # a shift of one bin's width (16 levels) moves every value to the next bin
    grey = np.full((1, 8, 8, 3), 40, np.uint8)
    assert histogram_distance(h(grey), h(grey + 16)) == 1.0
    assert histogram_distance(h(grey), h(grey + 3)) == 0.0


def test_colour_distance_known_answers():
    """The earth mover's distance between level distributions, in levels / 255: a shift of k
    levels costs k / 255 wherever the levels fall, bin edges included."""
    black, white = np.zeros((1, 8, 8, 3), np.uint8), np.full((1, 8, 8, 3), 255, np.uint8)
    half = black.copy()
    half[:, :4] = 255
    d = lambda f, g: float(colour_distance(f, level_distribution(g))[0])
    assert d(black, black) == 0.0
    assert d(black, white) == pytest.approx(1.0)
    assert d(half, black) == pytest.approx(0.5)
    grey = np.full((1, 8, 8, 3), 40, np.uint8)
    assert d(grey + 3, grey) == pytest.approx(3 / 255)
    assert d(grey + 16, grey) == pytest.approx(16 / 255)
    edge = np.full((1, 8, 8, 3), 47, np.uint8)  # 47 | 48 is a 16-level bin edge
    assert d(edge + 1, edge) == pytest.approx(1 / 255)
    assert histogram_distance(frame_histograms(edge + 1)[0], frame_histograms(edge)[0]) == 1.0
    one_channel = grey.copy()
    one_channel[..., 0] += 30  # red 30 levels off, green and blue exact: 30 / 255 / 3
    assert d(one_channel, grey) == pytest.approx(10 / 255)
    # against the mean distribution of several frames: each frame's own distance, one call
    both = np.concatenate([black, white])
    assert colour_distance(both, level_distribution(both)).tolist() == pytest.approx([0.5, 0.5])


def test_a_band_of_identical_real_colours_still_has_room_for_a_level():
    """Real frames all of one colour distribution (twice their highest colour distance is 0):
    the band's upper end is LEVEL_FLOOR, so frames one level off stay healthy and ten off leave."""
    real = np.repeat(checkerboard(8, 8, high=200), 60, 0)
    ref = HealthReference.build(real[:10], real[:10])
    band = HealthBand.build([frame_health(real, ref)], 20)
    assert band.high["colour_distance"] == band.high["nearest"] == LEVEL_FLOOR
    assert band.horizon(frame_health(real + 1, ref)) == (60, None)
    steps, figure = band.horizon(frame_health(real + 10, ref))
    assert steps == 0 and figure in ("colour_distance", "nearest")


def test_frame_health_in_batches_is_the_same_as_at_once():
    """A long session is measured a batch of frames at a time (10,000 frames at the size of the
    screen are gigabytes as floats); every figure is the same as over the whole sequence at once,
    the motion across a batch's edge included."""
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 256, (23, 8, 10, 3), dtype=np.uint8)
    frames[10:] = frames[10]  # a still stretch: motion 0 from frame 11 on, not at the edge (frame 10)
    ref = HealthReference.build(frames[:6], frames[6:12])
    whole, cut = frame_health(frames, ref, batch=len(frames)), frame_health(frames, ref, batch=5)
    for name in ("sharpness", "colour_distance", "nearest", "histograms", "motion", "detail"):
        np.testing.assert_array_equal(getattr(cut, name), getattr(whole, name), err_msg=name)
    assert cut.motion[10] > 0 and (cut.motion[11:] == 0).all()
    assert len(frame_health(frames[:0], ref, batch=5)) == 0


# -- nearest training frame -------------------------------------------------------------------------

def test_nearest_frame_distance_known_answers():
    bank = np.stack([np.full((8, 8, 3), v, np.uint8) for v in (10, 60, 120, 200)])
    query = np.stack([bank[2], bank[1] + 10, checkerboard(8, 8)[0]])
    d, i = nearest(query, bank)
    assert i.tolist()[:2] == [2, 1]
    assert d[0] == 0.0
    assert d[1] == pytest.approx(10 / 255, abs=1e-6)
    assert i[2] == 2  # 0/255 checkerboard: nearest to the level 120 frame (mean square 127.5^2 + 7.5^2)
    assert d[2] == pytest.approx(math.sqrt((120**2 + 135**2) / 2) / 255, abs=1e-6)


# -- drift score ------------------------------------------------------------------------------------

def test_drift_score_known_answers():
    """Chunk 1 is chunk 0 at half the contrast: a quarter of the sharpness, half the colour mass
    moved to another bin, and off the training frames by 127 levels on half the pixels."""
    sharp, dull, black = checkerboard(8, 8), checkerboard(8, 8, high=128), np.zeros((1, 8, 8, 3), np.uint8)
    frames = np.concatenate([np.repeat(sharp, 4, 0), np.repeat(dull, 4, 0)])
    ref = HealthReference.build(np.concatenate([sharp, black]), sharp)
    assert ref.spread == pytest.approx(math.sqrt(0.5), abs=1e-6), "the two bank frames differ by 255 on half the pixels"
    d = drift_score(frame_health(frames, ref), 4, ref)
    assert d["start"] == [0, 4] and d["stop"] == [4, 8]
    assert d["score"][0] == 0.0
    assert d["sharpness_change"][1] == pytest.approx(2 * math.log2(128 / 255), abs=1e-5)
    assert d["colour_shift"][1] == pytest.approx(0.5)
    # chunk 0 is in the bank (distance 0); chunk 1's nearest is the sharp board, RMSE 127/255/sqrt(2)
    assert d["nearest_change"][1] == pytest.approx(127 / 255, abs=1e-6)
    assert d["score"][1] == pytest.approx(-2 * math.log2(128 / 255) + 0.5 + 127 / 255, abs=1e-5)
    steady = drift_score(frame_health(np.repeat(sharp, 8, 0), ref), 4, ref)
    assert steady["score"] == [0.0, 0.0]


def test_health_reference_levels():
    bank = even_noise(4, 16, 16)
    ref = HealthReference.build(bank, bank)
    assert ref.nearest == 0.0 and ref.colour_distance < 0.1
    assert ref.sharpness == pytest.approx(sharpness(bank).mean())
    h = frame_health(bank, ref)
    assert isinstance(h, FrameHealth) and len(h) == 4 and np.all(h.nearest == 0)


def block_game_frames(seed: int, n: int, size: int = 32) -> np.ndarray:
    """n consecutive frames of our block game under random held moves, uint8 [n, size, size, 3]."""
    from dreamcade.record.games import BlockGame
    game, rng = BlockGame(size=size, max_steps=10**9), np.random.default_rng(seed)
    frames, action = [game.reset(seed=seed)[0]], 1
    for t in range(n - 1):
        action = int(rng.integers(1, 5)) if t % 6 == 0 else action
        frames.append(game.step(action)[0])
    return np.stack(frames)


def test_motion_known_answers():
    still = np.full((3, 8, 8, 3), 100, np.uint8)
    assert motion(still).tolist() == [0.0, 0.0, 0.0]
    flip = np.stack([np.zeros((8, 8, 3), np.uint8), np.full((8, 8, 3), 255, np.uint8)] * 2)
    assert motion(flip).tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0])


def test_healthy_horizon_on_sequences_with_a_known_answer():
    """Real frames keep the whole horizon; frames that turn to noise, freeze or blur at step k
    lose it within one window of k, and the figure that left the band is named."""
    T, k, window = 1200, 600, 50
    bank = np.concatenate([block_game_frames(s, 400) for s in range(3)])
    ref = HealthReference.build(bank, block_game_frames(9, 400))
    band = HealthBand.build([frame_health(block_game_frames(s, 600), ref) for s in range(10, 14)], window)
    real = block_game_frames(20, T)
    assert band.horizon(frame_health(real, ref)) == (T, None)
    noise = real.copy()
    noise[k:] = np.random.default_rng(0).integers(0, 256, noise[k:].shape, dtype=np.uint8)
    frozen = real.copy()
    frozen[k:] = real[k]
    blurred = real.copy()
    blurred[k:] = real[k:].mean(axis=(1, 2), keepdims=True).round().astype(np.uint8)  # one flat colour
    for frames, figures in ((noise, {"sharpness", "motion", "colour_distance", "nearest"}), (frozen, {"motion"}),
                            (blurred, {"sharpness", "motion", "colour_distance", "nearest"})):
        steps, figure = band.horizon(frame_health(frames, ref))
        assert k - window <= steps <= k and figure in figures, (steps, figure)


def test_the_band_leaves_out_real_windows_that_are_not_gameplay():
    """A held-out episode that fades to black at step 400 and stays black: its four windows from
    there are left out (a black screen is far less sharp than the game and far off its colours),
    so the band is the one of the gameplay alone. With them in, its sharpness could fall to 0
    (all blur) without leaving it. Clean gameplay sheds no window."""
    window = 50
    bank = np.concatenate([block_game_frames(s, 400) for s in range(3)])
    ref = HealthReference.build(bank, block_game_frames(9, 400))
    clean = [frame_health(block_game_frames(s, 600), ref) for s in range(10, 14)]
    faded = block_game_frames(14, 600)
    faded[400:] = (faded[400:] * np.clip(1 - np.arange(200) / 10, 0, 1)[:, None, None, None]).round().astype(np.uint8)
    band = HealthBand.build(clean + [frame_health(faded, ref)], window)
    gameplay_only = HealthBand.build(clean + [frame_health(faded[:400], ref)], window)
    assert band.low == gameplay_only.low and band.high == gameplay_only.high
    assert gameplay_only.left_out == 0 and band.left_out == 4 and band.windows == 60
    assert band.low["sharpness"] > 0


def panning_view(start: int, steps: int, level: int = 0, width: int = 32, height: int = 24, speed: int = 3) -> np.ndarray:
    """A camera panning across a level that loops every 1,200 columns: 800 columns of brick (a
    high-contrast random texture in brown and near-black, drawn from `level`) and 400 of a dull
    wall (light grey, faint grain). Every frame moves; a view of the dull wall is nearly as flat
    as a blur."""
    rng = np.random.default_rng(level)
    brick = rng.integers(0, 2, (height, 800, 1)) * np.array([150, 80, 40]) + 30
    dull = 200 + rng.integers(0, 3, (height, 400, 1)) * np.array([1, 1, 1])
    world = np.concatenate([brick, dull], axis=1)
    cols = (start + speed * np.arange(steps))[:, None] + np.arange(width)[None]
    return world[:, cols % world.shape[1]].transpose(1, 0, 2, 3).astype(np.uint8)


def soften(frames: np.ndarray, passes: int = 3) -> np.ndarray:
    """A box blur of `passes` rounds of each pixel with its 4 neighbours (edges repeated)."""
    f = frames.astype(np.float64)
    for _ in range(passes):
        p = np.pad(f, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
        f = (p[:, 1:-1, 1:-1] + p[:, :-2, 1:-1] + p[:, 2:, 1:-1] + p[:, 1:-1, :-2] + p[:, 1:-1, 2:]) / 5
    return f.round().astype(np.uint8)


def test_the_healthy_horizon_sees_blur_on_a_view_that_moves():
    """A panning view whose frames blur from step k: the brick goes soft while the camera still
    moves and the colours stay the game's. The real views pass through a dull wall as flat as the
    blur, so the band of sharpness reaches down to it and sharpness alone calls the blurred brick
    healthy (it only sees the blur once the view reaches the dull wall, blurred flatter still);
    The training frames are of other bricks (another level), so the blur, a brown smear, is
    nearer to them than real unseen frames are and the nearest-frame distance does not see it
    either. Detail (sharpness over the nearest training frame's) does, and ends the horizon
    within one window of k. The real frames keep the whole horizon."""
    T, k, window = 1200, 500, 50
    bank = np.concatenate([panning_view(s, 400, level=1) for s in (0, 401, 802)])
    ref = HealthReference.build(bank, panning_view(200, 400, level=7))
    band = HealthBand.build([frame_health(panning_view(s, 600, level=7), ref) for s in (100, 700, 1000)], window)
    real = panning_view(50, T, level=7)
    assert band.horizon(frame_health(real, ref)) == (T, None)
    blurred = real.copy()
    blurred[k:] = soften(real[k:])
    health = frame_health(blurred, ref)
    without_detail = HealthBand.build([frame_health(panning_view(s, 600, level=7), ref) for s in (100, 700, 1000)],
                                      window, ("sharpness", "motion", "colour_distance", "nearest"))
    late, _ = without_detail.horizon(health)  # what the healthy horizon said before detail:
    assert late > k + 2 * window  # nothing, until the blurred view reaches the dull wall
    steps, figure = band.horizon(health)
    assert k - window <= steps <= k and figure == "detail", (steps, figure)


# -- action classifier --------------------------------------------------------------------------------

def test_the_action_classifier_scores_only_the_controls_the_data_both_holds_and_lets_go():
    """A key never pressed (or never released) in the classifier's training rows is not scored:
    it would add a free right answer to the ceiling, to chance and to every generated frame."""
    from dreamcade.dataset import Control, ControlSpec
    from dreamcade.eval.idm import ActionLabels, train_idm

    spec = ControlSpec((Control("left"), Control("right"), Control("jump"), Control("x", kind="continuous")))
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (40, 8, 8, 3), dtype=np.uint8)
    actions = np.zeros((40, 4), np.float32)
    actions[::3, 0] = 1  # left pressed now and then; right never; jump always; x continuous
    actions[:, 2] = 1
    actions[:, 3] = rng.normal(size=40)
    labels = ActionLabels.for_data(spec, actions)
    assert labels.columns == [0] and labels.n_out == 1
    assert ActionLabels(spec).columns == [0, 1, 2], "without data: every binary control"
    result = train_idm((frames[:-1], frames[1:], actions[:-1]), (frames[:-1], frames[1:], actions[:-1]), spec, steps=2)
    assert result.summary()["scored_controls"] == ["left"] and result.model.head.out_features == 1
    assert result.chance == pytest.approx(max(np.mean(actions[:-1, 0]), 1 - np.mean(actions[:-1, 0])))


def test_each_keys_action_following_known_answers():
    """per_key: of the transitions that held a key, the share where the classifier reads it held;
    of the others, the share where it reads it anyway; from the labels' readings of logits."""
    from dreamcade.dataset import Control, ControlSpec
    from dreamcade.eval.idm import ActionLabels, per_key

    labels = ActionLabels(ControlSpec((Control("left"), Control("right"))))
    y = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    logits = torch.tensor([[2.0, 1.0], [-1.0, -1.0], [-1.0, 3.0], [-2.0, 2.0]])
    seen, given = labels.seen(logits).numpy(), labels.given(y).numpy()
    k = per_key(labels.keys, seen, given, real_seen=given, real_given=given)
    assert k["left"] == {"held": 2, "shown_when_held": 0.5, "shown_when_not_held": 0.0, "real_held": 2,
                         "real_shown_when_held": 1.0, "real_shown_when_not_held": 0.0}
    assert k["right"]["shown_when_held"] == 1.0 and k["right"]["shown_when_not_held"] == pytest.approx(2 / 3, abs=1e-4)
    assert per_key(["left"], seen[:0, :1], given[:0, :1])["left"] == {
        "held": 0, "shown_when_held": None, "shown_when_not_held": None}
    exclusive = ActionLabels(ControlSpec((Control("NOOP"), Control("FIRE")), exclusive=True))
    k = per_key(exclusive.keys, exclusive.seen(torch.tensor([[0.0, 1.0], [2.0, 1.0]])).numpy(),
                exclusive.given(torch.tensor([1, 1])).numpy())
    assert k["FIRE"] == {"held": 2, "shown_when_held": 0.5, "shown_when_not_held": None}
    assert k["NOOP"] == {"held": 0, "shown_when_held": None, "shown_when_not_held": 0.5}


def test_the_action_classifier_keeps_the_controls_it_reads_on_real_frames():
    """Of several keys, those it does not read on real held-out transitions (no visible effect)
    are left out: in the mean they would sit at chance in real and generated frames alike and
    hide the key that shows (a platformer's run key beside its jump). Reading none, it keeps all."""
    from dreamcade.dataset import Control, ControlSpec
    from dreamcade.eval.idm import train_idm
    from dreamcade.files.world import scored_on

    spec = ControlSpec((Control("left"), Control("jump"), Control("run")))
    rng = np.random.default_rng(0)

    def transitions(n: int, shows: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        before = rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)
        actions = (rng.random((n, 3)) < [0.5, 0.4, 0.3]).astype(np.float32)
        after = rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)
        if shows:  # jump lights the top row; left and run show nothing
            after[:, 0] = np.where(actions[:, 1, None, None] > 0, 255, 0)
        return before, after, actions

    for shows in (True, False):
        result = train_idm(transitions(2000, shows), transitions(400, shows), spec, steps=200)
        summary = result.summary()
        if shows:
            assert summary["scored_controls"] == ["jump"] and summary["unread_controls"] == ["left", "run"]
            assert result.model.head.out_features == 1 and result.ceiling > 0.95 and result.unmeasured is None
            assert result.chance == pytest.approx(0.6, abs=0.06)  # jump's own, not the mean of three
            # what the eval's summary line and a world's card say the figure is of
            assert scored_on(summary) == " on jump (the keys the classifier reads on real frames; not left, run)"
        else:
            assert summary["scored_controls"] == ["left", "jump", "run"] and summary["unread_controls"] == []
            assert result.unmeasured is not None and scored_on(summary) == ""


def test_the_action_classifier_sees_at_most_32_pixels_a_side_whatever_the_frame_size():
    """Its cost does not grow with the frame size: frames above 32 pixels on the long side reach
    the network at 32 there (area interpolation, aspect kept), smaller ones as they are; a frame
    of 2x2 blocks comes down to exactly its blocks."""
    from dreamcade.dataset.pixels import hwc_to_model
    from dreamcade.eval.idm import InverseDynamics

    model = InverseDynamics(5)
    seen = []
    model.convs[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    for (h, w), size in {(16, 16): (16, 16), (32, 32): (32, 32), (40, 32): (32, 26), (64, 64): (32, 32),
                         (72, 128): (18, 32), (256, 256): (32, 32)}.items():
        frames = torch.zeros(2, h, w, 3, dtype=torch.uint8)
        assert model(frames, frames).shape == (2, 5)
        assert seen[-1].shape == (2, 9, *size), (h, w)
    small = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (1, 32, 32, 3), dtype=np.uint8))
    big = small.repeat_interleave(2, 1).repeat_interleave(2, 2)  # [1, 64, 64, 3] of 2x2 blocks
    model(big, small.repeat_interleave(2, 1).repeat_interleave(2, 2))
    assert torch.allclose(seen[-1][:, :3], hwc_to_model(small), atol=1e-6)
