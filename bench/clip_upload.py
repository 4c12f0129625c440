#!/usr/bin/env python3
"""A clip's upload over a car's uplink, and what it does to guidance: the packaged `dashcam-agent`
and the release `guidance-server`, each in its own network namespace, joined by a veth pair
shaped like a mobile uplink: a token bucket (`tc tbf`, default 20 Mbit/s up, 50 Mbit/s down, a
queue of up to 400 ms as a mobile network's buffers hold), and with `--delay` a one-way delay by
netem where the kernel has it.

  baseline  the agent streams 5-s guidance segments; each one's acknowledgement delay (segment
            closed -> `ack` read), which the agent logs at debug level.
  upload    the same, while a clip of --clip-mb of incompressible evidence (kept on the card from
            an earlier run, as after a reboot) uploads: the same delays for the segments
            acknowledged during the upload, and the upload's throughput (session open -> the
            server has every file, SHA-256 checked).

Needs root (namespaces, tc) and the binaries:

    DEB_SCRATCH=.build-bench bash deploy/build-deb.sh
    swift build -c release --product guidance-server --scratch-path .build-bench
    sudo python3 bench/clip_upload.py --agent .build-bench/release/dashcam-agent --server .build-bench/release/guidance-server
"""
import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from uplink import Program, ip, percentile, summary  # noqa: E402

TOKEN = "bench-token-1"
ACK = re.compile(r"segment (\d+) acknowledged ([0-9.]+) ms after it closed")
SERVER_IP, CAR_IP = "10.232.1.1", "10.232.1.2"


def write(path, text, mode=0o644):
    with open(path, "w") as file:
        file.write(text)
    os.chmod(path, mode)
    return path


def namespaces(tag, up, down, delay_ms):
    srv, car = f"clip-srv-{tag}", f"clip-car-{tag}"
    ip("netns", "add", srv)
    ip("netns", "add", car)
    for ns in (srv, car):
        ip("-n", ns, "link", "set", "lo", "up")
    ip("-n", srv, "link", "add", "vs", "type", "veth", "peer", "name", "va", "netns", car)
    ip("-n", srv, "addr", "add", f"{SERVER_IP}/24", "dev", "vs")
    ip("-n", car, "addr", "add", f"{CAR_IP}/24", "dev", "va")
    ip("-n", srv, "link", "set", "vs", "up")
    ip("-n", car, "link", "set", "va", "up")
    ip("-n", car, "route", "add", "default", "via", SERVER_IP, "dev", "va")
    # The car's uplink and the server's downlink: a rate, a queue of up to 400 ms, and with
    # delay_ms a one-way delay (netem) before it.
    for ns, dev, rate in ((car, "va", up), (srv, "vs", down)):
        tc = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev]
        if delay_ms:
            subprocess.run(tc + ["root", "handle", "1:", "netem", "delay", f"{delay_ms}ms"], check=True)
            subprocess.run(tc + ["parent", "1:1", "handle", "10:", "tbf", "rate", f"{rate}mbit", "burst", "32kbit", "latency", "400ms"], check=True)
        else:
            subprocess.run(tc + ["root", "tbf", "rate", f"{rate}mbit", "burst", "32kbit", "latency", "400ms"], check=True)
    return srv, car


def seed_clip(recordings, megabytes, files=8):
    """A clip an earlier run kept: `files` evidence files of random bytes, protected, and their
    custody entry. Returns its id and total bytes."""
    day = os.path.join(recordings, "protected", "2026-11-29")
    os.makedirs(day, exist_ok=True)
    os.makedirs(os.path.join(recordings, "protected", "uploads"), exist_ok=True)
    each = megabytes * 1048576 // files
    described, paths = [], {}
    for index in range(files):
        name = f"{index + 1:06d}-20261129T0800{index * 5:02d}.000Z.mp4"
        data = os.urandom(each)
        with open(os.path.join(day, name), "wb") as file:
            file.write(data)
        described.append({"name": name, "bytes": each, "sha256": hashlib.sha256(data).hexdigest()})
        paths[name] = f"protected/2026-11-29/{name}"
    clip_id = "incident-bench"
    entry = {"clip": {"id": clip_id, "kind": "incident", "at": "2026-11-29T08:00:10.000Z", "from": "2026-11-29T08:00:00.000Z",
                      "to": f"2026-11-29T08:0{files * 5 // 60}:{files * 5 % 60:02d}.000Z", "peakG": 2.5, "files": described},
             "paths": paths}
    write(os.path.join(recordings, "protected", "uploads", clip_id + ".json"), json.dumps(entry))
    return clip_id, each * files


