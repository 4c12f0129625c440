#!/usr/bin/env python3
"""SIGTERM -> exit, with the real `dashcam-agent` (goal: exit 0 within 2 s, the segment in
progress written and the session closed with 1001).

Each run starts the agent on the test pattern in real time (5-second segments), waits for its
first segment, sends SIGTERM at a random moment 0-5 s later, and times the exit from the signal.
Half the runs record only; half also stream to a local `guidance-server`, so the stop includes
the uplink's flush of the segment in progress (at most 1 s) and the close.

    swift build -c release --product dashcam-agent && swift build -c release --product guidance-server
    python3 bench/stop.py [--bin .build/release] [--runs 20]
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from uplink import Files, start_server, summary  # noqa: E402


def run_once(binaries, folder, url):
    """One start, first segment, SIGTERM; the ms from the signal to the exit."""
    files = Files(folder)
    config = files.write("agent.yaml", f"camera:\n  source: test-pattern\n  width: 640\n  height: 360\n  fps: 10\n"
                                       f"encoder:\n  preference: [libx265]\n  segmentSeconds: 5\n"
                                       f"recording:\n  dir: {files.path('recordings')}\n"
                                       f"speech:\n  sink: wav:{files.path('speech')}\nstatus:\n  socket: {files.path('status.sock')}\n"
                                       + (f"uplink:\n  url: {url}\n  allowInsecure: true\n  tokenFile: {files.path('token')}\n" if url else ""))
    with open(files.path("agent.jsonl"), "w") as out, open(files.path("agent.err"), "w") as err:
        agent = subprocess.Popen([os.path.join(binaries, "dashcam-agent"), "record", "--config", config], stdout=out, stderr=err)
        deadline = time.monotonic() + 60
        while os.path.getsize(files.path("agent.jsonl")) == 0:
            if time.monotonic() > deadline or agent.poll() is not None:
                agent.kill()
                sys.exit("no segment:\n" + open(files.path("agent.err")).read()[-3000:])
            time.sleep(0.01)
        time.sleep(random.uniform(0, 5))
        sent = time.monotonic()
        agent.send_signal(signal.SIGTERM)
        code = agent.wait()
        took = (time.monotonic() - sent) * 1000
    if code != 0:
        sys.exit(f"exit {code}:\n" + open(files.path("agent.err")).read()[-3000:])
    last = [json.loads(line) for line in open(files.path("agent.jsonl")) if line.strip()][-1]
    # A signal right on a segment boundary leaves nothing in progress: the last one is complete.
    kept = last.get("endReason") == "complete" or (
        last.get("endReason") == "shutdown" and os.path.exists(os.path.join(files.path("recordings"), last.get("file", ""))))
    return took, kept


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=".build/release")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    results = {"record only": [], "streaming": []}
    with tempfile.TemporaryDirectory() as folder:
        server, port = start_server(args.bin, Files(os.path.join(folder)), folder)
        try:
            for index in range(args.runs):
                streaming = index % 2 == 1
                run_folder = os.path.join(folder, f"run{index}")
                os.makedirs(run_folder)
                took, kept = run_once(args.bin, run_folder, f"ws://127.0.0.1:{port}/v1/stream" if streaming else None)
                if not kept:
                    sys.exit(f"run {index}: the segment in progress was not written")
                results["streaming" if streaming else "record only"].append(took)
        finally:
            server.stop()
    for name, values in results.items():
        print(summary(f"SIGTERM -> exit 0, {name}", values))


if __name__ == "__main__":
    main()
