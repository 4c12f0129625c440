#!/usr/bin/env python3
"""Load on the guidance server: N devices over real WebSockets, each sending a real HEVC segment
every 5 s, against one instance on loopback (SQLite ledger).

Reports sessions held (and closes by code), segments acknowledged, ack latency (last chunk
written -> ack read) p50/p99/max, server RSS per session ((end - idle) / sessions), server CPU
per acknowledged segment, and the load generator's own CPU (it shares the machine's cores).

    swift build -c release --product guidance-server
    pip install websockets
    python3 bench/server_load.py [--devices 200] [--seconds 60] [--bin .build/release] [--json]
"""
import argparse
import asyncio
import datetime
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
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


def start_server(binary, folder, devices):
    tokens = {f"load-token-{i:04d}": f"load-{i:04d}" for i in range(devices)}
    tokens_file = os.path.join(folder, "tokens.yaml")
    with open(tokens_file, "w") as f:
        f.writelines(f"{t}: {d}\n" for t, d in tokens.items())
    os.chmod(tokens_file, 0o600)
    with open(os.path.join(folder, "script.yaml"), "w") as f:
        f.write('- text: "slow down"\n  lang: en-US\n- clear: true\n')
    config = os.path.join(folder, "server.yaml")
    with open(config, "w") as f:
        f.write(f"server:\n  host: 127.0.0.1\n  port: 0\n  tokensFile: {tokens_file}\n  maxConnections: {devices + 64}\n"
                f"analyzer:\n  kind: scripted\n  scriptFile: {folder}/script.yaml\nlog:\n  level: notice\n"
                f"ledger: sqlite:{folder}/usage.sqlite\n")
    log = open(os.path.join(folder, "server.log"), "w+")
    server = subprocess.Popen([os.path.join(binary, "guidance-server"), "--config", config], stdout=log, stderr=log)
    deadline = time.time() + 30
    while time.time() < deadline:
        log.seek(0)
        match = re.search(r"listening on [0-9.]+:(\d+)", log.read())
        if match:
            return server, int(match.group(1)), list(tokens)
        if server.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    raise SystemExit(f"guidance-server did not start: {log.read()[-2000:]}")


async def device(port, token, segment, sha, seconds, start_delay, stats):
    await asyncio.sleep(start_delay)
    hello = {"type": "hello", "protocol": 1, "device": token, "locale": "en-US", "agent": "load", "stream": str(uuid.uuid4()),
             "video": {"codec": "hevc", "container": "mp4", "width": 640, "height": 360, "fps": 10, "segmentMs": 5000}}
    chunks = [segment[i:i + CHUNK] for i in range(0, len(segment), CHUNK)]
    sent = {}
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/stream", additional_headers={"Authorization": f"Bearer {token}"},
                                      max_size=2 ** 20, open_timeout=30) as ws:
            await ws.send(json.dumps(hello))
            await ws.recv()
            stats["sessions"] += 1

            async def reader():
                async for message in ws:
                    body = json.loads(message)
                    if body.get("type") == "ack" and body["seq"] in sent:
                        stats["latency"].append(time.perf_counter() - sent.pop(body["seq"]))
                        stats["acked"] += 1
                    elif body.get("type") == "guidance":
                        stats["guidance"] += 1

            reading = asyncio.create_task(reader())
            end = time.monotonic() + seconds - start_delay
            seq = 0
            while time.monotonic() < end:
                captured = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                await ws.send(json.dumps({"type": "segment", "seq": seq, "capturedAt": captured, "durationMs": 5000, "frames": 50,
                                          "bytes": len(segment), "sha256": sha, "chunks": len(chunks)}))
                for chunk in chunks:
                    await ws.send(chunk)
                sent[seq] = time.perf_counter()
                stats["sent"] += 1
                seq += 1
                await asyncio.sleep(max(0.0, min(5.0, end - time.monotonic())))
            await asyncio.sleep(1.0)
            reading.cancel()
            stats["held"] += 1
    except websockets.ConnectionClosed as closed:
        code = closed.rcvd.code if closed.rcvd else None
        stats["closes"][str(code)] = stats["closes"].get(str(code), 0) + 1
    except Exception as error:  # connect failures, timeouts: counted, not fatal
        stats["errors"][type(error).__name__] = stats["errors"].get(type(error).__name__, 0) + 1


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--bin", default=".build/release")
    parser.add_argument("--segment", help="an MP4 to send (default: 5 s of testsrc2 encoded with libx265)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="server-load-")
    server = None
    try:
        segment_path = args.segment or make_segment(folder)
        segment = open(segment_path, "rb").read()
        sha = hashlib.sha256(segment).hexdigest()
        server, port, tokens = start_server(args.bin, folder, args.devices)
        time.sleep(1)
        idle_rss = proc_rss_kib(server.pid)
        cpu_before = proc_stat(server.pid)
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        stats = {"sessions": 0, "held": 0, "sent": 0, "acked": 0, "guidance": 0, "latency": [], "closes": {}, "errors": {}}
        # Starts spread over the first segment period, so segments arrive evenly.
        delays = [5.0 * i / args.devices for i in range(args.devices)]

        async def run():
            await asyncio.gather(*(device(port, tokens[i], segment, sha, args.seconds, delays[i], stats) for i in range(args.devices)))
            return proc_rss_kib(server.pid)

        end_rss = asyncio.run(run())
        cpu = proc_stat(server.pid) - cpu_before
        own = resource.getrusage(resource.RUSAGE_SELF)
        own_cpu = (own.ru_utime - own_before.ru_utime) + (own.ru_stime - own_before.ru_stime)
        latency_ms = [x * 1000 for x in stats["latency"]]
        result = {
            "devices": args.devices, "seconds": args.seconds, "segment_bytes": len(segment),
            "sessions_opened": stats["sessions"], "sessions_held": stats["held"], "closes": stats["closes"], "errors": stats["errors"],
            "segments_sent": stats["sent"], "segments_acked": stats["acked"], "guidance": stats["guidance"],
            "ack_ms_p50": percentile(latency_ms, 50), "ack_ms_p99": percentile(latency_ms, 99), "ack_ms_max": max(latency_ms, default=None),
            "server_rss_idle_mib": idle_rss / 1024, "server_rss_end_mib": end_rss / 1024,
            "server_rss_per_session_kib": (end_rss - idle_rss) / max(1, stats["held"]),
            "server_cpu_s": cpu, "server_cpu_ms_per_segment": 1000 * cpu / max(1, stats["acked"]),
            "generator_cpu_s": own_cpu,
        }
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key:28} {value:.2f}" if isinstance(value, float) else f"{key:28} {value}")
            if own_cpu > 0.8 * args.seconds:
                print("note: the load generator used most of a core; it, not the server, may limit the count")
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
