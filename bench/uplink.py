#!/usr/bin/env python3
"""The uplink's figures, with the real `dashcam-agent` and `guidance-server` binaries.

  send     segment closed -> its last byte written to the WebSocket, on loopback (p50/p99).
           The agent measures it itself and logs it at debug level for every segment sent.
  restart  server killed (SIGKILL) and started again on the same port -> the new server logs the
           agent's new session. Each session first lives 31 s, as a real one would, so the
           reconnect backoff starts from its base (250 ms, full jitter) every time.
  move     the car's default route moved to a second path (network namespaces, needs root) ->
           the server logs the new session. The old path stays up.
  handover the car's link A taken down (its packets vanish) and the default route moved to link B
           (namespaces, needs root) -> the agent logs the `welcome` of its new session.
  silent   a forwarder between agent and server goes silent (reads and drops both ways) ->
           the server logs the agent's new session.
  stopread the forwarder stops reading from the agent -> the server logs the new session.
  noanswer the first connection is accepted and never answered -> the agent connects again
           (connect deadline plus the first backoff).

    swift build -c release --product dashcam-agent && swift build -c release --product guidance-server
    python3 bench/uplink.py [--bin .build/release] [--only send,restart,move,handover,silent,stopread,noanswer]
"""
import argparse
import os
import random
import re
import shutil
import signal
import socket
import threading
import statistics
import subprocess
import sys
import tempfile
import time

TOKEN = "bench-token-1"


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(name, values, unit="ms"):
    return (f"{name}: n={len(values)} min {min(values):.1f} p50 {percentile(values, 50):.1f} "
            f"p90 {percentile(values, 90):.1f} p99 {percentile(values, 99):.1f} max {max(values):.1f} {unit}")


class Files:
    def __init__(self, folder):
        self.folder = folder
        self.write("tokens.yaml", f"{TOKEN}: bench-car\n", mode=0o600)
        self.write("token", TOKEN + "\n", mode=0o600)
        self.write("script.yaml", '- text: "slow down"\n  lang: en-US\n- clear: true\n')

    def path(self, name):
        return os.path.join(self.folder, name)

    def write(self, name, text, mode=0o644):
        with open(self.path(name), "w") as file:
            file.write(text)
        os.chmod(self.path(name), mode)
        return self.path(name)

    def server(self, host="127.0.0.1", port=0):
        return self.write("server.yaml", f"server:\n  host: {host}\n  port: {port}\n  tokensFile: {self.path('tokens.yaml')}\n"
                                         f"analyzer:\n  kind: scripted\n  scriptFile: {self.path('script.yaml')}\nlog:\n  level: info\n"
                                         f"ledger: sqlite:{self.path('usage.sqlite')}\n")

    def agent(self, url, pace="realtime", segment_seconds=5, level="info"):
        return self.write("agent.yaml", f"camera:\n  source: test-pattern\n  width: 640\n  height: 360\n  fps: 10\n  pace: {pace}\n"
                                        f"encoder:\n  preference: [libx265]\n  segmentSeconds: {segment_seconds}\n"
                                        f"recording:\n  dir: {self.path('segments')}\n"
                                        f"uplink:\n  url: {url}\n  allowInsecure: true\n  tokenFile: {self.path('token')}\n"
                                        f"  deviceId: bench-car\nlog:\n  level: {level}\n")


