#!/usr/bin/env python3
"""Load on the guidance server: N devices over real WebSockets, each sending a real HEVC segment
every 5 s, against one instance on loopback (SQLite ledger), or against several instances behind
nginx (the shipped site's /v1/stream location, round robin) sharing one PostgreSQL database.

Reports sessions held (and closes by code), segments acknowledged, ack latency (last chunk
written -> ack read) p50/p99/max, over the whole run, at the start and in the steady state (the
starts are spread over `--ramp` seconds, 5 by default, and each device then sends every 5 s at its
own phase; the start is the segments written before ramp + 5 s, the steady state those after; an
upgrade refused with 503 or 429 is tried again after its Retry-After, as the agent does, and a
device whose session opened late sends the segments it kept, up to 3, at once), the
server's own view of it (bucket bounds of its /metrics histograms: last message read -> ack
written, and the ledger's charge; for the start, as read when it ends, with how long /metrics took
to answer then), the server's and the generator's CPU at the start, server RSS per session (half way through, with every session
open: (that - idle) / sessions, summed over instances; and at the end, once they have closed),
server CPU per acknowledged segment (instances summed; nginx and PostgreSQL apart), the load
generator's own CPU, and the machine's load during the run (/proc/loadavg, and the CPU that
neither the servers nor the generator used).

On a machine with two cores or more, the servers run on the last core and the load generator on
the others (`taskset`, `sched_setaffinity`), so the generator's CPU is never the server's; nginx
and PostgreSQL are not pinned. `--server-cpus`/`--generator-cpus` choose other cores, `--no-pin`
lets everything share. The server runs the way deploy/server/guidance-server.service runs it:
the unit's `Environment=` lines are read from the unit and set for the server here too.

    swift build -c release --product guidance-server --product server-load
    pip install websockets
    python3 bench/server_load.py [--devices 200] [--seconds 60] [--bin .build/release] [--json]
    python3 bench/server_load.py --devices 5000         # needs `ulimit -n` above the device count
    python3 bench/server_load.py --devices 5000 --ramp 20   # the devices connect over 20 s, not 5
    python3 bench/server_load.py --devices 5000 --ramp 0.25 --phases 5   # a fleet back at once, each car
                                                            # sending at its own phase (a server restart)
    python3 bench/server_load.py --instances 2          # nginx + PostgreSQL (Debian's), on loopback
    python3 bench/server_load.py --ledger postgres      # one instance, PostgreSQL, no proxy
    python3 bench/server_load.py --hostile 1            # and one more device that sends only abuse
    python3 bench/server_load.py --devices 5000 --seconds 60 --crash-at 20   # kill -9 at 20 s, started again at once
    python3 bench/server_load.py --instances 2 --devices 2000 --seconds 90 --kill-instance-at 30 --restart-after 20
    python3 bench/server_load.py --devices 2500 --crash-at 20 --unit-memory   # in a memory cgroup with the
                                                            # shipped unit's MemoryMax= (2G) and MemoryHigh=

The devices are `server-load` (bench/ServerLoad, built beside the server): a compiled program on one
event loop, so that the load costs little CPU. `--generator python` runs them here instead, on
asyncio and `websockets`, as the figures before the compiled one were measured; both do the same
(the agent's schedule, refusals waited out, acks timed from the last chunk written).

A hostile device has a token of its own and, for the whole run, sends what no agent would: frame
counts no clip has, a real segment under a header whose frames and duration lie, random bytes
with a matching SHA-256, half segments, binary before a header; after each close it connects
again at once. Its results are reported apart; the other devices' acks and latency are what it
must not change.

A server lost mid-run (a reconnect storm): `--crash-at S` kills the one instance with SIGKILL S
seconds in and starts it again at once with the same config file (same port, same SQLite ledger);
its devices reconnect at once (`--reconnect-jitter-ms`, 0 by default here; an attempt refused while
the port is closed is tried again 100 ms later, `--reconnect-retry-ms`). `--kill-instance-at S`
kills instance 0 of several behind nginx and starts it again `--restart-after` seconds later; its
cars reconnect through nginx with the agent's backoff (full jitter, 250 ms doubling to 30 s), and
after the restart `--probes` fresh sessions through nginx show whether it is back in rotation. In
both, every device re-sends what was not acknowledged, with the same `stream` and `seq`, so the
ledger must charge each segment once; the report adds segments lost (sent, never acknowledged by
the end), the time from a session's loss to the next session's first message, the servers' peak
RSS (VmHWM before the kill and at the end, VmRSS every 0.5 s), whether they still run, the ack
latency before the kill, while down, in the 30 s after the restart and later, and the ledger's
charges read back (psql for PostgreSQL). `--keep` leaves the logs and ledger in place.

PostgreSQL runs with its own data folder on a free loopback port, with its default durability
(fsync on), as the `postgres` user when this runs as root.
"""
import argparse
import asyncio
import datetime
import glob
import hashlib
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

try:
    import websockets
except ImportError:
    print("needs the websockets package: pip install websockets", file=sys.stderr)
    sys.exit(2)

CHUNK = 65536
SEGMENT_SECONDS = 5.0  # what the agent records per segment, and so how often each device sends
QUEUED_SEGMENTS = 3  # the agent's uplink.queueSegments: what a device that waited to connect sends at once


def make_segment(folder):
    path = os.path.join(folder, "segment.mp4")
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=10", "-t", "5",
                    "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-tag:v", "hvc1",
                    "-y", path], check=True)
    return path


def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def unit_environment():
    """The `Environment=` settings of the shipped systemd unit: the server is measured as it runs."""
    unit = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "server", "guidance-server.service")
    settings = {}
    for line in open(unit):
        line = line.strip()
        if line.startswith("Environment="):
            for pair in line[len("Environment="):].split():
                key, _, value = pair.strip('"').partition("=")
                settings[key] = value
    return settings


