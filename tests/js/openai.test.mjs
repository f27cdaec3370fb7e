// The official OpenAI Node SDK (npm `openai` 5.x) against a real `drama serve` (started by
// tests/server/test_js_clients.cpp, which passes DRAMA_URL, DRAMA_API_KEY and DRAMA_OUT and
// afterwards decodes the MP3 and Opus files written to DRAMA_OUT with libsndfile).
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { pcmWav } from "./wav.mjs";

const url = process.env.DRAMA_URL;
const apiKey = process.env.DRAMA_API_KEY;
const out = process.env.DRAMA_OUT;
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 });
const input = "Hello from the OpenAI SDK.";
// Extra fields pass through the SDK's body unchanged: a fixed seed and a short reply.
const extra = { seed: 11, max_duration_s: 0.8 };

function toneWav(seconds, rate = 24000) {
  return pcmWav(seconds, rate, (i) => 8000 * Math.sin(i * 0.05) * (1 + 0.5 * Math.sin(i * 0.0007)));
}

async function bytes(response) {
  return Buffer.from(await response.arrayBuffer());
}

function sseAudio(text) {
  const parts = [];
  let done = null;
  for (const block of text.split("\n\n")) {
    if (!block.startsWith("data: ")) continue;
    const ev = JSON.parse(block.slice(6));
    if (ev.type === "speech.audio.delta") parts.push(Buffer.from(ev.audio, "base64"));
    if (ev.type === "speech.audio.done") done = ev;
  }
  return { audio: Buffer.concat(parts), done };
}

test("a stored voice named through the alias alloy", async () => {
  const form = new FormData();
  form.append("name", "SDK reference");
  form.append("id", "sdk_ref");
  form.append("ref_text", "A reference for the SDK test.");
  form.append("audio_sample", new Blob([toneWav(2)], { type: "audio/wav" }), "ref.wav");
  const res = await fetch(`${url}/v1/audio/voices`, { method: "POST", body: form,
    headers: { Authorization: `Bearer ${apiKey}` } });
  assert.equal(res.status, 200, await res.clone().text());
  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  for (const alias of ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"]) assert.ok(ids.includes(alias), alias);
});

test("audio.speech.create with each model alias", async () => {
  let first = null;
  for (const model of ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"]) {
    const res = await client.audio.speech.create({ model, voice: "alloy", input, ...extra });
    const body = await bytes(res);
    assert.equal(body.subarray(0, 4).toString(), "RIFF", model);
    assert.ok(body.length > 44 + 1000, model);
    if (first) assert.ok(first.equals(body), `${model} gives the same bytes as tts-1`);
    first = first ?? body;
  }
});

test("every format, whole and streamed as audio and as SSE", async () => {
  const pcm = await bytes(await client.audio.speech.create({ model: "tts-1", voice: "alloy",
    input, response_format: "pcm", ...extra }));
  writeFileSync(join(out, "reply.pcm"), pcm);
  for (const format of ["wav", "mp3", "opus", "flac", "pcm"]) {
    const res = await client.audio.speech.create({ model: "tts-1", voice: "alloy", input,
      response_format: format, ...extra });
    assert.equal(res.headers.get("x-drama-seed"), "11");
    assert.equal(res.headers.get("x-drama-stop-reason"), "max_duration");
    const whole = await bytes(res);
    writeFileSync(join(out, `whole.${format}`), whole);
    if (format === "flac") {
      // FLAC is whole only: a streamed FLAC request is refused with OpenAI's error shape.
      await assert.rejects(client.audio.speech.create({ model: "tts-1", voice: "alloy", input,
        response_format: format, stream_format: "audio", ...extra }), (e) => e.status === 400);
      continue;
    }
    const streamed = await bytes(await client.audio.speech.create({ model: "tts-1", voice: "alloy",
      input, response_format: format, stream_format: "audio", ...extra }));
    const sse = sseAudio(await (await client.audio.speech.create({ model: "tts-1", voice: "alloy",
      input, response_format: format, stream_format: "sse", ...extra })).text());
    assert.equal(sse.done.stop_reason, "max_duration");
    if (format === "wav") {
      // The streamed WAV's header says "unknown length"; the samples are the whole reply's.
      assert.ok(streamed.subarray(44).equals(whole.subarray(44)), "wav audio stream");
      assert.ok(sse.audio.subarray(44).equals(whole.subarray(44)), "wav sse");
      assert.ok(whole.subarray(44).equals(pcm), "wav holds the pcm samples");
    } else {
      assert.ok(streamed.equals(whole), `${format}: stream_format audio == whole`);
      assert.ok(sse.audio.equals(whole), `${format}: sse == whole`);
    }
  }
});

test("speed 0.5 and 2.0 through the SDK", async () => {
  const len = async (speed) => (await bytes(await client.audio.speech.create({ model: "tts-1",
    voice: "alloy", input, response_format: "pcm", speed, ...extra }))).length;
  const base = await len(1.0);
  assert.ok(Math.abs((await len(0.5)) / base - 2) < 0.1);
  assert.ok(Math.abs((await len(2.0)) / base - 0.5) < 0.025);
  await assert.rejects(client.audio.speech.create({ model: "tts-1", voice: "alloy", input,
    speed: 5 }), (e) => e.status === 400);
});

test("a wrong key is refused in OpenAI's error shape", async () => {
  const bad = new OpenAI({ baseURL: `${url}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.audio.speech.create({ model: "tts-1", voice: "alloy", input }),
    (e) => e.status === 401 && e.code === "invalid_api_key");
});
