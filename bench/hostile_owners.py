#!/usr/bin/env python3
"""Hostile clients against the release guidance-server's pairing endpoints, owners' pages and
payment webhooks (pairing on, the simulated provider), beside a good client that keeps using
them. Prints what the server survived: requests by answer, its peak RSS, its log's length, its
exit status on SIGTERM.

    swift build -c release --product guidance-server
    python3 bench/hostile_owners.py [--seconds 120] [--clients 8] [--bin .build/release]

Hostile kinds, each a thread looping for the whole run:
  forms     random bytes and broken percent-encoding as form bodies on every POST route
  big       bodies over every limit (1 MiB), and a Content-Length that never arrives
  tokens    forged, truncated and `alg: none` access tokens at the stream's upgrade
  webhooks  unsigned, wrongly signed, stale and replayed webhooks; valid ones for unknown payments
  codes     code after code from one address (device_authorization), wrong codes on /pair
  slow      requests sent a byte at a time, then abandoned
The good client asks the token endpoint with a real device code and fetches /signin: each must
keep answering.
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

COUNTS = {}
LOCK = threading.Lock()


def count(key):
    with LOCK:
        COUNTS[key] = COUNTS.get(key, 0) + 1


def post(base, path, body, headers=None, timeout=10):
    request = urllib.request.Request(base + path, data=body, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except Exception as error:  # noqa: BLE001 (a hostile run counts every kind of failure)
        return type(error).__name__, b""


def rss_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except FileNotFoundError:
        return -1
    return -1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--bin", default=".build/release")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="hostile-owners-")
    secret_file = os.path.join(folder, "webhook.secret")
    with open(os.path.join(folder, "tokens.yaml"), "w") as file:
        file.write("good-token: car-1\n")
    os.chmod(os.path.join(folder, "tokens.yaml"), 0o600)
    with open(os.path.join(folder, "script.yaml"), "w") as file:
        file.write("- clear: true\n")
    with open(os.path.join(folder, "server.yaml"), "w") as file:
        file.write(f"""server:
  host: 127.0.0.1
  port: 0
  tokensFile: {folder}/tokens.yaml
analyzer:
  kind: scripted
  scriptFile: {folder}/script.yaml
pairing:
  enabled: true
  signingKeyFile: {folder}/signing.key
payments:
  provider: simulated
  products: ["1 hour=3600=4.99 EUR"]
  webhookSecretFile: {secret_file}
