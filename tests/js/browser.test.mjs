// The web page at / in a real browser: Debian's chromium driven by playwright-core (never a
// downloaded browser). The page must load with no console errors and no request beyond the
// server, speak a sentence with audio arriving (and playing) while the reply still streams,
// upload a reference through the voice writer and speak with the new voice.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { pcmWav } from "./wav.mjs";

const url = process.env.DRAMA_URL;
const apiKey = process.env.DRAMA_API_KEY;

function toneWav(seconds, rate = 24000) {
  return pcmWav(seconds, rate, (i) => 9000 * Math.sin(i * 0.04));
}

test("the web page speaks while streaming and adds a voice", async () => {
  const profile = mkdtempSync(join(tmpdir(), "drama-chromium-"));
  // A fresh profile directory (playwright passes it as --user-data-dir).
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--autoplay-policy=no-user-gesture-required"],
  });
  try {
    const page = await browser.newPage();
    const errors = [];
    const outside = [];
    const speechBodies = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    // Anything beyond the server is recorded and refused. Same-origin requests are not routed:
    // interception would hold a streamed reply back until it is complete.
    const origin = new URL(url).origin;
    await page.route((u) => u.origin !== origin && u.protocol !== "blob:" && u.protocol !== "data:",
      (route) => { outside.push(route.request().url()); return route.abort(); });
    page.on("request", (r) => {
      if (new URL(r.url()).pathname === "/v1/audio/speech") speechBodies.push(JSON.parse(r.postData()));
    });
    await page.goto(url);
    await page.waitForSelector("body[data-ready='1']");
    assert.match(await page.textContent("#provenance"), /pinned:/);
    assert.match(await page.textContent("#voice-status"), /needs an API key/);
    await page.fill("#api-key", apiKey);
    await page.dispatchEvent("#api-key", "change");
    await page.waitForFunction(() => document.querySelector("#voice-status").textContent === "");

    // Speak: wav is fetched as SSE PCM pieces and played through Web Audio as they arrive.
    await page.fill("#text", "The web page speaks this sentence while it streams.");
    await page.fill("#seed", "5");
    // 30 s (375 frames): the random model makes a frame in about 2 ms on a Zen 5 core, and 8 s
    // (100 frames, 0.24 s) often reached the page in one read, failing the streaming checks
    // below in 4 of 6 runs there (2026-12-04).
    await page.fill("#max-duration", "30");
    await page.click("#speak");
    await page.waitForFunction(() => window.dramaStats.done !== null, null, { timeout: 120000 });
    const stats = await page.evaluate(() => window.dramaStats);
    assert.ok(stats.deltas >= 2, `audio arrived in ${stats.deltas} pieces`);
    assert.ok(stats.readsWithAudio >= 2, `audio arrived over ${stats.readsWithAudio} reads`);
    assert.ok(stats.playbackStartedBeforeDone, "playback began before the stream ended");
    assert.ok(["end_of_speech", "max_duration"].includes(stats.done.stop_reason), stats.done.stop_reason);
    assert.match(await page.textContent("#status"), /seed 5 .* pinned:/);

    // Upload a reference (the voice writer) and speak with the new voice.
    await page.fill("#voice-name", "Browser voice");
    await page.fill("#voice-text", "This is the reference transcript.");
    await page.setInputFiles("#voice-audio",
      { name: "ref.wav", mimeType: "audio/wav", buffer: toneWav(2) });
    await page.click("#voice-add");
    await page.waitForFunction(() => window.dramaStats.voicesAdded === 1, null, { timeout: 60000 });
    const chosen = await page.inputValue("#voice");
    assert.ok(chosen.startsWith("Browser-voice"), `new voice selected: ${chosen}`);
    await page.fill("#max-duration", "1");
    await page.click("#speak");
    await page.waitForFunction(() => window.dramaStats.speaks === 2 && window.dramaStats.done !== null,
      null, { timeout: 120000 });
    assert.equal(speechBodies.at(-1).voice, chosen);
    assert.ok((await page.evaluate(() => window.dramaStats.deltas)) >= 1);

    assert.deepEqual(errors, [], "no console errors");
    assert.deepEqual(outside, [], "no request beyond the server");
  } finally {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  }
});
