#!/usr/bin/python3
"""Time to first audio and real-time factor of one streamed request through `drama serve`,
beside the same utterance through `drama say` (the server's overhead). Writes one JSON receipt.

    bench/server_latency.py --drama build/drama --checkpoint DIR [--frames 25] [--threads 2]
                            [--backend cpu|cuda] [--json FILE]

The checkpoint is verified against DIR/manifest.json by both commands. Receipts carry settings and
figures only (no paths, hostnames or audio).
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request


def checkpoint_label(checkpoint):
    with open(os.path.join(checkpoint, "manifest.json")) as f:
        m = json.load(f)
    return f"{m.get('repo')}@{m.get('revision')}"


def start_server(drama, checkpoint, threads, backend, extra=()):
    proc = subprocess.Popen(
        [drama, "serve", "--checkpoint", checkpoint, "--manifest", os.path.join(checkpoint, "manifest.json"),
         "--port", "0", "--threads", str(threads), "--backend", backend, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            # Keep draining its log so a full pipe never stalls the server.
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("drama serve did not start")


def streamed_request(base, text, seed, seconds):
    body = json.dumps({"input": text, "seed": seed, "response_format": "pcm", "stream": True,
                       "max_duration_s": seconds}).encode()
    req = urllib.request.Request(base + "/v1/audio/speech", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    total = 0
    with urllib.request.urlopen(req, timeout=600) as resp:
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            if first is None:
                first = time.perf_counter() - t0
            total += len(chunk)
    return first, time.perf_counter() - t0, total


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (receipts name the machine by it; bench/server_streams.py also)."""
    with open("/proc/cpuinfo") as f:
        return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")


def write_receipt(receipt, path):
    """Prints the receipt and, with a path, writes it there too (bench/server_streams.py also)."""
    text_out = json.dumps(receipt, indent=1)
    print(text_out)
    if path:
        with open(path, "w") as f:
            f.write(text_out + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--drama", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--frames", type=int, default=25)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--json")
    a = ap.parse_args()
    text, seed, rate = "The quick brown fox jumps over the lazy dog.", 7, 24000
    # The checkpoint's own frame rate (12.5 for Mimi, 25 for drama-mini since run 4; a constant
    # 12.5 here halved the seconds of a 25 frames/s model's frames until 2026-12-04).
    with open(os.path.join(a.checkpoint, "config.json")) as f:
        frame_rate = float(json.load(f)["audio"]["frame_rate"])
    seconds = a.frames / frame_rate

    # drama say: its own report of generation time (loading and verification excluded), the
    # median of three runs (one run swung by 0.8 s on the shared VM).
    says = []
    for _ in range(3):
        out = subprocess.run([a.drama, "say", text, "--checkpoint", a.checkpoint,
                              "--manifest", os.path.join(a.checkpoint, "manifest.json"), "--seed", str(seed),
                              "--max-frames", str(a.frames), "--threads", str(a.threads),
                              "--backend", a.backend,
                              "--format", "pcm", "-o", "/dev/null"],
                             capture_output=True, text=True, check=True)
        m = re.search(r"(\d+) frames(?: \([^)]*\))? in ([\d.]+) s", out.stderr + out.stdout)
        says.append((float(m.group(2)), int(m.group(1))))
    says.sort()
    say_s, say_frames = says[1]

    proc, base = start_server(a.drama, a.checkpoint, a.threads, a.backend)
    try:
        # The first request is the server's first generation, as say's is its process's (both
        # hold their weights in memory, read at load). The three after it are warm.
        cold = streamed_request(base, text, seed, seconds)
        runs = [streamed_request(base, text, seed, seconds) for _ in range(3)]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    runs.sort(key=lambda r: r[1])
    first, total, nbytes = runs[1]
    audio_s = nbytes / 2 / rate
    receipt = {
        "bench": "server-latency",
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "settings": {"text_chars": len(text), "seed": seed, "frames": a.frames, "guidance": "none (no voice)",
                     "response_format": "pcm", "stream": True, "threads": a.threads, "backend": a.backend,
                     "weights": "in memory (the default)",
                     # The manifest's repo and revision, not the folder's path (which was
                     # once written here as the cpu-bench command line, whatever was timed).
                     "checkpoint": checkpoint_label(a.checkpoint)},
        "http": {"time_to_first_audio_s": first, "total_s": total, "audio_s": audio_s,
                 "real_time_factor": audio_s / total, "median_of": 3},
        "http_first_request": {"time_to_first_audio_s": cold[0], "total_s": cold[1],
                               "real_time_factor": cold[2] / 2 / rate / cold[1]},
        "say": {"frames": say_frames, "generation_s": say_s, "audio_s": say_frames / frame_rate,
                "real_time_factor": say_frames / frame_rate / say_s},
        "server_overhead_s": cold[1] - say_s,
        "note": "real_time_factor = audio seconds / wall seconds (above 1 is faster than real time); "
                "say's time is its own generation report, the HTTP time is measured by the client; "
                "server_overhead_s compares the server's first request with say (both the first "
                "generation of their process; say's the median of three runs); http is the median "
                "of three warm requests after the first",
    }
    write_receipt(receipt, a.json)


if __name__ == "__main__":
    sys.exit(main())