def cpu_list(text):
    """`taskset`'s list syntax (`1`, `0,2`, `0-3`) as a set of CPU numbers."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def machine_cpu(cpus=None):
    """Busy and total CPU seconds of the whole machine (/proc/stat), or of `cpus` only."""
    busy = total = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *values = line.split()
            if not name.startswith("cpu") or (cpus is None) != (name == "cpu") or (cpus is not None and int(name[3:]) not in cpus):
                continue
            fields = [int(x) for x in values]
            total += sum(fields[:8])
            busy += sum(fields[:8]) - fields[3] - fields[4]
    ticks = os.sysconf("SC_CLK_TCK")
    return busy / ticks, total / ticks


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def proc_peak_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_tokens(folder, devices):
    tokens = {f"load-token-{i:04d}": f"load-{i:04d}" for i in range(devices)}
    tokens_file = os.path.join(folder, "tokens.yaml")
    with open(tokens_file, "w") as f:
        f.writelines(f"{t}: {d}\n" for t, d in tokens.items())
    os.chmod(tokens_file, 0o600)
    with open(os.path.join(folder, "script.yaml"), "w") as f:
        f.write('- text: "slow down"\n  lang: en-US\n- clear: true\n')
    return tokens_file, list(tokens), tokens


def start_server(binary, folder, name, tokens_file, devices, ledger, cpus, environment, port=0, limit=None):
    config = os.path.join(folder, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(f"server:\n  host: 127.0.0.1\n  port: {port}\n  tokensFile: {tokens_file}\n  maxConnections: {devices + 64}\n"
                f"analyzer:\n  kind: scripted\n  scriptFile: {folder}/script.yaml\nlog:\n  level: notice\n"
                f"ledger: {ledger}\n")
    return launch_server(binary, config, os.path.join(folder, f"{name}.log"), cpus, environment, limit)


def unit_memory_limits():
    """The shipped unit's `MemoryMax=` and `MemoryHigh=`, in bytes."""
    unit = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "server", "guidance-server.service")
    sizes = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    limits = {}
    for line in open(unit):
        key, _, value = line.strip().partition("=")
        if key in ("MemoryMax", "MemoryHigh"):
            limits[key] = int(value[:-1]) * sizes[value[-1]] if value[-1] in sizes else int(value)
    return limits


class MemoryLimit:
    """A memory cgroup with the shipped unit's `MemoryMax=` (and `MemoryHigh=`) that the servers
    run in, as systemd would run them: past the limit the kernel's OOM killer ends the server.
    cgroup v2 (`memory.max`, `memory.high`) where the machine has it, else v1's memory controller
    (`memory.limit_in_bytes`; `MemoryHigh=` as the soft limit)."""

    def __init__(self):
        limits = unit_memory_limits()
        self.max = limits["MemoryMax"]
        self.high = limits.get("MemoryHigh")
        name = f"guidance-bench-{os.getpid()}"
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            self.v2, self.path = True, os.path.join("/sys/fs/cgroup", name)
            os.mkdir(self.path)
            self.write("memory.max", self.max)
            if self.high:
                self.write("memory.high", self.high)
        else:
            self.v2, self.path = False, os.path.join("/sys/fs/cgroup/memory", name)
            os.mkdir(self.path)
            self.write("memory.limit_in_bytes", self.max)
            if self.high:
                self.write("memory.soft_limit_in_bytes", self.high)

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def read(self, name):
        try:
            return open(os.path.join(self.path, name)).read()
        except OSError:
            return ""

    def add(self, pid):
        self.write("cgroup.procs", pid)

    def report(self):
        """Its limit, the most its processes used (MiB), and the OOM kills inside it."""
        events = self.read("memory.events" if self.v2 else "memory.oom_control")
        kills = int((re.search(r"oom_kill (\d+)", events) or [0, 0])[1])
        peak = self.read("memory.peak" if self.v2 else "memory.max_usage_in_bytes").strip()
        return {"memory_max_mib": self.max >> 20, "memory_high_mib": (self.high or 0) >> 20,
                "memory_peak_mib": int(peak) >> 20 if peak.isdigit() else None, "memory_oom_kills": kills}

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def launch_server(binary, config, log_path, cpus, environment, limit=None):
    """guidance-server with `config`, once its log says where it listens: (process, port). In
    `limit`'s memory cgroup, if given."""
    log = open(log_path, "w+")
    pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []
    # Its own files (the run marker) in the run's folder, as systemd's StateDirectory= would have them.
    server = subprocess.Popen(pin + [os.path.join(binary, "guidance-server"), "--config", config], stdout=log, stderr=log,
                              env={**os.environ, **environment, "STATE_DIRECTORY": os.path.dirname(config)})
    if limit is not None:
        limit.add(server.pid)
    deadline = time.time() + 30
    while time.time() < deadline:
        log.seek(0)
        match = re.search(r"listening on [0-9.]+:(\d+)", log.read())
        if match:
            return server, int(match.group(1))
        if server.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    raise SystemExit(f"guidance-server did not start: {log.read()[-2000:]}")


class Postgres:
    """Debian's PostgreSQL with its own data folder on a free loopback port; fsync left on."""

    def __init__(self, folder):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins:
            raise SystemExit("PostgreSQL is not installed (scripts/install-deps.sh installs Debian's postgresql)")
        self.bin = os.path.dirname(bins[-1])
        self.folder = os.path.join(folder, "postgres")
        os.makedirs(self.folder)
        self.prefix = []
        if os.getuid() == 0:
            os.chmod(folder, 0o711)  # mkdtemp's 0700 would keep `postgres` out of its own folder
            shutil.chown(self.folder, "postgres", "postgres")
            self.prefix = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
        self.data = os.path.join(self.folder, "data")
        self.port = free_port()
        self.run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8")
        self.run("pg_ctl", "-D", self.data, "-w", "-t", "60", "-l", os.path.join(self.folder, "log"), "-o",
                 f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c max_connections=200", "start")
        subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-qAtc", "CREATE DATABASE load"],
                       check=True, stdout=subprocess.DEVNULL)
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/load"

    def run(self, program, *arguments):
        done = subprocess.run(self.prefix + [os.path.join(self.bin, program), *arguments],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd="/")
        if done.returncode != 0:
            raise SystemExit(f"PostgreSQL's {program} failed: {done.stderr[-2000:]}")

    def pids(self):
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            main = int(f.readline())
        children = subprocess.run(["pgrep", "-P", str(main)], capture_output=True, text=True).stdout.split()
        return [main, *map(int, children)]

    def stop(self):
        self.run("pg_ctl", "-D", self.data, "-m", "fast", "stop")


