#!/usr/bin/env python3
"""A hostile gpsd against the release dashcam-agent: something listening on gpsd's port that
sends everything but gpsd's JSON, while the agent records. Prints what the agent survived: its
segments, their tracks, its peak RSS, its log's length, and its exit status on SIGTERM.

    swift build -c release --product dashcam-agent
    python3 bench/hostile_gpsd.py [--seconds 60] [--bin .build/release]

Each connection the agent makes gets one behaviour, in turn:
  junk      random bytes, with and without newlines
  long      a line that never ends (megabytes without a newline), then a short one
  numbers   TPV objects with every number out of range, of the wrong type, NaN-like, huge
  flood     valid TPVs as fast as the socket takes them
  close     the version line, then the connection closed at once
  silent    accepts and says nothing
The fix the agent shows, and every point of every segment, must only ever be the valid fix's
numbers (or fewer of them: a broken one is left out, never taken).
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

KINDS = ["junk", "long", "numbers", "flood", "close", "silent"]
VERSION = b'{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}\n'
VALID = b'{"class":"TPV","mode":3,"time":"2026-11-26T08:10:11.000Z","lat":37.5665,"lon":126.978,"speed":13.89,"track":91.5}\n'
sent = {kind: 0 for kind in KINDS}


def serve(listener, stop):
    turn = 0
    while not stop.is_set():
        try:
            connection, _ = listener.accept()
        except socket.timeout:
            continue
        kind = KINDS[turn % len(KINDS)]
        turn += 1
        threading.Thread(target=behave, args=(connection, kind, stop), daemon=True).start()


def behave(connection, kind, stop):
    connection.settimeout(2)
    end = time.monotonic() + 8
    try:
        connection.recv(1024)  # ?WATCH
        if kind != "silent":
            connection.sendall(VERSION)
        while time.monotonic() < end and not stop.is_set():
            if kind == "junk":
                data = os.urandom(random.randint(1, 4096))
            elif kind == "long":
                data = b"x" * 65536
            elif kind == "numbers":
                value = random.choice(["1e400", "-1e400", "91", "-181", "\"3\"", "true", "null", "[]", "{}", "1e308", "-0"])
                field = random.choice(["mode", "lat", "lon", "speed", "track", "alt", "altHAE", "time"])
                # The valid fix's numbers, one of them broken: what is left is still that fix.
                fields = {"mode": "3", "lat": "37.5665", "lon": "126.978", "speed": "13.89", "track": "91.5", "time": '"2026-11-26T08:10:11.000Z"'}
                fields[field] = value
                data = ("{" + '"class":"TPV",' + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}\n").encode()
            elif kind == "flood":
                data = VALID * 64
            elif kind == "close":
                break
            else:
                time.sleep(0.5)
                continue
            connection.sendall(data)
            sent[kind] += len(data)
    except OSError:
        pass
    finally:
        connection.close()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--bin", default=".build/release")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="hostile-gpsd-")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    stop = threading.Event()
    threading.Thread(target=serve, args=(listener, stop), daemon=True).start()
    config = os.path.join(folder, "agent.yaml")
    with open(config, "w") as f:
        f.write(f"""camera:
  source: test-pattern
  width: 320
  height: 180
encoder:
  preference: [libx265]
  segmentSeconds: 2
recording:
  dir: {folder}/segments
speech:
  sink: wav:{folder}/speech
status:
  socket: {folder}/status.sock
offline:
  enabled: false
sensors:
  gps:
    gpsd: 127.0.0.1:{port}
""")
    out, err = open(os.path.join(folder, "out.jsonl"), "w"), open(os.path.join(folder, "err.log"), "w")
    agent = subprocess.Popen([os.path.join(args.bin, "dashcam-agent"), "record", "--config", config], stdout=out, stderr=err)
    fixes = set()
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline and agent.poll() is None:
        time.sleep(1)
        status = subprocess.run([os.path.join(args.bin, "dashcam-agent"), "status", "--json", "--socket", f"{folder}/status.sock"],
                                capture_output=True, text=True)
        try:
            fix = (json.loads(status.stdout).get("gps") or {}).get("fix")
        except ValueError:
            fix = None
        if fix and fix.get("lat") is not None:
            fixes.add((fix["lat"], fix["lon"], fix.get("speedKmh"), fix.get("heading")))
    alive = agent.poll() is None
    peak = rss_kib(agent.pid) if alive else 0
    agent.send_signal(signal.SIGTERM)
    code = agent.wait(timeout=30)
    stop.set()
    out.close()
    err.close()
    lines = [json.loads(l) for l in open(os.path.join(folder, "out.jsonl")) if l.startswith("{")]
    log = open(os.path.join(folder, "err.log")).read()
    points = sum(len(l.get("gps") or []) for l in lines)
    bad = [p for l in lines for p in (l.get("gps") or []) if p.get("lat") not in (None, 37.5665) or p.get("lon") not in (None, 126.978)]
    print(json.dumps({
        "seconds": args.seconds, "alive_at_end": alive, "exit_on_sigterm": code, "segments": len(lines), "gps_points": points,
        "points_not_from_a_valid_fix": len(bad), "fixes_shown": sorted(fixes, key=str), "peak_rss_mib": round(peak / 1024, 1),
        "log_lines": log.count("\n"), "gps_log_lines": sum(1 for line in log.splitlines() if "gps:" in line),
        "bytes_sent": sent,
    }, indent=1))
    ok = alive and code == 0 and not bad and all(f[:2] == (37.5665, 126.978) and f[2] in (None, 50.0) and f[3] in (None, 91.5) for f in fixes)
    sys.exit(0 if ok else 1)


main()
