// The drama web page: speaks through POST /v1/audio/speech, streamed as SSE with raw PCM deltas
// that play through Web Audio as they arrive; adds voices through POST /v1/audio/voices.
// Same origin only; no external network. window.dramaStats records what the browser test checks.
const $ = (id) => document.getElementById(id);
const stats = (window.dramaStats = { speaks: 0, deltas: 0, readsWithAudio: 0, playing: false,
  playbackStartedBeforeDone: false, done: null, voicesAdded: 0 });
let sampleRate = 24000;
let health = null;

function headers(extra = {}) {
  const key = $("api-key").value.trim();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function apiError(res) {
  try {
    const body = await res.json();
    return body.error ? body.error.message : `HTTP ${res.status}`;
  } catch {
    return `HTTP ${res.status}`;
  }
}

function setStatus(el, text, error = false) {
  el.textContent = text;
  el.classList.toggle("error", error);
}

async function loadHealth() {
  const res = await fetch("/health");
  health = await res.json();
  $("provenance").textContent =
    `model ${health.model} \u00b7 ${health.provenance} \u00b7 ${health.backend}`;
  $("guidance-row").hidden = !health.request_gamma;
  $("guidance").value = health.gamma;
}

async function loadVoices(select) {
  const res = await fetch("/v1/audio/voices", { headers: headers() });
  if (!res.ok) {
    setStatus($("voice-status"), await apiError(res), true);
    return;
  }
  const { voices } = await res.json();
  const picker = $("voice");
  const keep = select ?? picker.value;
  picker.length = 1;
  for (const v of voices) {
    const label = `${v.name} (${v.built_in ? "built-in: " : ""}${v.id})`;
    picker.add(new Option(label, v.id));
  }
  picker.value = voices.some((v) => v.id === keep) ? keep : "";
}

function wavBlob(chunks, rate) {
  const bytes = chunks.reduce((n, c) => n + c.length, 0);
  const out = new Uint8Array(44 + bytes);
  const dv = new DataView(out.buffer);
  const tag = (at, s) => [...s].forEach((c, i) => (out[at + i] = c.charCodeAt(0)));
  tag(0, "RIFF"); dv.setUint32(4, 36 + bytes, true); tag(8, "WAVE"); tag(12, "fmt ");
  dv.setUint32(16, 16, true); dv.setUint16(20, 1, true); dv.setUint16(22, 1, true);
  dv.setUint32(24, rate, true); dv.setUint32(28, rate * 2, true); dv.setUint16(32, 2, true);
  dv.setUint16(34, 16, true); tag(36, "data"); dv.setUint32(40, bytes, true);
  let at = 44;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  return new Blob([out], { type: "audio/wav" });
}

function base64Bytes(b64) {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

// Plays s16le mono PCM pieces back to back as they arrive.
class PcmPlayer {
  constructor(rate) {
    this.ctx = new AudioContext({ sampleRate: rate });
    this.at = 0;
    this.carry = null;  // an odd byte left from the previous piece
  }
  play(bytes) {
    if (this.carry) { const b = new Uint8Array(bytes.length + 1); b[0] = this.carry; b.set(bytes, 1); bytes = b; this.carry = null; }
    if (bytes.length % 2) { this.carry = bytes[bytes.length - 1]; bytes = bytes.subarray(0, bytes.length - 1); }
    const n = bytes.length / 2;
    if (!n) return;
    const buf = this.ctx.createBuffer(1, n, this.ctx.sampleRate);
    const ch = buf.getChannelData(0);
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    for (let i = 0; i < n; i++) ch[i] = dv.getInt16(2 * i, true) / 32768;
    const src = this.ctx.createBufferSource();
    src.buffer = buf;
    src.connect(this.ctx.destination);
    this.at = Math.max(this.at, this.ctx.currentTime + 0.05);
    src.start(this.at);
    this.at += buf.duration;
    stats.playing = true;
  }
}

function speechBody(format, stream) {
  const body = { model: "tts-1", input: $("text").value, response_format: format,
    speed: Number($("speed").value || 1), max_duration_s: Number($("max-duration").value || 10) };
  if (stream) body.stream_format = "sse";
  const voice = $("voice").value;
  if (voice) body.voice = voice;
  const seed = $("seed").value.trim();
  if (seed) body.seed = Number(seed);
  if (health && health.request_gamma && $("guidance").value !== "")
    body.cfg_scale = Number($("guidance").value);
  return body;
}

async function speak() {
  const status = $("status");
  const format = $("format").value;
  // WAV is streamed as PCM and played while it arrives; other formats come whole.
  const stream = format === "wav";
  stats.speaks++;
  stats.deltas = 0; stats.readsWithAudio = 0; stats.playing = false;
  stats.playbackStartedBeforeDone = false; stats.done = null;
  setStatus(status, "speaking\u2026");
  $("speak").disabled = true;
  try {
    const res = await fetch("/v1/audio/speech", { method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(speechBody(stream ? "pcm" : format, stream)) });
    if (!res.ok) { setStatus(status, await apiError(res), true); return; }
    const seed = res.headers.get("X-Drama-Seed");
    const provenance = res.headers.get("X-Drama-Provenance");
    if (!stream) {
      const blob = await res.blob();
      $("player").src = URL.createObjectURL(blob);
      await $("player").play().catch(() => {});
      stats.done = { stop_reason: res.headers.get("X-Drama-Stop-Reason") };
      setStatus(status, `seed ${seed} \u00b7 ${provenance} \u00b7 stopped: ${stats.done.stop_reason}`);
      return;
    }
    const player = new PcmPlayer(sampleRate);
    const chunks = [];
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let sawAudio = false;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!line.startsWith("data: ")) continue;
        const ev = JSON.parse(line.slice(6));
        if (ev.type === "speech.audio.delta") {
          const bytes = base64Bytes(ev.audio);
          chunks.push(bytes);
          player.play(bytes);
          stats.deltas++;
          sawAudio = true;
        } else if (ev.type === "speech.audio.done") {
          stats.playbackStartedBeforeDone = stats.playing;
          stats.done = ev;
        }
      }
      if (sawAudio) stats.readsWithAudio++;
      if (sawAudio) setStatus(status, `playing while it streams\u2026 (${stats.deltas} pieces)`);
    }
    $("player").src = URL.createObjectURL(wavBlob(chunks, sampleRate));
    const stop = stats.done ? stats.done.stop_reason : "unknown";
    setStatus(status, `seed ${seed} \u00b7 ${provenance} \u00b7 ${stats.deltas} pieces \u00b7 stopped: ${stop}`);
  } catch (e) {
    setStatus(status, String(e), true);
  } finally {
    $("speak").disabled = false;
  }
}

