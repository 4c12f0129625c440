#!/usr/bin/env python3
"""What the running `dashcam-agent` holds, for the bounds of deploy/dashcam-agent.service
(LimitNOFILE=, MemoryMax=, TasksMax=).

Each case runs the agent on the test pattern in real time (libx265, 5-second segments) and streams
to a local `guidance-server`; /proc/PID is sampled every 100 ms for open files, threads and
resident memory, and the peak (VmHWM) read at the end. Then 200 local clients connect to the
control socket and stay silent: the open files are sampled for 1.5 s (less than the socket's read
timeout, so its admitted clients are all still open), then one `status` request is answered.

    swift build -c release --product dashcam-agent && swift build -c release --product guidance-server
    python3 bench/service_limits.py [--bin .build/release] [--seconds 30]
"""
import argparse
import json
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from uplink import Files, Program, start_server  # noqa: E402

CASES = [(640, 360, 10), (1280, 720, 30)]


def sample(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return fds, int(fields["Threads"][0]), int(fields["VmRSS"][0]) // 1024, int(fields["VmHWM"][0]) // 1024


def ask(path, request, patience=10):
    """One request; turned away (busy line, or reset before the request was read), asks again."""
    deadline = time.monotonic() + patience
    while True:
        try:
            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(15)
                client.connect(path)
                client.sendall(request.encode() + b"\n")
                reply = b""
                while chunk := client.recv(65536):
                    reply += chunk
            if not reply.startswith(b'{"busy":true') or time.monotonic() > deadline:
                return reply.decode()
        except (ConnectionResetError, BrokenPipeError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def run_case(binaries, folder, port, size, seconds):
    width, height, fps = size
    files = Files(folder)
    sock = files.path("status.sock")
    config = files.write("agent.yaml", f"camera:\n  source: test-pattern\n  width: {width}\n  height: {height}\n  fps: {fps}\n"
                                       f"encoder:\n  preference: [libx265]\n  segmentSeconds: 5\n"
                                       f"recording:\n  dir: {files.path('recordings')}\n"
                                       f"uplink:\n  url: ws://127.0.0.1:{port}/v1/stream\n  allowInsecure: true\n"
                                       f"  tokenFile: {files.path('token')}\n  deviceId: bench-car\n"
                                       f"speech:\n  sink: wav:{files.path('speech')}\nstatus:\n  socket: {sock}\n")
    agent = Program([os.path.join(binaries, "dashcam-agent"), "record", "--config", config], folder)
    if agent.wait_for(lambda text: "status: answering" in text, 60) is None:
        sys.exit("the agent did not start:\n" + agent.stderr()[-3000:])
    peak = [0, 0, 0, 0]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = [max(a, b) for a, b in zip(peak, sample(agent.process.pid))]
        time.sleep(0.1)
    # Silent clients: the socket admits its cap and turns the rest away.
    idle = []
    for _ in range(200):
        client = socket.socket(socket.AF_UNIX)
        client.connect(sock)
        idle.append(client)
    flooded = 0
    flood_deadline = time.monotonic() + 1.5
    while time.monotonic() < flood_deadline:
        flooded = max(flooded, sample(agent.process.pid)[0])
        time.sleep(0.05)
    status = json.loads(ask(sock, "status"))
    for client in idle:
        client.close()
    hwm = sample(agent.process.pid)[3]
    agent.stop()
    if agent.process.returncode != 0:
        sys.exit(f"exit {agent.process.returncode}:\n" + agent.stderr()[-3000:])
    segments = status["camera"]["segments"]
    return peak[0], peak[1], max(peak[2], hwm), flooded, segments


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=".build/release")
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}")
    print("| case | open files (max) | open files, 200 idle control clients | threads (max) | peak RSS MiB |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        server, port = start_server(args.bin, Files(folder), folder)
        try:
            for size in CASES:
                case_folder = os.path.join(folder, "x".join(map(str, size)))
                os.makedirs(case_folder)
                fds, threads, rss, flooded, segments = run_case(args.bin, case_folder, port, size, args.seconds)
                if segments < 1:
                    sys.exit(f"{size}: no segment recorded")
                print(f"| {size[0]}x{size[1]}@{size[2]}, {args.seconds} s, streaming | {fds} | {flooded} | {threads} | {rss} |")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