def run_agent(agent_bin, folder, car, port, recordings, until, timeout):
    config = write(os.path.join(folder, "agent.yaml"),
                   f"camera:\n  source: test-pattern\n  width: 640\n  height: 360\n  fps: 10\n"
                   f"encoder:\n  preference: [libx265]\n  segmentSeconds: 5\n"
                   f"recording:\n  dir: {recordings}\n  protectedMaxMegabytes: 100000\n"
                   f"uplink:\n  url: ws://{SERVER_IP}:{port}/v1/stream\n  allowInsecure: true\n"
                   f"  tokenFile: {os.path.join(folder, 'token')}\n  deviceId: bench-car\n  queueSegments: 20\n  queueMaxAgeMs: 120000\n"
                   f"status:\n  socket: {os.path.join(folder, 'status.sock')}\nlog:\n  level: debug\n")
    agent = Program([agent_bin, "record", "--config", config], folder, prefix=("ip", "netns", "exec", car))
    marks = {}
    done = agent.wait_for(lambda text: until(text, marks), timeout)
    agent.stop(signal.SIGTERM)
    if done is None:
        sys.exit("timed out:\n" + agent.stderr()[-4000:])
    return agent.stderr(), marks


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", required=True, help="the packaged dashcam-agent")
    parser.add_argument("--server", required=True, help="a release guidance-server")
    parser.add_argument("--segments", type=int, default=30, help="acknowledged segments in the baseline")
    parser.add_argument("--clip-mb", type=int, default=120)
    parser.add_argument("--up", type=float, default=20, help="Mbit/s from the car")
    parser.add_argument("--down", type=float, default=50, help="Mbit/s to the car")
    parser.add_argument("--delay", type=int, default=0, help="ms each way (netem; not every kernel has it)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: network namespaces and tc")
    tag = str(os.getpid())
    srv = car = None
    with tempfile.TemporaryDirectory(prefix="bench-clip-") as folder:
        os.chmod(folder, 0o755)
        try:
            srv, car = namespaces(tag, args.up, args.down, args.delay)
            write(os.path.join(folder, "tokens.yaml"), f"{TOKEN}: bench-car\n", 0o600)
            write(os.path.join(folder, "token"), TOKEN + "\n", 0o600)
            write(os.path.join(folder, "script.yaml"), "- clear: true\n")
            clips = os.path.join(folder, "clips")
            server_config = write(os.path.join(folder, "server.yaml"),
                                  f"server:\n  host: {SERVER_IP}\n  port: 0\n  tokensFile: {os.path.join(folder, 'tokens.yaml')}\n"
                                  f"analyzer:\n  kind: scripted\n  scriptFile: {os.path.join(folder, 'script.yaml')}\n"
                                  f"clips:\n  dir: {clips}\n  maxFileMegabytes: 1024\n  maxMegabytesPerCar: 100000\n"
                                  f"ledger: sqlite:{os.path.join(folder, 'usage.sqlite')}\n")
            server = Program([args.server, "--config", server_config], folder, prefix=("ip", "netns", "exec", srv))
            if server.wait_for(lambda text: "listening on" in text, 30) is None:
                sys.exit("the server did not start:\n" + server.stderr())
            port = int(next(line for line in server.stderr().splitlines() if "listening on" in line).rsplit(":", 1)[1])
            print(f"link: {args.up:g} Mbit/s up, {args.down:g} down (tbf, 400 ms queue), {args.delay} ms each way")

            recordings = os.path.join(folder, "recordings")
            baseline_text, _ = run_agent(args.agent, folder, car, port, recordings,
                                         lambda text, marks: len(ACK.findall(text)) >= args.segments + 1,
                                         args.segments * 5 * 3 + 120)
            # The first acknowledgement waits for the session; the rest are the steady state.
            baseline = [float(ms) for _, ms in ACK.findall(baseline_text)][1:args.segments + 1]

            clip_id, clip_bytes = seed_clip(recordings, args.clip_mb)
            stored_line = f"uplink: clip {clip_id} is stored on the server"

            def until(text, marks):
                now = time.monotonic()
                if "opened" not in marks and re.search(r"uplink: session \S+ open", text):
                    marks["opened"] = now
                    marks["acks_before"] = len(ACK.findall(text))
                if "opened" in marks and stored_line in text and "stored" not in marks:
                    marks["stored"] = now
                    marks["acks_at_stored"] = len(ACK.findall(text))
                return "stored" in marks

            upload_text, marks = run_agent(args.agent, folder, car, port, recordings, until,
                                           args.clip_mb * 8 / args.up * 20 + 300)
            during = [float(ms) for _, ms in ACK.findall(upload_text)][marks["acks_before"]:marks["acks_at_stored"]]
            seconds = marks["stored"] - marks["opened"]
            held = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(clips)
                       for name in names if name.endswith(".mp4"))
            server.stop()
            print(summary("baseline: segment closed -> ack", baseline))
            if during:
                print(summary("during the upload: segment closed -> ack", during))
                print(f"p95: baseline {percentile(baseline, 95):.1f} ms, during the upload {percentile(during, 95):.1f} ms "
                      f"({(percentile(during, 95) / percentile(baseline, 95) - 1) * 100:+.1f} %)")
            else:
                print("no segment was acknowledged during the upload")
            print(f"upload: {clip_bytes / 1048576:.0f} MiB in {seconds:.1f} s = {clip_bytes * 8 / seconds / 1e6:.2f} Mbit/s "
                  f"({clip_bytes * 8 / seconds / 1e6 / args.up * 100:.0f} % of the uplink); the server holds {held} bytes")
            if held != clip_bytes:
                sys.exit("the server does not hold the whole clip")
        finally:
            for ns in (car, srv):
                if ns:
                    subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
