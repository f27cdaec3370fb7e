#!/usr/bin/env python3
"""Stamps every JSON receipt in a folder with the GPU machine's facts from nvidia-smi (card,
driver, clocks, memory, power limit) and the UTC date, under "machine". Run on the GPU machine at
the end of a call, before strip-paths.py (bench/cuda-h200-run.sh, bench/cuda-ab.sh).
Usage: machine_facts.py DIR   (prints the facts)"""
import datetime
import json
import os
import subprocess
import sys

QUERY = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,memory.total,power.limit"


def main():
    vals = subprocess.run(["nvidia-smi", "--query-gpu=" + QUERY, "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip().split(", ")
    machine = dict(zip(QUERY.split(","), vals))
    machine["date_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    machine["note"] = "nvidia-smi read after the runs; clocks.sm/mem are the current (idle) clocks"
    folder = sys.argv[1]
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".json") and os.path.isfile(path):
            with open(path) as f:
                receipt = json.load(f)
            receipt["machine"] = machine
            with open(path, "w") as f:
                json.dump(receipt, f, indent=2)
    print(machine)


if __name__ == "__main__":
    main()