class Program:
    """A program in the background, its stderr in a file that is polled."""

    def __init__(self, argv, folder, prefix=()):
        self.err_path = os.path.join(folder, f"{os.path.basename(argv[0])}-{random.randrange(1 << 30)}.err")
        self.err = open(self.err_path, "w")
        self.process = subprocess.Popen(list(prefix) + argv, stdout=subprocess.DEVNULL, stderr=self.err)

    def stderr(self):
        with open(self.err_path, errors="replace") as file:
            return file.read()

    def wait_for(self, condition, timeout):
        """Polls every 2 ms; the monotonic time the condition first held, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self.stderr()):
                return time.monotonic()
            if self.process.poll() is not None:
                sys.exit(f"{self.process.args[0]} exited with {self.process.returncode}:\n" + self.stderr()[-3000:])
            time.sleep(0.002)
        return None

    def stop(self, sig=signal.SIGTERM):
        if self.process.poll() is None:
            self.process.send_signal(sig)
        self.process.wait()
        self.err.close()


def start_server(binaries, files, folder, host="127.0.0.1", port=0, prefix=()):
    server = Program([os.path.join(binaries, "guidance-server"), "--config", files.server(host, port)], folder, prefix)
    if server.wait_for(lambda text: "listening on" in text, 30) is None:
        sys.exit("the server did not start:\n" + server.stderr())
    line = next(line for line in server.stderr().splitlines() if "listening on" in line)
    return server, int(line.rsplit(":", 1)[1])


def bench_send(binaries, folder, pace, segment_seconds, segments):
    files = Files(folder)
    server, port = start_server(binaries, files, folder)
    agent = Program([os.path.join(binaries, "dashcam-agent"), "record", "--config",
                     files.agent(f"ws://127.0.0.1:{port}/v1/stream", pace, segment_seconds, "debug")], folder)
    pattern = re.compile(r"last byte written ([0-9.]+) ms after it closed")
    found = agent.wait_for(lambda text: len(pattern.findall(text)) >= segments, segments * segment_seconds * 2 + 60)
    agent.stop()
    server.stop()
    values = [float(v) for v in pattern.findall(agent.stderr())]
    if found is None or not values:
        sys.exit(f"only {len(values)} segments sent:\n" + agent.stderr()[-3000:])
    return values


def bench_restart(binaries, folder, restarts, lived):
    files = Files(folder)
    server, port = start_server(binaries, files, folder)
    agent = Program([os.path.join(binaries, "dashcam-agent"), "record", "--config",
                     files.agent(f"ws://127.0.0.1:{port}/v1/stream")], folder)
    if server.wait_for(lambda text: "opened" in text, 30) is None:
        sys.exit("no first session:\n" + agent.stderr()[-3000:])
    from_kill, from_listening = [], []
    for _ in range(restarts):
        time.sleep(lived)
        killed = time.monotonic()
        server.stop(signal.SIGKILL)
        server, _ = start_server(binaries, files, folder, port=port)
        listening = time.monotonic()
        opened = server.wait_for(lambda text: "opened" in text, 60)
        if opened is None:
            sys.exit("the agent did not come back:\n" + agent.stderr()[-3000:])
        from_kill.append((opened - killed) * 1000)
        from_listening.append((opened - listening) * 1000)
    agent.stop()
    server.stop()
    return from_kill, from_listening


class Forwarder:
    """A TCP forwarder on loopback whose connections can go silent, stop reading, or never answer."""

    def __init__(self, target_port, never_answer_first=False):
        self.target_port = target_port
        self.never_answer_first = never_answer_first
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.accepted = []          # monotonic times
        self.modes = []             # per connection: "forward", "silent", "stopread"
        self.sockets = []
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            index = len(self.accepted)
            self.accepted.append(time.monotonic())
            if index == 0 and self.never_answer_first:
                self.modes.append("silent")
                self.sockets.append((client, None))
                threading.Thread(target=self.pump, args=(index, client, None), daemon=True).start()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.modes.append("forward")
            self.sockets.append((client, upstream))
            threading.Thread(target=self.pump, args=(index, client, upstream), daemon=True).start()
            threading.Thread(target=self.pump, args=(index, upstream, client), daemon=True).start()

    def pump(self, index, source, sink):
        while True:
            mode = self.modes[index]
            if mode == "stopread" and sink is not None and source is self.sockets[index][0]:
                time.sleep(0.05)
                continue
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            if self.modes[index] == "forward" and sink is not None:
                try:
                    sink.sendall(data)
                except OSError:
                    return

    def set_mode(self, index, mode):
        self.modes[index] = mode

    def close(self):
        self.listener.close()
        for pair in self.sockets:
            for s in pair:
                if s is not None:
                    s.close()


def bench_fault(binaries, folder, mode, runs):
    """Each run: a fresh agent through a forwarder; after two acked segments the link fails."""
    values = []
    for run in range(runs):
        sub = os.path.join(folder, f"{mode}-{run}")
        os.makedirs(sub)
        files = Files(sub)
        server, port = start_server(binaries, files, sub)
        forwarder = Forwarder(port, never_answer_first=(mode == "noanswer"))
        agent = Program([os.path.join(binaries, "dashcam-agent"), "record", "--config",
                         files.agent(f"ws://127.0.0.1:{forwarder.port}/v1/stream", segment_seconds=1)], sub)
        if mode == "noanswer":
            if server.wait_for(lambda text: text.count(" opened") == 1, 30) is None:
                sys.exit("no session after the unanswered one:\n" + agent.stderr()[-3000:])
            values.append((forwarder.accepted[1] - forwarder.accepted[0]) * 1000)
        else:
            if server.wait_for(lambda text: text.count(" verified") >= 2, 30) is None:
                sys.exit("no segments:\n" + agent.stderr()[-3000:])
            failed = time.monotonic()
            forwarder.set_mode(0, mode)
            opened = server.wait_for(lambda text: text.count(" opened") == 2, 60)
            if opened is None:
                sys.exit(f"{mode}: no new session:\n" + agent.stderr()[-3000:])
            values.append((opened - failed) * 1000)
        agent.stop()
        # The forwarder first: a server holding a connection that went silent would wait for it.
        forwarder.close()
        server.stop(signal.SIGKILL)
    return values


def ip(*arguments):
    subprocess.run(["ip", *arguments], check=True)


def two_paths(srv, car):
    """A server namespace reached from a car namespace over two veth paths; the default route on path 1."""
    ip("netns", "add", srv)
    ip("netns", "add", car)
    for ns in (srv, car):
        ip("-n", ns, "link", "set", "lo", "up")
    ip("-n", srv, "addr", "add", "10.231.10.1/32", "dev", "lo")
    for path in (1, 2):
        ip("-n", srv, "link", "add", f"vs{path}", "type", "veth", "peer", "name", f"va{path}", "netns", car)
        ip("-n", srv, "addr", "add", f"10.231.1{path}.1/24", "dev", f"vs{path}")
        ip("-n", car, "addr", "add", f"10.231.1{path}.2/24", "dev", f"va{path}")
        ip("-n", srv, "link", "set", f"vs{path}", "up")
        ip("-n", car, "link", "set", f"va{path}", "up")
    ip("-n", car, "route", "add", "default", "via", "10.231.11.1", "dev", "va1")


def bench_move(binaries, folder, moves):
    tag = f"{os.getpid()}"
    srv, car = f"bench-srv-{tag}", f"bench-car-{tag}"
    try:
        two_paths(srv, car)
        files = Files(folder)
        server, port = start_server(binaries, files, folder, host="10.231.10.1", prefix=("ip", "netns", "exec", srv))
        agent = Program([os.path.join(binaries, "dashcam-agent"), "record", "--config",
                         files.agent(f"ws://10.231.10.1:{port}/v1/stream")], folder, prefix=("ip", "netns", "exec", car))
        if server.wait_for(lambda text: text.count(" opened") == 1, 30) is None:
            sys.exit("no first session:\n" + agent.stderr()[-3000:])
        values = []
        for move in range(moves):
            time.sleep(2)
            path = 2 if move % 2 == 0 else 1
            started = time.monotonic()
            ip("-n", car, "route", "replace", "default", "via", f"10.231.1{path}.1", "dev", f"va{path}")
            opened = server.wait_for(lambda text: text.count(" opened") == move + 2, 10)
            if opened is None:
                sys.exit("no new session after the route moved:\n" + agent.stderr()[-3000:])
            values.append((opened - started) * 1000)
        agent.stop()
        server.stop()
        return values
    finally:
        for ns in (car, srv):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def bench_handover(binaries, folder, switches):
    """Link A down and the route moved to B; then A comes back up for the next switch the other way."""
    tag = f"{os.getpid()}"
    srv, car = f"bench-srv-{tag}", f"bench-car-{tag}"
    try:
        two_paths(srv, car)
        files = Files(folder)
        server, port = start_server(binaries, files, folder, host="10.231.10.1", prefix=("ip", "netns", "exec", srv))
        agent = Program([os.path.join(binaries, "dashcam-agent"), "record", "--config",
                         files.agent(f"ws://10.231.10.1:{port}/v1/stream", segment_seconds=1)], folder,
                        prefix=("ip", "netns", "exec", car))
        welcome = re.compile(r"uplink: session \S+ open")
        if agent.wait_for(lambda text: len(welcome.findall(text)) == 1, 30) is None:
            sys.exit("no first session:\n" + agent.stderr()[-3000:])
        values = []
        for switch in range(switches):
            time.sleep(2)
            old, new = (1, 2) if switch % 2 == 0 else (2, 1)
            started = time.monotonic()
            ip("-n", car, "link", "set", f"va{old}", "down")
            ip("-n", car, "route", "replace", "default", "via", f"10.231.1{new}.1", "dev", f"va{new}")
            opened = agent.wait_for(lambda text: len(welcome.findall(text)) >= switch + 2, 10)
            if opened is None:
                sys.exit("no welcome after the handover:\n" + agent.stderr()[-3000:])
            values.append((opened - started) * 1000)
            time.sleep(1)
            ip("-n", car, "link", "set", f"va{old}", "up")
        agent.stop()
        server.stop()
        summary_line = next((line for line in agent.stderr().splitlines() if "uplink: sent" in line), "")
        print("  " + summary_line.split("[Agent] ")[-1])
        return values
    finally:
        for ns in (car, srv):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=".build/release")
    parser.add_argument("--only", default="send,restart,move,handover,silent,stopread,noanswer")
    parser.add_argument("--segments", type=int, default=200, help="segments for each send run")
    parser.add_argument("--restarts", type=int, default=10)
    parser.add_argument("--lived", type=float, default=31, help="seconds each session lives before a restart")
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--faults", type=int, default=10, help="runs of each silent, stopread and noanswer")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-uplink-") as folder:
        if "send" in wanted:
            os.makedirs(os.path.join(folder, "a"))
            os.makedirs(os.path.join(folder, "b"))
            print(summary("send, 1 s segments in real time", bench_send(args.bin, os.path.join(folder, "a"), "realtime", 1, args.segments // 2)))
            print(summary("send, 5 s segments as fast as the encoder goes", bench_send(args.bin, os.path.join(folder, "b"), "fast", 5, args.segments)))
        if "restart" in wanted:
            os.makedirs(os.path.join(folder, "c"))
            from_kill, from_listening = bench_restart(args.bin, os.path.join(folder, "c"), args.restarts, args.lived)
            print(summary("restart, server killed -> new session", from_kill))
            print(summary("restart, new server listening -> new session", from_listening))
        if "move" in wanted:
            if os.geteuid() != 0 or shutil.which("ip") is None:
                print("move: skipped (needs root and iproute2)")
            else:
                os.makedirs(os.path.join(folder, "d"))
                print(summary("move, default route moved -> new session", bench_move(args.bin, os.path.join(folder, "d"), args.moves)))
        if "handover" in wanted:
            if os.geteuid() != 0 or shutil.which("ip") is None:
                print("handover: skipped (needs root and iproute2)")
            else:
                os.makedirs(os.path.join(folder, "e"))
                print(summary("handover, link A down and route moved -> welcome on the new session",
                              bench_handover(args.bin, os.path.join(folder, "e"), args.moves)))
        for mode, text in (("silent", "peer went silent -> new session at the server"),
                           ("stopread", "peer stopped reading -> new session at the server"),
                           ("noanswer", "upgrade never answered -> next connection attempt")):
            if mode in wanted:
                os.makedirs(os.path.join(folder, mode))
                print(summary(text, bench_fault(args.bin, os.path.join(folder, mode), mode, args.faults)))


if __name__ == "__main__":
    main()
