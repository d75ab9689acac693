// The page of a world exported with `dreamcade export RUN --web OUT`: it loads web.json, the
// ONNX graphs of the model's stages and its start contexts, and plays the world in a loop:
// input -> next frame (next_frame.onnx, then upsample.onnx in a two-stage world) -> screen, with
// the HUD's frames/s and health (play's health figures against the band of real frames).
// The graphs draw no noise: the page gives them Gaussian noise from a seeded generator.
// URL options: ?start=K (the start context), seed=N, pace=0 (as fast as it can, not at the
// recording's frames/s), stop=N (stop after N frames), backend=wasm (WebAssembly even where
// WebGPU is), threads=1 (one WebAssembly thread).
// Several WebAssembly threads need the page to be cross-origin isolated: sw.js serves the
// folder with the headers for it, so the first visit registers it and loads the page again.
// window.dreamcade is the page's own report (what a test reads).

const params = new URLSearchParams(location.search);
const report = { ready: false, error: null, frames: 0 };
window.dreamcade = report;
const hud = document.getElementById('hud');

window.addEventListener('error', (e) => fail(e.message));
window.addEventListener('unhandledrejection', (e) => fail(String(e.reason && e.reason.message || e.reason)));

function fail(message) {
  report.error = message;
  hud.textContent = 'error: ' + message;
}

// -- noise: a seeded generator (mulberry32) and Box-Muller ----------------------------------------

function generator(seed) {
  let a = seed >>> 0;
  const uniform = () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return (n) => {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i += 2) {
      const r = Math.sqrt(-2 * Math.log(1 - uniform()));
      const th = 2 * Math.PI * uniform();
      out[i] = r * Math.cos(th);
      if (i + 1 < n) out[i + 1] = r * Math.sin(th);
    }
    return out;
  };
}

// -- input: the control spec's keys, mouse and gamepad -> one action row per frame ------------------

const NAMED = {
  ArrowLeft: 'left', ArrowRight: 'right', ArrowUp: 'up', ArrowDown: 'down', ' ': 'space', Shift: 'shift',
  Control: 'ctrl', Alt: 'alt', AltGraph: 'alt_gr', Meta: 'cmd', Enter: 'enter', Tab: 'tab', Escape: 'esc',
  Backspace: 'backspace', Delete: 'delete', Insert: 'insert', Home: 'home', End: 'end', PageUp: 'page_up',
  PageDown: 'page_down', CapsLock: 'caps_lock', NumLock: 'num_lock', ScrollLock: 'scroll_lock',
  PrintScreen: 'print_screen', Pause: 'pause', ContextMenu: 'menu',
};
const UNSHIFT = Object.fromEntries([...'~!@#$%^&*()_+{}|:"<>?'].map((c, i) => [c, "`1234567890-=[]\\;',./"[i]]));

function keyName(e) {
  if (NAMED[e.key]) return NAMED[e.key];
  if (/^F\d{1,2}$/.test(e.key)) return e.key.toLowerCase();
  if (e.code.startsWith('Key')) return e.code.slice(3).toLowerCase();
  if (e.code.startsWith('Digit')) return e.code.slice(5);
  if (e.key.length === 1) return UNSHIFT[e.key] || e.key.toLowerCase();
  return null;
}

// the Gamepad API's standard mapping, by SDL's names (the recorder's)
const PAD_BUTTONS = { a: 0, b: 1, x: 2, y: 3, leftshoulder: 4, rightshoulder: 5, back: 8, start: 9, leftstick: 10,
                      rightstick: 11, dpup: 12, dpdown: 13, dpleft: 14, dpright: 15, guide: 16 };
const PAD_AXES = { leftx: 0, lefty: 1, rightx: 2, righty: 3 };
const PAD_TRIGGERS = { lefttrigger: 6, righttrigger: 7 };
const MOUSE_BUTTONS = ['left', 'middle', 'right'];