def start_nginx(folder, upstreams):
    """The shipped site's map and /v1/stream location, in a plain-HTTP server in front of upstreams,
    each with the shipped upstream's health-check parameters."""
    site = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "nginx", "guidance-server.conf")).read()
    mapping = re.search(r"map \$http_upgrade.*?\n}", site, re.S)
    location = re.search(r"    location = /v1/stream \{.*?\n    }", site, re.S)
    health = re.search(r"server 127\.0\.0\.1:8080 ([^;]*);", site)
    if not mapping or not location or not health:
        raise SystemExit("the shipped nginx site no longer has its map, upstream and /v1/stream location")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    path = os.path.join(folder, "nginx")
    os.makedirs(path)
    port = free_port()
    servers = "\n".join(f"        server 127.0.0.1:{p} {health.group(1)};" for p in upstreams)
    with open(os.path.join(path, "nginx.conf"), "w") as f:
        f.write(f"""daemon off;
pid {path}/nginx.pid;
error_log {path}/error.log warn;
worker_rlimit_nofile 8192;
events {{ worker_connections 4096; }}
http {{
    client_body_temp_path {path}/client_body;
    proxy_temp_path {path}/proxy;
    fastcgi_temp_path {path}/fastcgi;
    uwsgi_temp_path {path}/uwsgi;
    scgi_temp_path {path}/scgi;
    access_log off;
    {mapping.group(0)}
    upstream guidance_server {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
{location.group(0)}
    }}
}}
""")
    proxy = subprocess.Popen([nginx, "-p", path, "-c", os.path.join(path, "nginx.conf")],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(path, "stderr"), "w"))
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proxy, port
        except OSError:
            if proxy.poll() is not None:
                break
            time.sleep(0.05)
    raise SystemExit(f"nginx did not start: {open(os.path.join(path, 'error.log')).read()[-2000:]}")


def tree_cpu(pids):
    return sum(proc_stat(pid) for pid in pids if os.path.exists(f"/proc/{pid}"))


def nginx_pids(master):
    children = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True).stdout.split()
    return [master, *map(int, children)]


async def connect_admitted(port, token, stats):
    """Opens the device's stream as the agent does: a 503 or 429 at the upgrade is waited out for
    its Retry-After (the agent waits at least that long), then tried again."""
    while True:
        try:
            return await websockets.connect(f"ws://127.0.0.1:{port}/v1/stream", additional_headers={"Authorization": f"Bearer {token}"},
                                            max_size=2 ** 20, open_timeout=30)
        except websockets.exceptions.InvalidStatus as refused:
            status = refused.response.status_code
            if status not in (429, 503):
                raise
            stats["refusals"][str(status)] = stats["refusals"].get(str(status), 0) + 1
            try:
                wait = float(refused.response.headers.get("Retry-After", "1"))
            except ValueError:
                wait = 1.0
            await asyncio.sleep(max(1.0, wait))


async def device(port, token, device_id, segment, sha, seconds, start_delay, stats):
    # A camera records in real time from its own start: a segment is due every 5 s at its own
    # phase, however long its connection took to open. (Sending "5 s after the last send" instead
    # kept every device whose handshake finished in the same crowded moment in step for the whole
    # run: 700 segments in a quarter of a second, every 5 s.)
    start = time.monotonic()
    due, end = start + start_delay, start + seconds
    await asyncio.sleep(start_delay)
    hello = {"type": "hello", "protocol": 1, "device": device_id, "locale": "en-US", "agent": "load", "stream": str(uuid.uuid4()),
             "video": {"codec": "hevc", "container": "mp4", "width": 640, "height": 360, "fps": 10, "segmentMs": 5000}}
    chunks = [segment[i:i + CHUNK] for i in range(0, len(segment), CHUNK)]
    sent = {}
    try:
        async with await connect_admitted(port, token, stats) as ws:
            await ws.send(json.dumps(hello))
            await ws.recv()
            stats["sessions"] += 1
            stats["admitted_after"].append(time.monotonic() - start - start_delay)

            async def reader():
                try:
                    async for message in ws:
                        body = json.loads(message)
                        if body.get("type") == "ack" and body["seq"] in sent:
                            written = sent.pop(body["seq"])
                            stats["latency"].append(time.perf_counter() - written)
                            if written >= stats["steady_from"]:
                                stats["steady_latency"].append(time.perf_counter() - written)
                            else:
                                stats["start_latency"].append(time.perf_counter() - written)
                            stats["acked"] += 1
                        elif body.get("type") == "guidance":
                            stats["guidance"] += 1
                except websockets.ConnectionClosed:
                    pass  # counted by the sender, which sees the same close

            reading = asyncio.create_task(reader())
            # Slots missed while connecting are sent at once, one after another, as the agent sends
            # what it kept: at most QUEUED_SEGMENTS of them (its uplink.queueSegments); the ones
            # after keep the device's phase.
            missed = 0
            while due + SEGMENT_SECONDS < time.monotonic():
                due += SEGMENT_SECONDS
                missed += 1
            backlog = min(missed, QUEUED_SEGMENTS - 1)
            seq = 0
            while due < end:
                if backlog > 0:
                    backlog -= 1
                else:
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    due += SEGMENT_SECONDS
                captured = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                await ws.send(json.dumps({"type": "segment", "seq": seq, "capturedAt": captured, "durationMs": 5000, "frames": 50,
                                          "bytes": len(segment), "sha256": sha, "chunks": len(chunks)}))
                for chunk in chunks:
                    await ws.send(chunk)
                sent[seq] = time.perf_counter()
                stats["sent"] += 1
                seq += 1
            await asyncio.sleep(max(0.0, end - time.monotonic()) + 1.0)
            reading.cancel()
            stats["held"] += 1
    except websockets.ConnectionClosed as closed:
        code = closed.rcvd.code if closed.rcvd else None
        stats["closes"][str(code)] = stats["closes"].get(str(code), 0) + 1
    except Exception as error:  # connect failures, timeouts: counted, not fatal
        stats["errors"][type(error).__name__] = stats["errors"].get(type(error).__name__, 0) + 1