async function addVoice() {
  const status = $("voice-status");
  const file = $("voice-audio").files[0];
  if (!file) { setStatus(status, "choose a reference audio file", true); return; }
  const form = new FormData();
  form.append("name", $("voice-name").value);
  form.append("ref_text", $("voice-text").value);
  form.append("audio_sample", file);
  setStatus(status, "encoding the reference\u2026");
  const res = await fetch("/v1/audio/voices", { method: "POST", headers: headers(), body: form });
  if (!res.ok) { setStatus(status, await apiError(res), true); return; }
  const voice = await res.json();
  setStatus(status, `added voice ${voice.id} (${voice.frames} frames)`);
  await loadVoices(voice.id);
  stats.voicesAdded++;  // counted once the picker shows the new voice
}

// Loads what the /v1 routes tell (sample rate, voices); with a key required, only once one is
// entered, so the page makes no request it knows will be refused.
async function loadApi() {
  if (health.api_key_required && !$("api-key").value.trim()) {
    setStatus($("voice-status"), "this server needs an API key: enter it above");
    return;
  }
  const res = await fetch("/v1/models", { headers: headers() });
  if (!res.ok) {
    setStatus($("voice-status"), await apiError(res), true);
    return;
  }
  const models = await res.json();
  if (models.data[0].sample_rate) sampleRate = models.data[0].sample_rate;
  setStatus($("voice-status"), "");
  await loadVoices();
}

$("speak").addEventListener("click", speak);
$("voice-add").addEventListener("click", addVoice);
$("api-key").addEventListener("change", () => loadApi());
loadHealth()
  .then(loadApi)
  .then(() => { document.body.dataset.ready = "1"; })
  .catch((e) => setStatus($("status"), String(e), true));