class Input {
  constructor(controls, canvas) {
    this.c = controls;
    this.held = new Set();    // inputs down now ("key:left", "mouse:left")
    this.tapped = new Set();  // down at any moment of this frame interval
    this.mouse = { dx: 0, dy: 0 };
    this.sources = controls.exclusive ? Object.keys(controls.keys).map((k) => 'key:' + k)
      : controls.controls.map((c) => c.source);
    this.reads = new Set(this.sources.filter((s) => s.startsWith('key:')).map((s) => s.slice(4)));
    this.onKey = null;
    addEventListener('keydown', (e) => this.key(e, true));
    addEventListener('keyup', (e) => this.key(e, false));
    addEventListener('blur', () => this.held.clear());
    canvas.addEventListener('mousedown', (e) => {
      if (this.sources.some((s) => s === 'mouse:dx' || s === 'mouse:dy') && document.pointerLockElement !== canvas) {
        canvas.requestPointerLock();
      }
      this.press('mouse:' + MOUSE_BUTTONS[e.button], true);
    });
    addEventListener('mouseup', (e) => this.press('mouse:' + MOUSE_BUTTONS[e.button], false));
    addEventListener('mousemove', (e) => { this.mouse.dx += e.movementX; this.mouse.dy += e.movementY; });
    canvas.addEventListener('contextmenu', (e) => e.preventDefault());
  }

  // forget what was pressed or moved while the world was paused
  clear() {
    this.tapped = new Set(this.held);
    this.mouse.dx = this.mouse.dy = 0;
  }

  key(e, down) {
    const name = keyName(e);
    if (name === null) return;
    if (this.reads.has(name)) {
      e.preventDefault();
      this.press('key:' + name, down);
    } else if (down && !e.repeat && this.onKey && this.onKey(name)) {
      e.preventDefault();  // the page's own key (F3 would open the find bar)
    }
  }

  press(source, down) {
    if (down) { this.held.add(source); this.tapped.add(source); } else { this.held.delete(source); }
  }

  pad() {
    const pads = navigator.getGamepads ? [...navigator.getGamepads()].filter(Boolean) : [];
    return pads.length ? pads[0] : null;
  }

  value(source, pad) {
    const [kind, what, name, axis] = source.split(':');  // "key:left", "pad:axis:leftx", "pad:hat:0:x"
    if (kind === 'key' || (kind === 'mouse' && MOUSE_BUTTONS.includes(what))) {
      return this.held.has(source) || this.tapped.has(source) ? 1 : 0;
    }
    if (kind === 'mouse') return this.mouse[what] || 0;
    if (kind !== 'pad' || !pad) return 0;
    const btn = (i) => (pad.buttons[i] ? pad.buttons[i].value : 0);
    if (what === 'button') return btn(PAD_BUTTONS[name]) >= 0.5 ? 1 : 0;
    if (what === 'axis') return name in PAD_TRIGGERS ? btn(PAD_TRIGGERS[name]) : (pad.axes[PAD_AXES[name]] || 0);
    if (what === 'hat') return axis === 'x' ? btn(15) - btn(14) : btn(12) - btn(13);  // SDL's hat: y is 1 for up
    return 0;
  }

  // the action row of this frame interval (it ends now)
  cut() {
    const pad = this.pad();
    let row;
    if (this.c.exclusive) {
      const held = [];
      for (const [key, part] of Object.entries(this.c.keys)) if (this.value('key:' + key, pad)) held.push(part);
      for (const [source, part] of Object.entries(this.c.pad_buttons)) if (this.value(source, pad)) held.push(part);
      for (const [source, low, high] of this.c.pad_axes) {
        const v = this.value(source, pad);
        if (v <= -0.5) held.push(low); else if (v >= 0.5) held.push(high);
      }
      row = new Float32Array(this.c.names.length);
      row[pickAction(this.c.parts, held)] = 1;
    } else {
      row = Float32Array.from(this.c.controls.map((c) => this.value(c.source, pad)));
    }
    this.tapped = new Set(this.held);
    this.mouse.dx = this.mouse.dy = 0;
    return row;
  }

  describe() {
    if (!this.c.exclusive) return this.c.controls.map((c) => `${c.name}: ${c.source || '(no source)'}`);
    const by = {};
    for (const [key, part] of Object.entries(this.c.keys)) (by[part] = by[part] || []).push(key);
    return Object.entries(by).map(([part, keys]) => `${part}: ${keys.join(', ')}`)
      .concat(['gamepad: d-pad, left stick or hat move; A/B fire']);
  }
}