async def hostile(port, token, segment, seconds, stats):
    """A device that sends only abuse, and reconnects at once whenever it is closed."""
    import random
    rng = random.Random(7)
    end = time.monotonic() + seconds
    hello = {"type": "hello", "protocol": 1, "device": token, "locale": "en-US", "agent": "hostile",
             "video": {"codec": "hevc", "container": "mp4", "width": 640, "height": 360, "fps": 10, "segmentMs": 5000}}

    def header(seq, body, frames=50, duration=5000):
        return json.dumps({"type": "segment", "seq": seq, "capturedAt": "2026-11-25T00:00:00.000Z", "durationMs": duration,
                           "frames": frames, "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                           "chunks": (len(body) + CHUNK - 1) // CHUNK})

    seq = 0
    while time.monotonic() < end:
        try:
            async with websockets.connect(f"ws://127.0.0.1:{port}/v1/stream", additional_headers={"Authorization": f"Bearer {token}"},
                                          max_size=2 ** 20, open_timeout=30) as ws:
                stats["hostile_sessions"] += 1
                await ws.send(json.dumps(hello))
                while time.monotonic() < end:
                    seq += 1
                    kind = rng.randrange(6)
                    if kind == 0:
                        body = segment
                        await ws.send(header(seq, body, frames=10_000_000_000))
                    elif kind == 1:
                        body = segment
                        await ws.send(header(seq, body, frames=1, duration=rng.choice([1, 9999, 5000])))
                    elif kind == 2:
                        body = rng.randbytes(rng.randrange(1, 200_000))
                        await ws.send(header(seq, body))
                    elif kind == 3:
                        body = bytearray(segment)
                        for _ in range(20):
                            body[rng.randrange(len(body))] = rng.randrange(256)
                        body = bytes(body)
                        await ws.send(header(seq, body))
                    elif kind == 4:
                        body = segment
                        await ws.send(header(seq, body))
                        body = body[:CHUNK // 2]  # half a segment, then the next header
                    else:
                        body = rng.randbytes(1000)  # binary with no header
                    for i in range(0, len(body), CHUNK):
                        await ws.send(body[i:i + CHUNK])
                    stats["hostile_sent"] += 1
                    await asyncio.sleep(0.05)
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
            stats["hostile_closes"][str(code)] = stats["hostile_closes"].get(str(code), 0) + 1
        except Exception as error:
            stats["hostile_errors"][type(error).__name__] = stats["hostile_errors"].get(type(error).__name__, 0) + 1
            await asyncio.sleep(0.1)


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def scrape(port, timeout=30):
    """The server's /metrics, Prometheus text."""
    import urllib.request
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout).read().decode()


def sessions_gauge(port):
    body = scrape(port)
    match = re.search(r"^guidance_sessions(?:\{[^}]*\})? ([0-9.e+]+)$", body, re.M)
    return int(float(match.group(1))) if match else None


def histograms(ports, names):
    """The servers' own histograms, summed over the instances, {name: {upper bound in seconds:
    cumulative count}}: guidance_segment_ack_duration_seconds (a segment's last message read -> its
    ack written) and guidance_ledger_charge_duration_seconds (the session's call to the ledger ->
    its answer)."""
    summed = {name: {} for name in names}
    for port in ports:
        body = scrape(port)
        for name in names:
            for le, n in re.findall(rf'^{name}_bucket\{{le="([^"]+)"\}} ([0-9.e+]+)$', body, re.M):
                summed[name][float(le)] = summed[name].get(float(le), 0) + float(n)
    return summed


def bucket_quantile(buckets, p):
    """The upper bound of the bucket that holds the p-th percentile, in ms; None if empty."""
    total = max(buckets.values(), default=0)
    if total <= 0:
        return None
    for le in sorted(buckets):
        if buckets[le] >= p / 100 * total:
            return le * 1000
    return None


def if_alive(read, pid, otherwise=0):
    """`read(pid)` of a server, or `otherwise` once it is gone (killed, or dead on its own)."""
    try:
        return read(pid)
    except (FileNotFoundError, ProcessLookupError):
        return otherwise


def oom_kills():
    """The kernel's count of processes it ended for want of memory (/proc/vmstat), machine-wide."""
    with open("/proc/vmstat") as f:
        for line in f:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return None


def gauge_or_none(port):
    """An instance's open sessions, or None while it does not answer (killed, not started again yet)."""
    try:
        return sessions_gauge(port)
    except OSError:
        return None


def reconnect_report(args, seen):
    """What `--reconnect` adds: per session that ended before the run's end, the time from its end (as
    its device saw it) to the next session's first message; segments re-sent, and lost (sent, never
    acknowledged by the end, re-sends included)."""
    reconnect_ms = seen["reconnectMs"]
    return {
        "reconnect": (f"uniform 0-{args.reconnect_jitter_ms:g} ms (a failed attempt: {args.reconnect_retry_ms:g} ms more)"
                      if args.reconnect_jitter_ms is not None else "the agent's backoff: full jitter, 250 ms doubling to 30 s"),
        "reconnects": len(reconnect_ms), "reconnect_ms_p50": percentile(reconnect_ms, 50),
        "reconnect_ms_p99": percentile(reconnect_ms, 99), "reconnect_ms_max": max(reconnect_ms, default=None),
        "not_back_by_end": seen["notBack"],
        "segments_resent": seen["resent"], "segments_lost": seen["lost"], "segments_never_written_whole": seen["unwritten"],
        "lost_segments": seen["lostSegments"], "lost_histories": seen.get("lostHistories"), "stray_acks": seen["strayAcks"], "server_errors": seen["serverErrors"],
    }


class Chaos:
    """A server lost in the middle of the run (`--crash-at`, `--kill-instance-at`): `kill -9` of
    instance `index` `at` s after the devices started, the same instance started again `restart_after`
    s later with the same config (so the same port and ledger), and what the servers went through.
    The devices (`server-load --reconnect`) connect again and re-send what was not acknowledged.

    A server's peak RSS is read as its VmHWM just before the kill and at the end, and its VmRSS every
    half second besides, so that a peak is known even for a process the kernel ends (OOM)."""

    def __init__(self, servers, index, at, restart_after, restart):
        self.servers = servers  # the run's (process, port) list: the new process takes the killed one's place
        self.index, self.at, self.restart_after, self.restart = index, at, restart_after, restart
        self.labels = {server.pid: f"instance-{n}" for n, (server, _) in enumerate(servers)}
        self.rss_max_kib = {}
        # The killed processes' CPU, as this process's children count it once each is waited for:
        # the servers', not the generator's (which is read from the children too).
        self.retired_cpu = 0.0
        self.facts = {}
        self.killed = None  # time.monotonic() of the kill
        self.restarted = None  # ... and of the new process saying it listens
        self.done = False
        self.oom_kills_before = oom_kills()

    async def run(self, t0):
        await asyncio.sleep(max(0.0, t0 + self.at - time.monotonic()))
        server, port = self.servers[self.index]
        self.observe()
        peak = if_alive(proc_peak_kib, server.pid)
        server.kill()
        self.killed = time.monotonic()
        reaped_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        await asyncio.to_thread(server.wait)
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.retired_cpu += (reaped.ru_utime - reaped_before.ru_utime) + (reaped.ru_stime - reaped_before.ru_stime)
        self.facts.update(killed_server_peak_rss_mib=peak / 1024, killed_server_exit=server.returncode)
        await asyncio.sleep(max(0.0, self.killed + self.restart_after - time.monotonic()))
        launched = time.monotonic()
        try:
            new, new_port = await asyncio.to_thread(self.restart)
        except SystemExit as failed:
            self.facts["restart_failed"] = str(failed)[-1000:]
            return
        self.restarted = time.monotonic()
        self.labels[new.pid] = f"instance-{self.index}-restarted"
        self.servers[self.index] = (new, new_port)
        self.facts.update(restart_to_listening_s=self.restarted - launched, restarted_on_same_port=new_port == port)

    async def sample_rss(self):
        while not self.done:
            self.observe()
            await asyncio.sleep(0.5)

    def observe(self):
        for server, _ in list(self.servers):
            if server.poll() is None:
                label = self.labels[server.pid]
                self.rss_max_kib[label] = max(self.rss_max_kib.get(label, 0), if_alive(proc_rss_kib, server.pid))

    async def probe(self, port, probes, after):
        """Fresh sessions through nginx `after` s once the killed instance listens again: some must land
        on it (its /metrics' open sessions), or nginx did not take it back into rotation."""
        while self.restarted is None and not self.done:
            await asyncio.sleep(0.1)
        if self.restarted is None:
            return
        await asyncio.sleep(max(0.0, self.restarted + after - time.monotonic()))
        ports = [p for _, p in self.servers]
        before = [await asyncio.to_thread(gauge_or_none, p) for p in ports]
        sessions, failures = [], {}
        for token, device_id in probes:
            try:
                ws = await websockets.connect(f"ws://127.0.0.1:{port}/v1/stream", additional_headers={"Authorization": f"Bearer {token}"},
                                              max_size=2 ** 20, open_timeout=10)
                sessions.append(ws)
                await ws.send(json.dumps({"type": "hello", "protocol": 1, "device": device_id, "locale": "en-US", "agent": "probe",
                                          "stream": str(uuid.uuid4()), "video": {"codec": "hevc", "container": "mp4", "width": 640,
                                                                                 "height": 360, "fps": 10, "segmentMs": 5000}}))
                await asyncio.wait_for(ws.recv(), 10)
            except Exception as error:  # refused, closed, timed out: counted
                failures[type(error).__name__] = failures.get(type(error).__name__, 0) + 1
        await asyncio.sleep(0.5)
        during = [await asyncio.to_thread(gauge_or_none, p) for p in ports]
        for ws in sessions:
            await ws.close()
        gained = (during[self.index] or 0) - (before[self.index] or 0)
        self.facts.update(probes=len(probes), probe_failures=failures, sessions_per_instance_before_probes=before,
                          sessions_per_instance_with_probes=during, probes_on_restarted_instance=gained,
                          restarted_instance_in_rotation=gained > 0)

    def report(self, stats, start):
        """The facts, each server's RSS, and the ack latency before the kill, while the instance was
        down, in the first 30 s after it listened again, and after that (by when each segment was
        last written). Times in s from `start`, server-load's start (CLOCK_MONOTONIC, as here)."""
        killed = self.killed - start if self.killed is not None else None
        restarted = self.restarted - start if self.restarted is not None else None
        result = {"killed_at_s": killed, "restarted_at_s": restarted, **self.facts}
        result["server_rss_max_sampled_mib"] = {label: kib / 1024 for label, kib in self.rss_max_kib.items()}
        result["servers_alive_at_end"] = [server.poll() is None for server, _ in self.servers]
        result["server_exits_at_end"] = [server.returncode for server, _ in self.servers]
        after = oom_kills()
        result["oom_kills_during_run"] = after - self.oom_kills_before if after is not None and self.oom_kills_before is not None else None
        result["restarted_server_peak_rss_mib"] = (if_alive(proc_peak_kib, self.servers[self.index][0].pid) / 1024
                                                   if self.restarted else None)
        if killed is None or restarted is None:
            return result
        windows = {"before_kill": (0, killed), "down": (killed, restarted), "first_30s_after_restart": (restarted, restarted + 30),
                   "later": (restarted + 30, float("inf"))}
        for name, (low, high) in windows.items():
            ms = [x * 1000 for at, x in zip(stats.get("written_at", []), stats["latency"]) if low <= at < high]
            result.update({f"ack_{name}_n": len(ms), f"ack_{name}_ms_p50": percentile(ms, 50),
                           f"ack_{name}_ms_p99": percentile(ms, 99), f"ack_{name}_ms_max": max(ms, default=None)})
        return result


def ledger_check(postgres, sqlite_path):
    """What the ledger holds after the run: segments charged, (device, stream, seq) charged more than
    once, the balances' segment count (each charge adds one, so it must equal the charges), and the
    most streams one device was charged under (1: the devices' `stream` held across reconnects)."""
    queries = {
        "ledger_charged": "SELECT count(*) FROM usage_events",
        "ledger_charged_more_than_once": "SELECT count(*) FROM (SELECT 1 FROM usage_events GROUP BY device, stream, seq HAVING count(*) > 1) AS t",
        "ledger_balance_segments": "SELECT coalesce(sum(segments), 0) FROM balances",
        "ledger_streams_per_device_max": "SELECT coalesce(max(n), 0) FROM (SELECT count(DISTINCT stream) AS n FROM usage_events GROUP BY device) AS t",
    }
    if postgres:
        ask = lambda query: int(subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(postgres.port), "-U", "postgres", "-d", "load", "-qAtc", query],
                                               check=True, capture_output=True, text=True).stdout.strip())
        return {name: ask(query) for name, query in queries.items()}
    import sqlite3
    with sqlite3.connect(sqlite_path, timeout=30) as db:
        return {name: db.execute(query).fetchone()[0] for name, query in queries.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--instances", type=int, default=1, help="more than 1: behind nginx, with the PostgreSQL ledger")
    parser.add_argument("--ledger", choices=["sqlite", "postgres"], help="default: sqlite for one instance, postgres for more")
    parser.add_argument("--bin", default=".build/release")
    parser.add_argument("--segment", help="an MP4 to send (default: 5 s of testsrc2 encoded with libx265)")
    parser.add_argument("--hostile", type=int, default=0, help="devices (besides --devices) that send only abuse")
    parser.add_argument("--server-cpus", help="cores of the servers, as taskset lists them (default: the last core)")
    parser.add_argument("--generator-cpus", help="cores of the load generator (default: every other core)")
    parser.add_argument("--no-pin", action="store_true", help="servers and generator share every core")
    parser.add_argument("--ramp", type=float, default=5.0, help="seconds over which the devices connect (default: one segment period)")
    parser.add_argument("--phases", type=float, default=None,
                        help="seconds over which the devices' segments fall due, apart from when they connect (compiled generator only; "
                             "default: each device's phase is its place in the ramp)")
    parser.add_argument("--generator", choices=["compiled", "python"], default="compiled",
                        help="the devices: server-load (from --bin), or asyncio here (default: compiled)")
    parser.add_argument("--sessions-only", action="store_true",
                        help="the devices open their sessions and send no segment (compiled generator): what starts cost")
    parser.add_argument("--crash-at", type=float,
                        help="kill -9 the server this many s into the run and start it again at once (same port, config and ledger); "
                             "the devices reconnect (--reconnect) and re-send what was not acknowledged")
    parser.add_argument("--kill-instance-at", type=float,
                        help="with --instances 2 or more: kill -9 instance 0 this many s into the run, start it again --restart-after s "
                             "later; its cars reconnect through nginx with the agent's backoff")
    parser.add_argument("--restart-after", type=float, default=20.0, help="with --kill-instance-at: s from the kill to the restart (default 20)")
    parser.add_argument("--probes", type=int, default=20,
                        help="with --kill-instance-at: fresh sessions opened through nginx after the restart, to see the instance back in rotation")
    parser.add_argument("--probe-after", type=float, default=3.0, help="with --kill-instance-at: s from the restart to the probes (default 3)")
    parser.add_argument("--reconnect", action="store_true",
                        help="a device whose session ends before the run's end connects again and re-sends what was not acknowledged "
                             "(compiled generator; implied by --crash-at and --kill-instance-at)")
    parser.add_argument("--reconnect-jitter-ms", type=float,
                        help="with --reconnect: connect again after a uniform 0..MS wait instead of the agent's backoff "
                             "(default: 0 with --crash-at, the agent's backoff otherwise)")
    parser.add_argument("--drain", type=float,
                        help="seconds after the run's end that devices wait for the acks still due, sending nothing new; "
                             "a segment not acknowledged by then is lost (default 1; 30 with --crash-at or --kill-instance-at)")
    parser.add_argument("--reconnect-retry-ms", type=float, default=100.0,
                        help="with --reconnect-jitter-ms: the wait after an attempt that failed before its session opened (default 100)")
    parser.add_argument("--unit-memory", action="store_true",
                        help="run the servers in a memory cgroup with the shipped unit's MemoryMax= and MemoryHigh= (needs root)")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (server logs, configs, SQLite ledger) and print its path")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    chaos_mode = "crash" if args.crash_at is not None else "kill-instance" if args.kill_instance_at is not None else None
    if chaos_mode:
        args.reconnect = True
    if args.crash_at is not None and args.reconnect_jitter_ms is None:
        args.reconnect_jitter_ms = 0.0
    if args.reconnect and args.generator != "compiled":
        parser.error("--reconnect, --crash-at and --kill-instance-at need the compiled generator")
    if args.crash_at is not None and (args.instances != 1 or args.kill_instance_at is not None):
        parser.error("--crash-at is for one instance; --kill-instance-at for several behind nginx")
    if args.kill_instance_at is not None and args.instances < 2:
        parser.error("--kill-instance-at needs --instances 2 or more")
    if chaos_mode and not 0 < (args.crash_at if args.crash_at is not None else args.kill_instance_at) < args.seconds:
        parser.error("the kill must fall within --seconds")
    if args.phases is not None and args.generator != "compiled":
        parser.error("--phases needs the compiled generator")
    if args.sessions_only and args.generator != "compiled":
        parser.error("--sessions-only needs the compiled generator")
    all_cpus = os.sched_getaffinity(0)
    server_cpus, generator_cpus = None, None
    if not args.no_pin:
        server_cpus = cpu_list(args.server_cpus) if args.server_cpus else ({max(all_cpus)} if len(all_cpus) > 1 else None)
        generator_cpus = cpu_list(args.generator_cpus) if args.generator_cpus else (all_cpus - server_cpus if server_cpus else None)
        if server_cpus and generator_cpus and server_cpus & generator_cpus:
            parser.error("the servers' cores and the generator's overlap")
    # A session is a descriptor in the server and one in the generator (the server inherits this).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    probes = args.probes if chaos_mode == "kill-instance" else 0
    wanted = args.devices + args.hostile + probes + 256
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            parser.error(f"{args.devices} devices need {wanted} descriptors; the hard limit is {hard} (ulimit -Hn)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    ledger_kind = args.ledger or ("postgres" if args.instances > 1 else "sqlite")
    if args.instances < 1 or (args.instances > 1 and ledger_kind != "postgres"):
        parser.error("--instances must be at least 1, and more than one share a PostgreSQL ledger")
    folder = tempfile.mkdtemp(prefix="server-load-")
    servers, proxy, postgres, chaos, limit = [], None, None, None, None
    try:
        limit = MemoryLimit() if args.unit_memory else None
        segment_path = args.segment or make_segment(folder)
        segment = open(segment_path, "rb").read()
        sha = hashlib.sha256(segment).hexdigest()
        tokens_file, tokens, device_of = write_tokens(folder, args.devices + args.hostile + probes)
        environment = unit_environment()
        if ledger_kind == "postgres":
            postgres = Postgres(folder)
        for n in range(args.instances):
            ledger = postgres.url if postgres else f"sqlite:{folder}/usage.sqlite"
            # A server that will be started again gets a port of its own in its config: the same one then.
            servers.append(start_server(args.bin, folder, f"server-{n}", tokens_file, args.devices, ledger, server_cpus, environment,
                                        port=free_port() if chaos_mode else 0, limit=limit))
        port = servers[0][1]
        if args.instances > 1:
            proxy, port = start_nginx(folder, [p for _, p in servers])
        if chaos_mode:
            index = 0
            config = os.path.join(folder, f"server-{index}.yaml")
            restart = lambda: launch_server(args.bin, config, os.path.join(folder, f"server-{index}-restarted.log"), server_cpus, environment,
                                            limit)
            chaos = Chaos(servers, index, args.crash_at if chaos_mode == "crash" else args.kill_instance_at,
                          0.0 if chaos_mode == "crash" else args.restart_after, restart)
        if generator_cpus:
            os.sched_setaffinity(0, generator_cpus)
        time.sleep(1)
        compiled = None
        if args.generator == "compiled":
            device_tokens = os.path.join(folder, "device-tokens")
            with open(device_tokens, "w") as f:
                f.writelines(f"{t} {device_of[t]}\n" for t in tokens[:args.devices])
        idle_rss = sum(proc_rss_kib(s.pid) for s, _ in servers)
        machine_before = machine_cpu()
        server_cores_before = machine_cpu(server_cpus) if server_cpus else None
        load_before = load_average()
        cpu_before = sum(proc_stat(s.pid) for s, _ in servers)
        proxy_before = tree_cpu(nginx_pids(proxy.pid)) if proxy else 0.0
        postgres_before = tree_cpu(postgres.pids()) if postgres else 0.0
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        if args.generator == "compiled":
            # Inherits this process's cores. Starts its devices as it prints "ready".
            compiled = subprocess.Popen([os.path.join(args.bin, "server-load"), "--port", str(port), "--tokens", device_tokens,
                                         "--segment", segment_path, "--seconds", str(args.seconds), "--ramp", str(args.ramp)]
                                         + (["--phases", str(args.phases)] if args.phases is not None else [])
                                        + (["--sessions-only"] if args.sessions_only else [])
                                        + (["--reconnect"] if args.reconnect else [])
                                        + ["--drain", str(args.drain if args.drain is not None else (30 if chaos_mode else 1))]
                                        + (["--reconnect-jitter-ms", str(args.reconnect_jitter_ms),
                                            "--reconnect-retry-ms", str(args.reconnect_retry_ms)] if args.reconnect_jitter_ms is not None else []),
                                        stdout=subprocess.PIPE, text=True)
            if compiled.stdout.readline().strip() != "ready":
                raise SystemExit("server-load did not start")
        t0 = time.monotonic()  # about when the devices start (server-load reports its own start, for the figures)
        # Steady state: segments written once every device has connected and sent its first (the
        # starts are spread over 5 s) and a period more has passed.
        stats = {"sessions": 0, "held": 0, "sent": 0, "acked": 0, "guidance": 0, "latency": [], "closes": {}, "errors": {},
                 "refusals": {}, "admitted_after": [],
                 "steady_from": time.perf_counter() + args.ramp + 5.0, "steady_latency": [], "start_latency": [],
                 "hostile_sessions": 0, "hostile_sent": 0, "hostile_closes": {}, "hostile_errors": {}}
        # Starts spread over the first segment period, so segments arrive evenly.
        delays = [args.ramp * i / args.devices for i in range(args.devices)]
        sampled = {}

        def compiled_cpu():
            """server-load's CPU so far: from /proc while it runs, from this process's children once
            it has ended and been waited for (a run shorter than the start)."""
            if not compiled:
                return 0.0
            try:
                return proc_stat(compiled.pid)
            except FileNotFoundError:
                ended = resource.getrusage(resource.RUSAGE_CHILDREN)
                return (ended.ru_utime - children_before.ru_utime) + (ended.ru_stime - children_before.ru_stime)

        async def storm():
            # The first ramp + 5 s, while every device connects: the server's histograms and the
            # generator's CPU as that window ends, so the start and the steady state can be told apart.
            await asyncio.sleep(max(0.0, stats["steady_from"] - time.perf_counter()))
            used = resource.getrusage(resource.RUSAGE_SELF)
            sampled["storm_generator_cpu"] = ((used.ru_utime - own_before.ru_utime) + (used.ru_stime - own_before.ru_stime)
                                              + compiled_cpu())
            sampled["storm_server_cpu"] = sum(if_alive(proc_stat, s.pid, 0.0) for s, _ in servers) - cpu_before
            asked = time.perf_counter()
            try:
                sampled["storm_histograms"] = await asyncio.to_thread(histograms, [p for _, p in servers], names)
            except OSError as error:
                print(f"note: /metrics did not answer as the start ended: {error}", file=sys.stderr)
            sampled["storm_scrape_s"] = time.perf_counter() - asked

        async def sample():
            # Half way through, every session open: sessions per instance (their /metrics) and the
            # server processes' RSS. The load average every 5 s.
            loads = []
            for tick in range(int(args.seconds // 5)):
                await asyncio.sleep(5)
                loads.append(load_average()[0])
                if tick == max(0, int(args.seconds // 10) - 1):
                    sampled["sessions"] = [await asyncio.to_thread(gauge_or_none, p) for _, p in servers]
                    sampled["rss"] = sum(if_alive(proc_rss_kib, s.pid) for s, _ in servers)
            sampled["loads"] = loads

        async def run():
            sampler = asyncio.create_task(sample())
            starting = asyncio.create_task(storm())
            troubles = []
            if chaos:
                troubles = [asyncio.create_task(chaos.run(t0)), asyncio.create_task(chaos.sample_rss())]
                if chaos_mode == "kill-instance" and probes:
                    first = args.devices + args.hostile
                    troubles.append(asyncio.create_task(chaos.probe(port, [(t, device_of[t]) for t in tokens[first:first + probes]],
                                                                    args.probe_after)))
            if compiled:
                devices = asyncio.to_thread(compiled.communicate)
            else:
                devices = asyncio.gather(*(device(port, tokens[i], device_of[tokens[i]], segment, sha, args.seconds, delays[i], stats) for i in range(args.devices)))
            done, *_ = await asyncio.gather(devices, *(hostile(port, tokens[args.devices + i], segment, args.seconds, stats) for i in range(args.hostile)))
            await sampler
            await starting
            if chaos:
                chaos.done = True
                await asyncio.gather(*troubles)
            if compiled:
                if compiled.returncode != 0:
                    raise SystemExit(f"server-load failed ({compiled.returncode})")
                seen = json.loads(done[0])
                for key in ("sessions", "held", "sent", "acked", "guidance", "closes", "errors", "refusals"):
                    stats[key] = seen[key]
                stats["admitted_after"] = seen["admittedAfter"]
                stats["written_at"] = seen["writtenAtS"]
                stats["seen"] = seen
                for key, name in (("latency", "latencyMs"), ("start_latency", "startLatencyMs"), ("steady_latency", "steadyLatencyMs")):
                    stats[key] = [ms / 1000 for ms in seen[name]]
            return sum(if_alive(proc_rss_kib, s.pid) for s, _ in servers)

        names = ["guidance_segment_ack_duration_seconds", "guidance_ledger_charge_duration_seconds"]
        end_rss = asyncio.run(run())
        try:
            buckets = histograms([p for _, p in servers], names)
        except OSError as error:  # a server that died (or was not started again): its figures are missing
            print(f"note: /metrics did not answer at the end: {error}", file=sys.stderr)
            buckets = {name: {} for name in names}
        ack_buckets, charge_buckets = (buckets[name] for name in names)
        storm_ack = (sampled.get("storm_histograms") or {}).get(names[0], {})
        cpu = sum(if_alive(proc_stat, s.pid, 0.0) for s, _ in servers) + (chaos.retired_cpu if chaos else 0.0) - cpu_before
        machine_after = machine_cpu()
        server_cores_after = machine_cpu(server_cpus) if server_cpus else None
        load_after = load_average()
        peak_rss = sum(if_alive(proc_peak_kib, s.pid) for s, _ in servers)
        proxy_cpu = tree_cpu(nginx_pids(proxy.pid)) - proxy_before if proxy else None
        postgres_cpu = tree_cpu(postgres.pids()) - postgres_before if postgres else None
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        # The generator: this process, and server-load (waited for, so a child that counts); a
        # killed server is a child waited for too, and its CPU is the servers'.
        own_cpu = ((own.ru_utime - own_before.ru_utime) + (own.ru_stime - own_before.ru_stime)
                   + (children.ru_utime - children_before.ru_utime) + (children.ru_stime - children_before.ru_stime)
                   - (chaos.retired_cpu if chaos else 0.0))
        latency_ms = [x * 1000 for x in stats["latency"]]
        steady_ms = [x * 1000 for x in stats["steady_latency"]]
        start_ms = [x * 1000 for x in stats["start_latency"]]
        machine_busy = machine_after[0] - machine_before[0]
        machine_total = machine_after[1] - machine_before[1]
        held_mid = sum(n or 0 for n in sampled.get("sessions") or [0])
        mid_rss = sampled.get("rss", end_rss)
        result = {
            "devices": args.devices, "ramp_s": args.ramp, "phases_s": args.phases, "seconds": args.seconds, "instances": args.instances, "ledger": ledger_kind,
            "proxy": "nginx" if proxy else None, "segment_bytes": len(segment),
            "sessions_opened": stats["sessions"], "sessions_held": stats["held"], "sessions_per_instance": sampled.get("sessions"),
            "closes": stats["closes"], "errors": stats["errors"],
            # Upgrades refused (503: server.maxConnections; 429: one device's connections), each
            # waited out for its Retry-After; and how long after its first try each session opened.
            "refusals": stats["refusals"],
            "admitted_after_s_p50": percentile(stats["admitted_after"], 50),
            "admitted_after_s_max": max(stats["admitted_after"], default=None),
            "segments_sent": stats["sent"], "segments_acked": stats["acked"], "guidance": stats["guidance"],
            "ack_ms_p50": percentile(latency_ms, 50), "ack_ms_p99": percentile(latency_ms, 99), "ack_ms_max": max(latency_ms, default=None),
            "steady_acks": len(steady_ms), "steady_ack_ms_p50": percentile(steady_ms, 50), "steady_ack_ms_p99": percentile(steady_ms, 99),
            "steady_ack_ms_max": max(steady_ms, default=None),
            # The start, while the devices connect (segments written before the steady state).
            "start_acks": len(start_ms), "start_ack_ms_p50": percentile(start_ms, 50), "start_ack_ms_p99": percentile(start_ms, 99),
            "start_server_ack_ms_p99_at_most": bucket_quantile(storm_ack, 99),
            "start_generator_cpu_cores": (sampled["storm_generator_cpu"] / (args.ramp + 5.0)) if "storm_generator_cpu" in sampled else None,
            "start_server_cpu_cores": (sampled["storm_server_cpu"] / (args.ramp + 5.0)) if "storm_server_cpu" in sampled else None,
            "start_metrics_answer_s": sampled.get("storm_scrape_s"),
            # The server's side of the same (its histogram's bucket bounds): what of the latency
            # the server itself adds, from the segment's last message read to the ack written.
            "server_ack_ms_p50_at_most": bucket_quantile(ack_buckets, 50), "server_ack_ms_p99_at_most": bucket_quantile(ack_buckets, 99),
            "server_charge_ms_p50_at_most": bucket_quantile(charge_buckets, 50),
            "server_charge_ms_p99_at_most": bucket_quantile(charge_buckets, 99),
            "server_rss_idle_mib": idle_rss / 1024, "server_rss_half_way_mib": mid_rss / 1024,
            # Not known when an instance did not answer half way (killed, and not started again yet).
            "server_rss_per_session_kib": (mid_rss - idle_rss) / max(1, held_mid) if None not in (sampled.get("sessions") or []) else None,
            "server_rss_peak_mib": peak_rss / 1024, "server_rss_end_mib": end_rss / 1024,
            "server_cpu_s": cpu, "server_cpu_ms_per_segment": 1000 * cpu / max(1, stats["acked"]),
            "server_cpu_cores": cpu / args.seconds,
            "nginx_cpu_s": proxy_cpu, "postgres_cpu_s": postgres_cpu,
            "generator": args.generator, "generator_cpu_s": own_cpu, "generator_cpu_cores": own_cpu / args.seconds,
            "server_cpus": ",".join(map(str, sorted(server_cpus))) if server_cpus else "any",
            "generator_cpus": ",".join(map(str, sorted(generator_cpus))) if generator_cpus else "any",
            "server_environment": " ".join(f"{k}={v}" for k, v in environment.items()) or None,
            "machine_cpu_cores_busy": machine_busy / max(1e-9, machine_total) * len(all_cpus),
            "other_cpu_s": machine_busy - cpu - own_cpu - (proxy_cpu or 0) - (postgres_cpu or 0),
            # Time on the servers' own cores that they did not use: other processes, interrupts.
            "server_cores_other_cpu_s": (server_cores_after[0] - server_cores_before[0] - cpu) if server_cpus else None,
            "loadavg_before": load_before, "loadavg_end": load_after,
            "loadavg_1min_max": max(sampled.get("loads") or [load_after[0]]),
        }
        if stats.get("written_at"):
            # The ack p99 of each second of the run (by when the segment was written): where the slow ones are.
            seconds = {}
            for at, ms in zip(stats["written_at"], latency_ms):
                seconds.setdefault(int(at), []).append(ms)
            result["ack_ms_p99_by_second"] = [round(percentile(seconds.get(n, []), 99) or 0) for n in range(max(seconds) + 1)]
        if args.hostile:
            result.update({"hostile_devices": args.hostile, "hostile_sessions": stats["hostile_sessions"],
                           "hostile_messages": stats["hostile_sent"], "hostile_closes": stats["hostile_closes"],
                           "hostile_errors": stats["hostile_errors"],
                           "server_alive": all(server.poll() is None for server, _ in servers)})
        if args.reconnect:
            result.update(reconnect_report(args, stats["seen"]))
        if chaos:
            result.update(chaos_mode=chaos_mode, **chaos.report(stats, stats["seen"]["startUptimeNs"] / 1e9))
            result.update(ledger_check(postgres, os.path.join(folder, "usage.sqlite")))
            # Every charge acknowledged, once: charged segments are the distinct (device, seq) acked.
            result["ledger_charged_equals_acked"] = result["ledger_charged"] == stats["acked"]
        if limit is not None:
            result.update(limit.report())
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key:28} {value:.2f}" if isinstance(value, float) else f"{key:28} {value}")
            if own_cpu > 0.8 * args.seconds * len(generator_cpus or [1]):
                print("note: the load generator used most of its cores; it, not the server, may limit the count")
    finally:
        for server, _ in servers:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=10)
        if postgres is not None:
            postgres.stop()
        if limit is not None:
            limit.remove()
        if args.keep:
            print(f"the run's folder: {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
