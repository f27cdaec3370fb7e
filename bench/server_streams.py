#!/usr/bin/python3
"""How many concurrent streams `drama serve` keeps faster than real time, end to end: N clients
each stream PCM over HTTP at once from a server with `--lanes N` (the model's steps, the codec's
decode of every frame, the HTTP replies), beside the model alone (`drama bench decode --lanes N`,
no codec, no HTTP) measured in the same run: its ceiling. Writes one JSON receipt.

    bench/server_streams.py --drama build/drama [--checkpoint DIR] [--threads 1]
                            [--streams 8,16,32,48,64,96,128] [--voice ID] [--stop-below-real-time] [--json FILE]

A stream's real-time factor is its audio seconds over the seconds from its first to its last
byte (above 1: faster than real time; the sessions run until end of speech, so each says the
whole text). Its underrun is the most any chunk came after a player that started at the first
byte, buffering nothing, needed it. Time to first audio is from the request's start; all N
requests start together, so the later ones wait for the others' prompts to be prefilled.
The checkpoint is verified against DIR/manifest.json; the default is the bundled drama-mini.
Receipts carry settings and figures only (no paths, hostnames or audio)."""

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from server_latency import checkpoint_label, cpu_model, start_server, write_receipt  # noqa: E402

RATE = 24000
TEXT = ("The old man walked slowly along the quiet road toward the small village, where the "
        "lights were already burning in every window and the smell of bread filled the evening air.")


def stream(base, seed, voice, out):
    body = json.dumps({"input": TEXT, "seed": seed, "voice": voice, "response_format": "pcm",
                       "stream": True}).encode()
    req = urllib.request.Request(base + "/v1/audio/speech", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    total, underrun = 0, 0.0
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                now = time.perf_counter()
                if first is None:
                    first = now
                underrun = max(underrun, now - (first + total / 2 / RATE))
                total += len(chunk)
                last = now
    except OSError as e:
        out.update(error=str(e))
        return
    out.update(ttfa_s=first - t0, audio_s=total / 2 / RATE, underrun_s=underrun,
               rtf=(total / 2 / RATE) / (last - first) if last > first else float("inf"))


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def concurrent_streams(a, n):
    proc, base = start_server(a.drama, a.checkpoint, a.threads, "cpu",
                              ["--lanes", str(n), "--max-queue", str(min(n, 1024))])
    try:
        stream(base, 1, a.voice, {})  # warm: the first generation of the process
        results = [{} for _ in range(n)]
        threads = [threading.Thread(target=stream, args=(base, 100 + i, a.voice, results[i])) for i in range(n)]
        cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cores_busy = (cpu_seconds(proc.pid) - cpu0) / (time.perf_counter() - t0)
        with urllib.request.urlopen(base + "/metrics", timeout=60) as resp:
            metrics = dict(line.split()[:2] for line in resp.read().decode().splitlines()
                           if line and not line.startswith("#"))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    errors = [r["error"] for r in results if "error" in r]
    done = [r for r in results if "error" not in r]
    rtf = sorted(r["rtf"] for r in done)
    ttfa = sorted(r["ttfa_s"] for r in done)
    return {"streams": n, "errors": len(errors), "first_error": errors[0] if errors else None,
            "audio_s_mean": sum(r["audio_s"] for r in done) / max(1, len(done)),
            "rtf_min": rtf[0] if rtf else 0, "rtf_median": rtf[len(rtf) // 2] if rtf else 0,
            "underrun_max_s": max((r["underrun_s"] for r in done), default=0),
            "ttfa_median_s": ttfa[len(ttfa) // 2] if ttfa else 0, "ttfa_max_s": ttfa[-1] if ttfa else 0,
            "server_cores_busy": cores_busy,
            "frames_per_step": float(metrics["drama_engine_frames_total"]) / float(metrics["drama_engine_steps_total"]),
            "codec_frames_per_pass": (float(metrics["drama_codec_frames_total"]) /
                                      max(1.0, float(metrics["drama_codec_passes_total"])))
            if "drama_codec_passes_total" in metrics else None}


def model_alone(a, n):
    """drama bench decode --lanes n on the same checkpoint and threads: frames/s of each stream."""
    out = subprocess.run([a.drama, "bench", "decode", "--checkpoint", a.checkpoint,
                          "--manifest", os.path.join(a.checkpoint, "manifest.json"), "--backend", "cpu",
                          "--threads", str(a.threads), "--lanes", str(n), "--frames", "16",
                          "--repeats", "2", "--cfg", "paired", "--json", "/dev/stdout"],
                         capture_output=True, text=True, check=True)
    j = json.JSONDecoder().raw_decode(out.stdout[out.stdout.index("{"):])[0]
    return {"step_ms": j["step_ms"], "stream_real_time_factor": j["stream_real_time_factor"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--drama", required=True)
    ap.add_argument("--checkpoint", default=os.path.join(HERE, "..", "models", "drama-mini"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--streams", default="8,16,32,48,64,96,128")
    ap.add_argument("--voice", default="festival-slt-a",
                    help="a voice id of the server (guided: two rows a session, as bench decode's paired)")
    ap.add_argument("--stop-below-real-time", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for n in [int(v) for v in a.streams.split(",")]:
        row = concurrent_streams(a, n)
        row["model_alone"] = model_alone(a, n)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if a.stop_below_real_time and (row["errors"] or row["rtf_min"] < 1):
            break
    passing = [r["streams"] for r in rows if not r["errors"] and r["rtf_min"] >= 1]
    receipt = {
        "bench": "server-streams",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "settings": {"text_chars": len(TEXT), "seeds": "100 + stream index", "voice": "a built-in voice (guided, paired)",
                     "response_format": "pcm", "stream": True, "threads": a.threads, "backend": "cpu",
                     "lanes": "= streams", "checkpoint": checkpoint_label(a.checkpoint)},
        "most_streams_faster_than_real_time": max(passing, default=0),
        "runs": rows,
        "note": "rtf = a stream's audio seconds / seconds from its first to its last byte; all streams "
                "start at once; server_cores_busy: the server's CPU seconds per second while they ran; frames_per_step: the sessions the model advanced per step (its /metrics, warm-up included); codec_frames_per_pass: the frames the codec decoded together per pass (its /metrics; none before the passes existed); model_alone is drama bench decode --lanes N (no codec, no HTTP) in "
                "the same run, the ceiling; underrun_max_s: the most a chunk came after a zero-buffer "
                "player started at the first byte needed it",
    }
    write_receipt(receipt, a.json)


if __name__ == "__main__":
    sys.exit(main())