// record.policies.pick_action: an index wins; else the action whose meaning has exactly the held
// parts, else the one with the most of them and no other, else action 0
function pickAction(parts, held) {
  for (const t of held) if (typeof t === 'number') return t;
  const want = new Set(held);
  let best = 0, bestN = 0;
  for (let i = 0; i < parts.length; i++) {
    const inside = parts[i].every((x) => want.has(x));
    if (inside && parts[i].length === want.size) return i;
    if (inside && parts[i].length > bestN) { best = i; bestN = parts[i].length; }
  }
  return best;
}

// -- health: eval.health's sharpness, motion and colour distance, against the world's band --------

class Health {
  constructor(band, size) {
    this.band = band;
    [this.H, this.W] = size;
    this.recent = Object.fromEntries(band.figures.map((k) => [k, []]));
    this.previous = null;
  }

  reset() {
    for (const k in this.recent) this.recent[k] = [];
    this.previous = null;
  }

  add(name, value) {
    this.last[name] = value;
    const d = this.recent[name];
    d.push(value);
    if (d.length > this.band.window) d.shift();
  }

  // one shown frame, RGB uint8 HWC
  update(rgb) {
    const { H, W } = this;
    this.last = {};
    const luma = new Float32Array(H * W);
    const hist = [new Float64Array(256), new Float64Array(256), new Float64Array(256)];
    for (let i = 0; i < H * W; i++) {
      const r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
      luma[i] = (0.299 * r + 0.587 * g + 0.114 * b) / 255;
      hist[0][r]++; hist[1][g]++; hist[2][b]++;
    }
    let s = 0, s2 = 0, n = 0;
    for (let y = 1; y < H - 1; y++) {
      for (let x = 1; x < W - 1; x++) {
        const i = y * W + x;
        const lap = luma[i - W] + luma[i + W] + luma[i - 1] + luma[i + 1] - 4 * luma[i];
        s += lap; s2 += lap * lap; n++;
      }
    }
    this.add('sharpness', n ? Math.max(0, s2 / n - (s / n) ** 2) : 0);
    let emd = 0;
    for (let c = 0; c < 3; c++) {
      let cdf = 0, sum = 0;
      const target = this.band.levels_cdf[c];
      for (let v = 0; v < 256; v++) { cdf += hist[c][v] / (H * W); sum += Math.abs(cdf - target[v]); }
      emd += sum / 255 / 3;
    }
    this.add('colour_distance', emd);
    if (this.previous) {
      let m = 0;
      for (let i = 0; i < rgb.length; i++) m += Math.abs(rgb[i] - this.previous[i]);
      this.add('motion', m / rgb.length / 255);
    }
    this.before = this.previous;
    this.previous = rgb;
    const means = {};
    for (const k of this.band.figures) {
      const d = this.recent[k];
      if (d.length) means[k] = d.reduce((a, b) => a + b, 0) / d.length;
    }
    this.out = null;
    for (const k of this.band.figures) {
      if (!(k in means)) continue;
      const side = means[k] < this.band.low[k] ? 'low' : means[k] > this.band.high[k] ? 'high' : null;
      if (side) { this.out = [k, side]; break; }
    }
    this.means = means;
    const ref = this.band.reference_sharpness;
    this.value = ref >= 1e-6 ? means.sharpness / ref : null;
  }
}

const WARNINGS = { 'sharpness low': 'frames are blurring', 'sharpness high': 'frames are turning to noise',
                   'motion low': 'the world has frozen', 'motion high': 'frames are flickering',
                   'colour_distance high': "colours are leaving the game's" };

// -- the world ----------------------------------------------------------------------------------

// true when the page is being loaded again under its service worker (see sw.js)
async function isolate() {
  if (self.crossOriginIsolated || params.get('threads') === '1' || !('serviceWorker' in navigator)
      || !self.isSecureContext) return false;
  const tried = sessionStorage.getItem('dreamcade-isolate');
  if (tried !== null) return false;  // once: a browser that will not isolate runs on one thread
  sessionStorage.setItem('dreamcade-isolate', String(Date.now()));
  try {
    await navigator.serviceWorker.register('sw.js');
    await navigator.serviceWorker.ready;
  } catch (e) {
    return false;  // no service worker here: one thread
  }
  location.reload();
  return true;
}