ledger: sqlite:{folder}/usage.sqlite
""")
    log = open(os.path.join(folder, "server.log"), "w")
    server = subprocess.Popen([os.path.join(args.bin, "guidance-server"), "--config", os.path.join(folder, "server.yaml")],
                              stdout=log, stderr=subprocess.STDOUT)
    port = None
    for _ in range(600):
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(os.path.join(folder, "server.log")).read())
        if match:
            port = int(match.group(1))
            break
        time.sleep(0.1)
    if port is None:
        sys.exit("the server did not start")
    base = f"http://127.0.0.1:{port}"
    secret = bytes.fromhex(open(secret_file).read().split()[0])
    stop = time.monotonic() + args.seconds
    peak = [rss_kib(server.pid)]
    start_rss = peak[0]

    def forms():
        routes = ["/oauth/device_authorization", "/oauth/token", "/signin", "/set-password", "/pair", "/pair/decide", "/buy",
                  "/devices/x/rename", "/devices/x/unpair", "/simulated-provider/checkout/pay_x"]
        while time.monotonic() < stop:
            body = random.choice([os.urandom(random.randint(0, 2000)), b"%" * 50, b"a=%zz&b=%%%", b"&" * 3000,
                                  b"client_id=dashcam-agent&client_id=dashcam-agent", "\u202e\u0000=\n".encode()])
            status, _ = post(base, random.choice(routes), body)
            count(f"forms {status}")

    def big():
        while time.monotonic() < stop:
            status, _ = post(base, random.choice(["/oauth/token", "/signin", "/webhooks/payments/simulated"]), b"a" * (1 << 20))
            count(f"big {status}")
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(b"POST /oauth/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nab")
                try:
                    raw.recv(100)
                except OSError:
                    pass
            count("big truncated")

    def tokens():
        forged = [
            "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJjYXItMSJ9.",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + base64.urlsafe_b64encode(b'{"sub":"car-1","exp":9999999999}').decode().rstrip("=") + ".AAAA",
            "a.b.c", "." * 3000, "x" * 5000,
        ]
        while time.monotonic() < stop:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(("GET /v1/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                             f"Authorization: Bearer {random.choice(forged)}\r\n\r\n").encode())
                answer = raw.recv(100).split(b"\r\n")[0]
                count(f"tokens {answer.decode(errors='replace')}")

    def webhooks():
        while time.monotonic() < stop:
            body = json.dumps({"id": "evt_x", "type": "payment.succeeded", "data": {"payment_id": "pay_unknown"}}).encode()
            t = str(int(time.time()))
            good = hmac.new(secret, (t + ".").encode() + body, hashlib.sha256).hexdigest()
            header = random.choice([None, "t=1,v1=00", f"t={t},v1={'0' * 64}", f"t={int(time.time()) - 3600},v1={good}", f"t={t},v1={good}",
                                    "t=" + "9" * 40 + ",v1=" + good, ",".join(["v1=" + good] * 50)])
            status, _ = post(base, "/webhooks/payments/simulated", body,
                             {"Content-Type": "application/json", **({"Provider-Signature": header} if header else {})})
            count(f"webhooks {status}")

    def codes():
        while time.monotonic() < stop:
            status, _ = post(base, "/oauth/device_authorization", b"client_id=dashcam-agent&device_name=" + os.urandom(8).hex().encode())
            count(f"codes {status}")

    def slow():
        while time.monotonic() < stop:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                    for byte in b"POST /signin HTTP/1.1\r\nHost: x\r\n":
                        raw.sendall(bytes([byte]))
                        time.sleep(0.05)
                    raw.settimeout(10)
                    raw.recv(100)
                count("slow cut")
            except OSError:
                count("slow closed")

    kinds = [forms, big, tokens, webhooks, codes, slow]
    threads = [threading.Thread(target=kinds[i % len(kinds)], daemon=True) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    good = {"signin 200": 0, "signin other": 0}
    while time.monotonic() < stop:
        try:
            with urllib.request.urlopen(base + "/signin", timeout=10) as answer:
                good["signin 200" if answer.status == 200 else "signin other"] += 1
        except Exception:  # noqa: BLE001
            good["signin other"] += 1
        peak[0] = max(peak[0], rss_kib(server.pid))
        time.sleep(0.5)
    for thread in threads:
        thread.join(timeout=30)
    alive = server.poll() is None
    server.send_signal(signal.SIGTERM)
    try:
        status = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        status = "killed after 60 s"
    log.close()
    lines = sum(1 for _ in open(os.path.join(folder, "server.log")))
    print(f"{args.seconds} s, {args.clients} hostile clients; the server alive at the end: {alive}; exit status on SIGTERM: {status}")
    print(f"RSS {start_rss / 1024:.1f} MiB at start, peak {peak[0] / 1024:.1f} MiB; server log {lines} lines")
    print(f"good client: {good}")
    for key in sorted(COUNTS):
        print(f"  {key}: {COUNTS[key]}")
    kinds_of_lines = {}
    for line in open(os.path.join(folder, "server.log"), errors="replace"):
        key = re.sub(r"^\S+ (\w+) .*?\] ", r"\1 ", line.strip())[:70]
        kinds_of_lines[key] = kinds_of_lines.get(key, 0) + 1
    for key, n in sorted(kinds_of_lines.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  log: {n} x {key}")
    shutil.rmtree(folder, ignore_errors=True)
    if not alive or status != 0 or good["signin other"] > 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