async function main() {
  const began = Number(sessionStorage.getItem('dreamcade-isolate')) || null;  // the first load's time
  if (await isolate()) return;
  sessionStorage.removeItem('dreamcade-isolate');
  const sinceLoad = () => (began ? Date.now() - began : performance.now());
  const world = await (await fetch('web.json')).json();
  const [H, W] = world.size, [h, w] = world.model_size, L = world.context, A = world.actions;
  document.getElementById('title').textContent = `${world.name} (${W}x${H})`;
  const gpu = world.runtime.webgpu && navigator.gpu && params.get('backend') !== 'wasm'
    ? await navigator.gpu.requestAdapter().catch(() => null) : null;
  const backend = gpu ? 'webgpu' : 'wasm';
  const ort = await import('./' + (gpu ? world.runtime.webgpu : world.runtime.wasm));
  ort.env.wasm.wasmPaths = new URL('runtime/', location.href).href;
  const threads = self.crossOriginIsolated && params.get('threads') !== '1'
    ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
  ort.env.wasm.numThreads = threads;
  const options = { executionProviders: [backend], graphOptimizationLevel: 'all' };
  const stages = [];
  for (const s of world.stages) stages.push(await ort.InferenceSession.create(s.file, options));
  report.backend = backend === 'webgpu' ? 'WebGPU' : `WebAssembly (${threads} thread${threads > 1 ? 's' : ''})`;
  report.threads = backend === 'webgpu' ? null : threads;

  const starts = await (await fetch(world.starts.file)).arrayBuffer();
  const perStart = L * h * w * 3 + H * W * 3;
  const canvas = document.getElementById('screen');
  canvas.width = W; canvas.height = H;
  const zoom = Math.max(1, Math.floor(Math.min(512 / W, 384 / H)));
  canvas.style.width = `${W * zoom}px`; canvas.style.height = `${H * zoom}px`;
  const g2d = canvas.getContext('2d');
  const image = g2d.createImageData(W, H);

  const input = new Input(world.controls, canvas);
  const health = new Health(world.health, world.size);
  const randn = generator(Number(params.get('seed') || 0));
  const pace = params.get('pace') !== '0';
  const stop = Number(params.get('stop') || Infinity);
  const context = new Float32Array(L * 3 * h * w);  // [L, 3, h, w] in [-1, 1]
  const actions = new Float32Array(L * A);
  const mask = new Float32Array(L);
  let startIndex = Number(params.get('start') || 0) % world.starts.count;
  let paused = false;
  let shownRGB = null;

  function draw(rgb) {
    for (let i = 0, j = 0; i < H * W; i++, j += 4) {
      image.data[j] = rgb[3 * i]; image.data[j + 1] = rgb[3 * i + 1]; image.data[j + 2] = rgb[3 * i + 2];
      image.data[j + 3] = 255;
    }
    g2d.putImageData(image, 0, 0);
    shownRGB = rgb;
  }

  // the upsampler's noise, drawn at each start and kept: a still part of the low frame is then
  // drawn the same from frame to frame (as dreamcade's WorldModelEnv does), not shimmering
  let upNoise = null;
  function reset(k) {
    const base = k * perStart;
    if (stages.length > 1) upNoise = randn(3 * H * W);
    const low = new Uint8Array(starts, base, L * h * w * 3);  // [L, h, w, 3]
    for (let l = 0; l < L; l++) {
      for (let c = 0; c < 3; c++) {
        for (let i = 0; i < h * w; i++) context[(l * 3 + c) * h * w + i] = low[(l * h * w + i) * 3 + c] / 127.5 - 1;
      }
    }
    actions.set(new Float32Array(starts.slice(world.starts.actions_offset + k * L * A * 4,
                                              world.starts.actions_offset + (k + 1) * L * A * 4)));
    const m = new Uint8Array(starts, world.starts.mask_offset + k * L, L);
    for (let l = 0; l < L; l++) mask[l] = m[l];
    health.reset();
    draw(new Uint8Array(starts.slice(base + L * h * w * 3, base + perStart)));
    report.start = k;
  }

  function toRGB(chw, hh, ww) {
    const rgb = new Uint8Array(hh * ww * 3);
    for (let c = 0; c < 3; c++) {
      for (let i = 0; i < hh * ww; i++) {
        rgb[3 * i + c] = Math.min(255, Math.max(0, Math.round((chw[c * hh * ww + i] + 1) * 127.5)));
      }
    }
    return rgb;
  }

  const tensor = (data, dims) => new ort.Tensor('float32', data, dims);
  async function step() {
    actions.set(input.cut(), (L - 1) * A);
    const feeds = {
      context: tensor(context, [1, L, 3, h, w]), actions: tensor(actions, [1, L, A]), mask: tensor(mask, [1, L]),
      noise: tensor(randn(3 * h * w), [1, 3, h, w]), context_noise: tensor(randn(L * 3 * h * w), [1, L, 3, h, w]),
    };
    const frame = (await stages[0].run(pick(feeds, stages[0].inputNames))).frame.data;
    context.copyWithin(0, 3 * h * w); context.set(frame, (L - 1) * 3 * h * w);
    actions.copyWithin(0, A); actions.fill(0, (L - 1) * A);
    mask.copyWithin(0, 1); mask[L - 1] = 1;
    let shown = frame;
    if (stages.length > 1) {
      const up = { low: tensor(frame, [1, 3, h, w]), noise: tensor(upNoise, [1, 3, H, W]) };
      shown = (await stages[1].run(pick(up, stages[1].inputNames))).frame.data;
    }
    const rgb = toRGB(shown, H, W);
    draw(rgb);
    health.update(rgb);
  }

  const pick = (feeds, names) => Object.fromEntries(names.map((n) => [n, feeds[n]]));
  const resetKey = input.reads.has('r') ? 'f2' : 'r';
  const pauseKey = input.reads.has('p') ? 'f3' : 'p';
  let pendingReset = false;  // applied between frames, never while one is being made
  input.onKey = (name) => {
    if (name === resetKey) pendingReset = true;
    else if (name === pauseKey) paused = !paused;
    else return false;
    return true;
  };
  document.getElementById('controls').textContent =
    input.describe().join('\n') + `\n${resetKey.toUpperCase()}: start again from a real frame   ` +
    `${pauseKey.toUpperCase()}: pause`;

  reset(startIndex);
  report.ready = true;
  report.frame = () => Array.from(shownRGB);
  // the newest frame, the one before it and their health figures, taken at one moment
  report.snapshot = () => ({ frame: Array.from(shownRGB), before: health.before ? Array.from(health.before) : null,
                             figures: health.last, means: health.means, out: health.out });
  const yieldTask = () => new Promise((resolve) => { const ch = new MessageChannel(); ch.port1.onmessage = resolve;
                                                     ch.port2.postMessage(0); });
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const times = [], ticks = [];
  let outFrames = 0;
  const firstFrames = [];  // the first frames made, for tests
  report.first_frames = () => firstFrames;
  for (;;) {
    if (report.frames >= stop) { report.stopped = true; return; }
    if (pendingReset) { pendingReset = false; startIndex = (startIndex + 1) % world.starts.count; reset(startIndex); }
    if (paused) { input.clear(); await sleep(50); continue; }
    const t0 = performance.now();
    await step();
    const t1 = performance.now();
    if (report.frames === 0) report.first_frame_ms = sinceLoad();  // since the page began to load
    report.frames++;
    if (report.frames <= 8) firstFrames.push(Array.from(shownRGB));
    times.push(t1 - t0); if (times.length > 100) times.shift();
    ticks.push(t1); while (ticks.length > 1 && ticks[0] < t1 - 2000) ticks.shift();
    if (health.out) outFrames++;
    report.ms_per_frame = times.reduce((a, b) => a + b, 0) / times.length;
    report.fps = ticks.length > 1 ? (ticks.length - 1) / ((t1 - ticks[0]) / 1000) : 0;
    report.health = { means: health.means, value: health.value, out: health.out, out_frames: outFrames };
    const warning = health.out ? WARNINGS[health.out.join(' ')] + `: press ${resetKey.toUpperCase()} to start again` : '';
    hud.innerHTML = `${report.backend} | ${report.fps.toFixed(1)} frames/s | ${report.ms_per_frame.toFixed(1)} ms a ` +
      `frame | frame ${report.frames}\nhealth: sharpness ${health.value === null ? '-' : health.value.toFixed(2)} ` +
      `of the recording's, ${health.out ? `<span class="warn">${warning}</span>` : 'in the band of real frames'}`;
    if (pace) await sleep(Math.max(0, 1000 / world.fps - (performance.now() - t0)));
    else await yieldTask();
  }
}

main().catch((e) => fail(String(e && e.message || e)));
