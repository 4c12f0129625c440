#!/usr/bin/env python3
"""Chaos on a built guidance-server: owners, cars and pairing peers that drop their connection at a
random point (a reset, SO_LINGER 0, or a plain close), cycle after cycle; then checks that the
server still does its work and holds no transaction open.

    python3 bench/owner_chaos.py --bin DIR --store sqlite|postgres --cycles N [--seed S]
                                 [--timeout 5] [--cycle-seconds S] [--max-seconds 900] [--paired-share 0.75] [--keep]

DIR holds `guidance-server` with its resources bundle folder beside it, as `swift build` leaves it
(e.g. .build/release). Python 3's standard library only, plus ffmpeg/ffprobe (one small HEVC
segment is made) and, for `--store postgres`, Debian's PostgreSQL: the newest
/usr/lib/postgresql/*/bin, a cluster initdb'd into a temporary folder as the `postgres` user, trust
authentication on loopback, a free port, stopped at the end (as Tests/TestSupport/PostgresServer.swift).

The server: port 0 (read from its log), tokens file `good-token: car-1`, the scripted analyzer
answering spoken guidance (text, never only `clear`), pairing on, the simulated payment provider
with one product, `usage.remainingSeconds: 100000`. Three owner accounts are made with
`guidance-server owner add` and given passwords through the real pages (the set-password link,
its csrf_pre cookie and form):
  chaos@example.org    signed in once; pairs cars in the cycles, lists and renames them
  guesser@example.org  signed in once; types the wrong codes and passwords, from a small pool of
                       X-Real-IP addresses (the server counts those per account and per address)
  checker@example.org  signs in only in check a
The server also counts a /pair lookup that a dropped connection delays past the decision as a
wrong code (and the next build counts a decision without a lookup): chaos@example.org may get
429 late in a long run. So the final checks use checker@example.org (a) and chaos@example.org (b,
which never typed a wrong password) from an address no other request names (X-Real-IP
192.0.2.1): a limit the cycles reached cannot fail them. One car is paired before the cycles, so
streams by a paired car (whose guidance the server records for its owner) happen from the first.

Each cycle (seeded) is one of:
  stream   GET /v1/stream with `good-token` or a paired car's access token (3 in 4 when there is
           one; --paired-share), dropped: in the upgrade request, after sending it, after the
           101 (with or without `hello`), mid-segment (the header and part of the bytes), after the `ack`, or
           right after the `guidance` of the last of 1-3 whole segments (the close that wedged
           the server). A fresh stream id per session, protocol v1 as docs/protocol.md.
  pairing  device_authorization + token polls, each dropped somewhere (a small pool of hostile
           addresses: 429 slow_down is expected); or a complete pairing (the owner types the code on
           /pair and approves on /pair/decide, the car polls for its credentials), each step
           dropped at random (a /pair not read whole is typed again, a lost decision made again;
           credentials lost with a dropped answer are counted).
  page     GET / (my cars), POST /devices/D/rename, POST /pair with a wrong code (400, or 429
           once limited), POST /signin with a wrong password (401, or 429 if limited), dropped in
           the request, after sending it, after the answer's first bytes, or read whole.

Then the checks, each PASS/FAIL with what was seen (exit 1 if one fails):
  a  a fresh pairing end to end (device_authorization, a new sign-in, /pair, /pair/decide, the
     car's poll gets an access_token), every answer within 10 s
  b  sign-in with the right password: 303 to / (one retry after a 503's Retry-After, if any)
  c  `guidance-server owner add another@example.org` exits 0 within 30 s
  d  `good-token` sends a whole segment: ack, and the usage message (and `guidance-server usage`)
     shows it charged
  e  no connection inside a transaction: sqlite, BEGIN IMMEDIATE + ROLLBACK from Python (timeout
     5 s); postgres, no `idle in transaction` backend within 15 s
  f  the server is alive and its log has no "database is locked"; 5xx answers are counted
Then a summary: cycles, drops by kind, point and how, outcomes, what went wrong first (and at
which cycle), the server's error lines, RSS peak, time. The run's folder (config, server log,
cycles.log with every outcome timed) is removed unless a check failed or --keep. Exit 0 all
checks passed, 1 one failed, 2 the run could not be set up or overran --max-seconds.
"""
import argparse
import base64
import collections
import datetime
import hashlib
import html
import json
import math
import os
import pwd
import random
import re
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

CHUNK = 65536
CLIENT_ID = "dashcam-agent"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
MAIN_EMAIL = "chaos@example.org"
GUESSER_EMAIL = "guesser@example.org"
CHECKER_EMAIL = "checker@example.org"  # signs in only for the final pairing check
PASSWORD = "chaos-password-0123"
SETUP_ADDRESS = "10.1.0.1"
CLEAN_ADDRESS = "192.0.2.1"  # the final checks' address: no hostile request ever names it
HOSTILE_ADDRESSES = [f"10.66.0.{i}" for i in range(1, 7)]
DROP_POINTS = ["partial", "sent", "reading"]  # an HTTP request cut: in it, after it, in its answer
FINAL_TIMEOUT = 10.0
ALLOWANCE = 100_000
SCRIPT = """# Spoken guidance for every segment (never only `clear`): a paired car's is recorded for its owner.
- text: "The car ahead is braking."
  lang: en-US
  priority: normal
- text: "전방에 보행자가 있습니다. 속도를 줄이세요."
  lang: ko-KR
  priority: urgent
- text: "A cyclist is on the right."
  lang: en-US
  priority: normal
"""


# MARK: - Peers: a socket whose every operation has a deadline, and that can leave with a reset

class PeerError(Exception):
    """What the server (or the network) did to a peer: counted in the cycles, a failure in the checks."""


class Late(PeerError):
    pass


class Gone(PeerError):
    pass


class Closed(PeerError):
    def __init__(self, code):
        super().__init__(f"close {code}")
        self.code = code


class Peer:
    def __init__(self, port, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise Late("no time left to connect")
        try:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=left)
        except socket.timeout:
            raise Late("connect timed out") from None
        except OSError as error:
            raise Gone(f"connect: {error}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.closed = False

    def _arm(self, deadline, what):
        left = deadline - time.monotonic()
        if left <= 0:
            raise Late(f"{what}: deadline passed")
        self.sock.settimeout(left)

    def send(self, data, deadline):
        self._arm(deadline, "send")
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise Late("send timed out") from None
        except OSError as error:
            raise Gone(f"send: {type(error).__name__}") from None

    def fill(self, deadline):
        self._arm(deadline, "read")
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise Late("read timed out") from None
        except OSError as error:
            raise Gone(f"read: {type(error).__name__}") from None
        if not data:
            raise Gone("eof")
        self.buf += data

    def read_until(self, marker, deadline, limit=1 << 20):
        while True:
            index = self.buf.find(marker)
            if index >= 0:
                out = bytes(self.buf[:index + len(marker)])
                del self.buf[:index + len(marker)]
                return out
            if len(self.buf) > limit:
                raise Gone("answer over the limit")
            self.fill(deadline)

    def read_exact(self, n, deadline):
        while len(self.buf) < n:
            self.fill(deadline)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_rest(self, deadline):
        try:
            while True:
                self.fill(deadline)
        except Gone:
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def drop(self, how="close"):
        if self.closed:
            return
        self.closed = True
        try:
            if how == "rst":
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()


# MARK: - HTTP/1.1 by hand

class Answer:
    def __init__(self, status, headers=(), body=b"", seconds=0.0, partial=False):
        self.status, self.headers, self.body, self.seconds, self.partial = status, list(headers), body, seconds, partial

    def get(self, name):
        return next((v for k, v in self.headers if k == name.lower()), None)

    def cookies(self):
        out = {}
        for k, v in self.headers:
            if k == "set-cookie":
                name, _, value = v.split(";", 1)[0].partition("=")
                out[name.strip()] = value.strip()
        return out

    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return {}

    def brief(self):
        if self.partial:
            return f"{self.status} (cut)"
        extra = ""
        if (self.get("content-type") or "").startswith("application/json"):
            extra = " " + str(self.json().get("error", ""))
        return f"{self.status}{extra.rstrip()}"


def read_answer(peer, deadline):
    head = peer.read_until(b"\r\n\r\n", deadline, limit=65536).decode("latin-1")
    lines = head.split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        raise Gone(f"not an HTTP answer: {lines[0][:60]!r}") from None
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip().lower(), value.strip()))
    answer = Answer(status, headers)
    if (answer.get("transfer-encoding") or "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int(peer.read_until(b"\r\n", deadline).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while peer.read_until(b"\r\n", deadline) != b"\r\n":
                    pass
                break
            body += peer.read_exact(size, deadline)
            peer.read_exact(2, deadline)
        answer.body = bytes(body)
    elif answer.get("content-length") is not None:
        answer.body = peer.read_exact(int(answer.get("content-length")), deadline)
    elif status == 101 or status == 204 or status == 304 or status < 200:
        answer.body = b""
    else:
        answer.body = peer.read_rest(deadline)
    return answer


def csrf_of(page):
    match = re.search(r'name="csrf" value="([^"]*)"', page)
    return html.unescape(match.group(1)) if match else None


# MARK: - WebSocket (RFC 6455) by hand

def mask(data, key):
    if not data:
        return b""
    n = len(data)
    keys = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(keys, "big")).to_bytes(n, "big")


def ws_frame(opcode, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    key = os.urandom(4)
    return head + key + mask(payload, key)


class Segment:
    def __init__(self, path):
        self.path = path
        self.data = open(path, "rb").read()
        self.sha = hashlib.sha256(self.data).hexdigest()
        self.chunks = [self.data[i:i + CHUNK] for i in range(0, len(self.data), CHUNK)]
        self.frames_bytes = [ws_frame(0x2, chunk) for chunk in self.chunks]  # masked once: the server does not care
        out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                              "stream=nb_frames,duration,width,height", "-of", "json", path],
                             capture_output=True, text=True, timeout=60).stdout
        stream = json.loads(out)["streams"][0]
        self.frames = int(stream["nb_frames"])
        self.duration_ms = int(round(float(stream["duration"]) * 1000))
        self.width, self.height = int(stream["width"]), int(stream["height"])
        self.cost = math.ceil(self.duration_ms / 1000)

    def header(self, seq):
        captured = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return json.dumps({"type": "segment", "seq": seq, "capturedAt": captured, "durationMs": self.duration_ms,
                           "frames": self.frames, "bytes": len(self.data), "sha256": self.sha, "chunks": len(self.chunks)})

    def hello(self, device):
        return json.dumps({"type": "hello", "protocol": 1, "device": device, "locale": "en-US", "agent": "owner-chaos",
                           "stream": str(uuid.uuid4()),
                           "video": {"codec": "hevc", "container": "mp4", "width": self.width, "height": self.height,
                                     "fps": 10, "segmentMs": 5000}})


def make_segment(folder):
    path = os.path.join(folder, "segment.mp4")
    # 2 s of 640x360 at 10 fps, libx265 as the agent writes it: about 120 KB, so two chunks.
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=10", "-t", "2",
                    "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error:qp=28", "-tag:v", "hvc1",
                    "-y", path], check=True, timeout=120)
    return path


class Stream:
    """One WebSocket session to /v1/stream."""

    def __init__(self, run, deadline):
        self.run = run
        self.peer = Peer(run.port, deadline)
        self.seen = []

    def upgrade_request(self, token):
        key = base64.b64encode(os.urandom(16)).decode()
        return ("GET /v1/stream HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{self.run.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n").encode()

    def read_upgrade(self, deadline):
        head = self.peer.read_until(b"\r\n\r\n", deadline, limit=65536).decode("latin-1")
        try:
            status = int(head.split(" ", 2)[1])
        except (IndexError, ValueError):
            raise Gone(f"not an HTTP answer: {head[:60]!r}") from None
        self.run.saw_status(status)
        return status

    def text(self, message, deadline):
        self.peer.send(ws_frame(0x1, message), deadline)

    def next_message(self, deadline):
        while True:
            head = self.peer.read_exact(2, deadline)
            n = head[1] & 0x7F
            if n == 126:
                n = int.from_bytes(self.peer.read_exact(2, deadline), "big")
            elif n == 127:
                n = int.from_bytes(self.peer.read_exact(8, deadline), "big")
            if head[1] & 0x80:
                self.peer.read_exact(4, deadline)
            if n > 1 << 20:
                raise Gone("server frame over 1 MiB")
            payload = self.peer.read_exact(n, deadline)
            opcode = head[0] & 0x0F
            if opcode == 0x1:
                try:
                    message = json.loads(payload)
                except ValueError:
                    self.seen.append("(not JSON)")
                    continue
                kind = message.get("type")
                self.seen.append(f"error {message.get('code')}" if kind == "error" else str(kind))
                return message
            if opcode == 0x8:
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                self.seen.append(f"close {code}")
                raise Closed(code)
            if opcode == 0x9:
                self.peer.send(ws_frame(0xA, payload), deadline)

    def wait_for(self, predicate, deadline):
        while True:
            message = self.next_message(deadline)
            if predicate(message):
                return message


# MARK: - The run

class Run:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.port = None
        self.phase = "setup"
        self.cycle = 0
        self.doing = ""
        self.guided_closes = 0  # paired cars' sessions closed right after their guidance
        self.kinds = collections.Counter()
        self.drops = collections.Counter()
        self.outcomes = collections.Counter()
        self.server_errors = collections.Counter()  # 5xx answers by phase
        self.first = {}  # what happened first, at which cycle
        self.cars = []  # paired cars of the main owner: (device, access token)
        self.lost_credentials = 0
        self.checks = []
        self.rss_peak_kib = 0
        self.log_locked = 0
        self.log_errors = collections.Counter()
        self.address_counter = 0
        self.trace = None  # cycles.log in the run's folder: every outcome, timed
        self.began = time.monotonic()

    # Bookkeeping

    def mark_first(self, what):
        if self.phase == "cycles" and what not in self.first:
            self.first[what] = f"{self.cycle} ({self.doing}; after {self.guided_closes} paired-car close(s) right after guidance)"

    def saw_status(self, status):
        if status >= 500:
            self.server_errors[self.phase] += 1
            self.mark_first("a 5xx answer")

    def outcome(self, kind, what):
        self.outcomes[(kind, what)] += 1
        if self.trace is not None:
            self.trace.write(f"{time.monotonic() - self.began:9.3f} cycle {self.cycle} {self.doing if self.doing.startswith(kind + ' ') else kind}: {what}\n")
        if what.startswith("timeout"):
            self.mark_first("a timeout")

    def fresh_address(self):
        self.address_counter += 1
        return f"10.77.{self.address_counter // 250}.{self.address_counter % 250 + 1}"

    # HTTP

    def http(self, method, path, form=None, jar=None, address=None, drop=None, how="close", timeout=None):
        body = None if form is None else urllib.parse.urlencode(form).encode()
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}", "User-Agent: owner-chaos", "Connection: close"]
        if address:
            lines.append(f"X-Real-IP: {address}")
        if jar:
            lines.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in jar.items()))
        if body is not None:
            lines += ["Content-Type: application/x-www-form-urlencoded", f"Content-Length: {len(body)}"]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        data = head + (body or b"")
        started = time.monotonic()
        deadline = started + (timeout or self.args.timeout)
        peer = Peer(self.port, deadline)
        try:
            if drop == "partial":
                cut = len(head) + self.rng.randrange(len(body)) if body else self.rng.randrange(1, len(head) - 3)
                peer.send(data[:cut], deadline)
                return None
            peer.send(data, deadline)
            if drop == "sent":
                return None
            if drop == "reading":
                while len(peer.buf) < 12:
                    peer.fill(deadline)
                try:
                    status = int(peer.buf[9:12])
                except ValueError:
                    raise Gone("not an HTTP answer") from None
                self.saw_status(status)
                return Answer(status, seconds=time.monotonic() - started, partial=True)
            answer = read_answer(peer, deadline)
            answer.seconds = time.monotonic() - started
            self.saw_status(answer.status)
            if jar is not None:
                jar.update(answer.cookies())
            return answer
        finally:
            peer.drop(how if drop else "close")

    def step(self, kind, method, path, drop, how, **options):
        """One request of a cycle: its drop and outcome counted, never raising for what the peer met."""
        self.drops[(kind, drop or "none (read whole)", how if drop else "-")] += 1
        self.doing = f"{kind} {drop or 'read whole'} {how if drop else ''}".rstrip()
        try:
            answer = self.http(method, path, drop=drop, how=how, **options)
        except Late as error:
            self.outcome(kind, f"timeout ({error})")
            return None
        except PeerError as error:
            self.outcome(kind, f"connection: {error}")
            return None
        self.outcome(kind, "dropped before the answer" if answer is None else answer.brief())
        return answer

    # Owners

    def sign_in(self, email, password, address, timeout=None):
        """A fresh session: (cookie jar, csrf, answers). Raises SetupError with what was seen."""
        jar = {}
        seen = []
        page = self.http("GET", "/signin", jar=jar, address=address, timeout=timeout)
        seen.append(("GET /signin", page))
        csrf = csrf_of(page.text())
        if page.status != 200 or not csrf:
            raise SetupError(f"GET /signin: {page.status}", seen)
        answer = self.post_signin(jar, csrf, email, password, address, timeout, seen)
        if answer.status != 303 or answer.get("location") != "/":
            raise SetupError(f"POST /signin: {answer.status} location {answer.get('location')}", seen)
        cars = self.http("GET", "/", jar=jar, address=address, timeout=timeout)
        seen.append(("GET /", cars))
        csrf = csrf_of(cars.text())
        if cars.status != 200 or not csrf:
            raise SetupError(f"GET / after sign-in: {cars.status}", seen)
        return jar, csrf, seen

    def post_signin(self, jar, csrf, email, password, address, timeout, seen):
        """POST /signin; once more after the Retry-After of a 503 (a server whose password hashing
        is busy with the cycles' dropped sign-ins says so, and when to come back)."""
        form = {"csrf": csrf, "email": email, "password": password}
        answer = self.http("POST", "/signin", form, jar=jar, address=address, timeout=timeout)
        seen.append(("POST /signin", answer))
        retry = answer.get("retry-after") or ""
        if answer.status == 503 and retry.isdigit() and int(retry) <= 10:
            time.sleep(int(retry))
            answer = self.http("POST", "/signin", form, jar=jar, address=address, timeout=timeout)
            seen.append((f"POST /signin after Retry-After {retry}", answer))
        return answer

    def set_password(self, token, password):
        jar = {}
        page = self.http("GET", "/set-password?token=" + urllib.parse.quote(token), jar=jar, address=SETUP_ADDRESS)
        csrf = csrf_of(page.text())
        if page.status != 200 or not csrf or "csrf_pre" not in jar:
            raise SetupError(f"GET /set-password: {page.status}, cookies {sorted(jar)}", [])
        answer = self.http("POST", "/set-password", {"csrf": csrf, "token": token, "password": password, "again": password},
                           jar=jar, address=SETUP_ADDRESS)
        if answer.status != 200 or "password is set" not in answer.text():
            raise SetupError(f"POST /set-password: {answer.status}", [])

    def pair_car(self, jar, csrf, address, name, timeout=None):
        """A complete pairing with nothing dropped; returns (device, access token, answers)."""
        seen = []
        form = {"client_id": CLIENT_ID, "device_name": name}
        started = self.http("POST", "/oauth/device_authorization", form, address=address, timeout=timeout)
        seen.append(("POST /oauth/device_authorization", started))
        codes = started.json()
        if started.status != 200 or "device_code" not in codes:
            raise SetupError(f"device_authorization: {started.brief()}", seen)
        looked = self.http("POST", "/pair", {"csrf": csrf, "code": codes["user_code"]}, jar=jar, address=address, timeout=timeout)
        seen.append(("POST /pair", looked))
        if looked.status != 200 or "/pair/decide" not in looked.text():
            raise SetupError(f"POST /pair: {looked.status}", seen)
        decided = self.http("POST", "/pair/decide", {"csrf": csrf_of(looked.text()) or csrf, "code": codes["user_code"], "decision": "approve"},
                            jar=jar, address=address, timeout=timeout)
        seen.append(("POST /pair/decide", decided))
        if decided.status != 200:
            raise SetupError(f"POST /pair/decide: {decided.status}", seen)
        polled = self.http("POST", "/oauth/token", {"client_id": CLIENT_ID, "grant_type": DEVICE_GRANT, "device_code": codes["device_code"]},
                           address=address, timeout=timeout)
        seen.append(("POST /oauth/token", polled))
        credentials = polled.json()
        if polled.status != 200 or "access_token" not in credentials:
            raise SetupError(f"the car's poll: {polled.brief()}", seen)
        return credentials["device_id"], credentials["access_token"], seen

    # Cycles

    def stream_cycle(self):
        rng = self.rng
        if self.cars and rng.random() < self.args.paired_share:
            device, token = rng.choice(self.cars)
            who = "paired car"
        else:
            device, token = "car-1", "good-token"
            who = "static token"
        point = rng.choices(["upgrade_partial", "upgrade_sent", "after_upgrade", "mid_segment", "after_ack", "after_guidance"],
                            weights=[7, 8, 10, 15, 15, 45])[0]
        how = rng.choice(["rst", "close"])
        kind = f"stream ({who})"
        self.doing = f"{kind} {point} {how}"
        self.drops[(kind, point, how)] += 1
        deadline = time.monotonic() + self.args.timeout
        stream = None
        try:
            stream = Stream(self, deadline)
            request = stream.upgrade_request(token)
            if point == "upgrade_partial":
                stream.peer.send(request[:rng.randrange(1, len(request) - 3)], deadline)
                self.outcome(kind, "dropped in the upgrade request")
                return
            stream.peer.send(request, deadline)
            if point == "upgrade_sent":
                self.outcome(kind, "dropped before the upgrade answer")
                return
            status = stream.read_upgrade(deadline)
            if status != 101:
                self.outcome(kind, f"upgrade {status}")
                return
            segment = self.segment
            if point == "after_upgrade":
                if rng.random() < 0.5:
                    stream.text(segment.hello(device), deadline)
                self.outcome(kind, "dropped after the upgrade")
                return
            stream.text(segment.hello(device), deadline)
            stream.wait_for(lambda m: m.get("type") == "welcome", deadline)
            if point == "mid_segment":
                stream.text(segment.header(0), deadline)
                if len(segment.chunks) > 1 and rng.random() < 0.5:
                    stream.peer.send(segment.frames_bytes[0], deadline)
                else:
                    frame = segment.frames_bytes[rng.randrange(len(segment.frames_bytes))]
                    stream.peer.send(frame[:rng.randrange(1, len(frame))], deadline)
                self.outcome(kind, "dropped mid-segment")
                return
            count = rng.randint(1, 3) if point == "after_guidance" else 1
            for seq in range(count):
                stream.text(segment.header(seq), deadline)
                stream.peer.send(b"".join(segment.frames_bytes), deadline)
                answer = stream.wait_for(lambda m: m.get("seq") == seq and m.get("type") in ("ack", "error"), deadline)
                if answer["type"] == "error":
                    self.outcome(kind, f"error {answer.get('code')} for a segment")
                    return
                if point == "after_ack" and seq == count - 1:
                    self.outcome(kind, "dropped after the ack")
                    return
                answer = stream.wait_for(lambda m: m.get("seq") == seq and m.get("type") in ("guidance", "error"), deadline)
                if answer["type"] == "error":
                    self.outcome(kind, f"error {answer.get('code')} instead of guidance")
                    return
            if who == "paired car":
                self.guided_closes += 1
            self.outcome(kind, f"dropped right after guidance ({count} segment{'s' if count > 1 else ''})")
        except Late as error:
            self.outcome(kind, f"timeout ({error}) at {point}")
        except PeerError as error:
            self.outcome(kind, f"connection: {error} at {point}")
        finally:
            if stream is not None:
                stream.peer.drop(how)

    def pairing_cycle(self):
        rng = self.rng
        grant = {"client_id": CLIENT_ID, "grant_type": DEVICE_GRANT}
        if rng.random() < 0.5:
            # Codes asked for and polled, each request dropped somewhere (or sometimes read).
            address = rng.choice(HOSTILE_ADDRESSES)
            drop = rng.choice(DROP_POINTS + [None])
            answer = self.step("pairing/authorize", "POST", "/oauth/device_authorization", drop, rng.choice(["rst", "close"]),
                               form={"client_id": CLIENT_ID, "device_name": f"chaos {self.cycle}"}, address=address)
            code = answer.json().get("device_code") if answer is not None and answer.status == 200 else None
            for _ in range(rng.randint(1, 3)):
                self.step("pairing/poll", "POST", "/oauth/token", rng.choice(DROP_POINTS + [None]), rng.choice(["rst", "close"]),
                          form=dict(grant, device_code=code or os.urandom(16).hex()), address=address)
            return
        # A complete pairing, any step dropped (a third of the time): what is lost is made up once.
        address = self.fresh_address()
        jar, csrf = self.main
        maybe = lambda: rng.choice(DROP_POINTS) if rng.random() < 0.35 else None  # noqa: E731
        how = lambda: rng.choice(["rst", "close"])  # noqa: E731
        started = self.step("pair-complete/authorize", "POST", "/oauth/device_authorization", maybe(), how(),
                            form={"client_id": CLIENT_ID, "device_name": f"chaos car {self.cycle}"}, address=address)
        if started is None or started.partial or started.status != 200:
            self.outcome("pair-complete", "no code (dropped or refused)")
            return
        codes = started.json()
        poll = dict(grant, device_code=codes["device_code"])
        if rng.random() < 0.5:
            self.step("pair-complete/early poll", "POST", "/oauth/token", maybe(), how(), form=poll, address=address)
        looked = self.step("pair-complete/pair", "POST", "/pair", maybe(), how(), form={"csrf": csrf, "code": codes["user_code"]},
                           jar=dict(jar), address=address)
        if looked is None or looked.partial or looked.status != 200:
            # The owner types the code again: a decision on a code this owner's /pair never showed
            # counts as a guess (and a /pair the server never read showed nothing).
            looked = self.step("pair-complete/pair again", "POST", "/pair", None, "-", form={"csrf": csrf, "code": codes["user_code"]},
                               jar=dict(jar), address=address)
            if looked is None or looked.status != 200:
                self.outcome("pair-complete", "no car (the code was not shown)")
                return
        decide = {"csrf": csrf, "code": codes["user_code"], "decision": "approve"}
        self.step("pair-complete/decide", "POST", "/pair/decide", maybe(), how(), form=decide, jar=dict(jar), address=address)
        polled = self.step("pair-complete/poll", "POST", "/oauth/token", maybe(), how(), form=poll, address=address)
        for _ in range(3):
            if polled is not None and not polled.partial:
                error = polled.json().get("error")
                if polled.status == 200 or error not in ("authorization_pending", "slow_down", "invalid_grant"):
                    break
                if error == "invalid_grant":
                    # Redeemed by a poll whose answer was dropped: those credentials are gone.
                    self.lost_credentials += 1
                    break
                # Not approved (yet): the decision was lost with its connection. The owner approves again.
                self.step("pair-complete/decide again", "POST", "/pair/decide", None, "-", form=decide, jar=dict(jar), address=address)
            polled = self.step("pair-complete/poll again", "POST", "/oauth/token", None, "-", form=poll, address=address)
        if polled is not None and not polled.partial and polled.status == 200 and "access_token" in polled.json():
            credentials = polled.json()
            self.cars.append((credentials["device_id"], credentials["access_token"]))
            self.outcome("pair-complete", "a car paired")
        else:
            self.outcome("pair-complete", "no car")

    def page_cycle(self):
        rng = self.rng
        action = rng.choice(["my cars", "rename", "wrong code", "wrong password"])
        drop = rng.choice(DROP_POINTS + [None])
        how = rng.choice(["rst", "close"])
        kind = f"page/{action}"
        if action == "my cars":
            self.step(kind, "GET", "/", drop, how, jar=dict(self.main[0]))
        elif action == "rename":
            device = rng.choice(self.cars)[0] if self.cars and rng.random() < 0.8 else "car-1"
            self.step(kind, "POST", f"/devices/{device}/rename", drop, how, form={"csrf": self.main[1], "label": f"chaos {self.cycle}"},
                      jar=dict(self.main[0]))
        elif action == "wrong code":
            code = "".join(rng.choice("0123456789") for _ in range(9))
            self.step(kind, "POST", "/pair", drop, how, form={"csrf": self.guesser[1], "code": code}, jar=dict(self.guesser[0]),
                      address=rng.choice(HOSTILE_ADDRESSES))
        else:
            pre = os.urandom(12).hex()
            self.step(kind, "POST", "/signin", drop, how, form={"csrf": pre, "email": GUESSER_EMAIL, "password": f"wrong-{rng.random()}"},
                      jar={"csrf_pre": pre}, address=rng.choice(HOSTILE_ADDRESSES))

    # Checks

    def check(self, name, ok, seen):
        self.checks.append((name, ok))
        print(f"{'PASS' if ok else 'FAIL'} {name}: {seen}", flush=True)


class SetupError(Exception):
    def __init__(self, message, seen):
        super().__init__(message)
        self.seen = seen


def describe(seen):
    return ", ".join(f"{what} {answer.status} in {answer.seconds:.2f} s" for what, answer in seen)


# MARK: - Processes

def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Postgres:
    """Debian's PostgreSQL in a temporary folder, as Tests/TestSupport/PostgresServer.swift starts it."""

    def __init__(self):
        versions = sorted((int(v) for v in os.listdir("/usr/lib/postgresql") if v.isdigit()), reverse=True) \
            if os.path.isdir("/usr/lib/postgresql") else []
        self.bin = next((f"/usr/lib/postgresql/{v}/bin" for v in versions
                         if os.access(f"/usr/lib/postgresql/{v}/bin/initdb", os.X_OK) and os.access(f"/usr/lib/postgresql/{v}/bin/postgres", os.X_OK)), None)
        if self.bin is None:
            raise SystemExit("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb): apt-get install postgresql")
        self.folder = tempfile.mkdtemp(prefix="owner-chaos-pg-")
        self.data = os.path.join(self.folder, "data")
        self.port = free_port()
        self.started = False
        self.as_postgres = []
        if os.getuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self.as_postgres = ["/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
        self.run_pg("initdb", ["-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
        self.run_pg("pg_ctl", ["-D", self.data, "-w", "-t", "60", "-l", os.path.join(self.folder, "log"),
                               "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start"])
        self.started = True

    def run_pg(self, program, arguments, timeout=120):
        output = os.path.join(self.folder, program + ".out")
        with open(output, "w") as out:
            # Output to a file, not a pipe: the server pg_ctl leaves running must not hold our pipe.
            status = subprocess.run(self.as_postgres + [f"{self.bin}/{program}"] + arguments, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.folder, timeout=timeout).returncode
        if status != 0:
            log = open(os.path.join(self.folder, "log"), errors="replace").read()[-2000:] if os.path.exists(os.path.join(self.folder, "log")) else ""
            raise SystemExit(f"{program} {' '.join(arguments)}: exit {status}: {open(output, errors='replace').read()[-2000:]} {log}")

    def psql(self, database, command, timeout=10):
        result = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1",
                                 "-Atc", command], capture_output=True, text=True, timeout=timeout, env=dict(os.environ, PGCONNECT_TIMEOUT="5"))
        return result.returncode, result.stdout.strip(), result.stderr.strip()

    def stop(self):
        if self.started:
            self.started = False
            try:
                self.run_pg("pg_ctl", ["-D", self.data, "-m", "immediate", "stop"], timeout=60)
            except (SystemExit, subprocess.TimeoutExpired) as error:
                print(f"(stopping PostgreSQL: {error})", file=sys.stderr)
        shutil.rmtree(self.folder, ignore_errors=True)


class Server:
    """guidance-server with its output in server.log, read as it comes (the port, what it logs)."""

    LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")

    def __init__(self, binary, config, folder, run):
        self.run = run
        self.log_path = os.path.join(folder, "server.log")
        self.listening = threading.Event()
        self.port = None
        self.process = subprocess.Popen([binary, "--config", config], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, cwd=folder)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        with open(self.log_path, "w") as log:
            for raw in iter(self.process.stdout.readline, b""):
                line = raw.decode("utf-8", "replace")
                log.write(line)
                log.flush()
                if self.port is None:
                    match = self.LISTENING.search(line)
                    if match:
                        self.port = int(match.group(1))
                        self.listening.set()
                if "database is locked" in line:
                    self.run.log_locked += 1
                    self.run.mark_first('"database is locked" in the log')
                level = re.match(r"^\S+ (error|critical) ", line)
                if level and not re.search(r"Error handling upgrade result|I/O on closed channel", line):
                    self.run.mark_first("an error in the log (other than a dropped peer's)")
                if level:
                    key = re.sub(r"^\S+ (\w+) .*?\] ", r"\1 ", line.strip())
                    key = re.sub(r"[0-9A-F]{8}-[0-9A-F-]{27}", "ID", key)
                    self.run.log_errors[re.sub(r"\d+", "N", key)[:110]] += 1
        self.listening.set()

    def rss(self, field="VmRSS"):
        try:
            for line in open(f"/proc/{self.process.pid}/status"):
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass
        return 0

    def stop(self):
        if self.process.poll() is not None:
            return f"had exited with {self.process.returncode}"
        self.process.send_signal(signal.SIGTERM)
        try:
            return f"exit {self.process.wait(timeout=30)} on SIGTERM"
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            return "killed: still running 30 s after SIGTERM"


def command(binary, arguments, config, timeout):
    """Runs a guidance-server command: (exit status or 'timed out', stdout, stderr, seconds)."""
    started = time.monotonic()
    try:
        result = subprocess.run([binary, *arguments, "--config", config], capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
        return result.returncode, result.stdout, result.stderr, time.monotonic() - started
    except subprocess.TimeoutExpired as error:
        return f"still running after {timeout} s", error.stdout or "", error.stderr or "", time.monotonic() - started


# MARK: - Main

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="folder holding guidance-server and its resources bundle")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--seed", type=int, default=None, help="repeats a run's choices (not its timing); random if unset")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds each request of a cycle may take (default 5)")
    parser.add_argument("--cycle-seconds", type=float, default=None,
                        help="the cycles stop after this long, however many are left (default: 0.25 s a cycle, at least 60 s; a healthy server does 300 in about 10 s)")
    parser.add_argument("--final-timeout", type=float, default=10.0,
                        help="seconds each answer of the final checks may take (default 10; a test on a busy machine gives more)")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="the whole run stops itself (exit 2) after this long")
    parser.add_argument("--paired-share", type=float, default=0.75,
                        help="share of stream cycles by a paired car rather than good-token (default 0.75; 0 for a control run)")
    parser.add_argument("--segment", help="an HEVC MP4 segment to send (default: 2 s of testsrc2, made with ffmpeg)")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (kept anyway when a check fails)")
    args = parser.parse_args()
    global FINAL_TIMEOUT
    FINAL_TIMEOUT = args.final_timeout
    if args.cycle_seconds is None:
        args.cycle_seconds = max(60.0, 0.25 * args.cycles)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "big")
    binary = os.path.join(os.path.abspath(args.bin), "guidance-server")
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary}: not an executable")
    run = Run(args)
    began = time.monotonic()
    folder = tempfile.mkdtemp(prefix="owner-chaos-")
    postgres = None
    server = None
    done = threading.Event()

    def cleanup():
        if server is not None and server.process.poll() is None:
            server.process.kill()
        if postgres is not None:
            postgres.stop()

    def watchdog():
        if not done.wait(args.max_seconds):
            print(f"\nthe run took over --max-seconds {args.max_seconds:.0f}: stopping (phase {run.phase}, cycle {run.cycle}); "
                  f"the run's folder is kept: {folder}", flush=True)
            cleanup()
            os._exit(2)

    threading.Thread(target=watchdog, daemon=True).start()
    print(f"owner chaos: {args.store}, {args.cycles} cycles, seed {args.seed}, binary {binary}, folder {folder}", flush=True)
    try:
        run.segment = Segment(args.segment or make_segment(folder))
        if args.store == "postgres":
            postgres = Postgres()
            status, out, err = postgres.psql("postgres", "CREATE DATABASE chaos")
            if status != 0:
                sys.exit(f"CREATE DATABASE: {err}")
            ledger = f"postgres://postgres@127.0.0.1:{postgres.port}/chaos"
        else:
            ledger = f"sqlite:{folder}/usage.sqlite"
        tokens = os.path.join(folder, "tokens.yaml")
        with open(tokens, "w") as file:
            file.write("good-token: car-1\n")
        os.chmod(tokens, 0o600)
        with open(os.path.join(folder, "script.yaml"), "w") as file:
            file.write(SCRIPT)
        config = os.path.join(folder, "server.yaml")
        with open(config, "w") as file:
            file.write(f"""server:
  host: 127.0.0.1
  port: 0
  tokensFile: {tokens}
analyzer:
  kind: scripted
  scriptFile: {folder}/script.yaml
usage:
  remainingSeconds: {ALLOWANCE}
pairing:
  enabled: true
  signingKeyFile: {folder}/signing.key
  accessTokenSeconds: 3600
payments:
  provider: simulated
  products: ["1 hour=3600=4.99 EUR"]
  webhookSecretFile: {folder}/webhook.secret
ledger: {ledger}
""")
        server = Server(binary, config, folder, run)
        if not server.listening.wait(90) or server.port is None:
            sys.exit(f"the server did not say where it listens; its log: {open(server.log_path, errors='replace').read()[-3000:]}")
        run.port = server.port
        run.trace = open(os.path.join(folder, "cycles.log"), "w", buffering=1)
        start_rss = server.rss()

        # Setup: two owners with passwords set through the pages, signed in; one car paired.
        try:
            for email in (MAIN_EMAIL, GUESSER_EMAIL, CHECKER_EMAIL):
                status, out, err, _ = command(binary, ["owner", "add", email], config, 60)
                match = re.search(r"token=([^\s&]+)", out)
                if status != 0 or not match:
                    sys.exit(f"owner add {email}: {status}: {out} {err[-2000:]}")
                run.set_password(urllib.parse.unquote(match.group(1)), PASSWORD)
            main_jar, main_csrf, _ = run.sign_in(MAIN_EMAIL, PASSWORD, SETUP_ADDRESS)
            guess_jar, guess_csrf, _ = run.sign_in(GUESSER_EMAIL, PASSWORD, SETUP_ADDRESS)
            run.main, run.guesser = (main_jar, main_csrf), (guess_jar, guess_csrf)
            device, token, _ = run.pair_car(main_jar, main_csrf, run.fresh_address(), "the first car")
            run.cars.append((device, token))
        except (SetupError, PeerError) as error:
            sys.exit(f"setup failed: {error} {describe(getattr(error, 'seen', []))}")
        print(f"setup: the server on port {run.port} ({start_rss / 1024:.1f} MiB), owners {MAIN_EMAIL}, {GUESSER_EMAIL} (signed in) and {CHECKER_EMAIL}, "
              f"car {device} paired; segment {len(run.segment.data)} bytes, {len(run.segment.chunks)} chunks, "
              f"{run.segment.frames} frames, {run.segment.duration_ms} ms", flush=True)

        # The cycles.
        run.phase = "cycles"
        cycles_began = time.monotonic()
        cut_short = None
        for index in range(1, args.cycles + 1):
            if time.monotonic() - cycles_began > args.cycle_seconds:
                cut_short = f"stopped after {index - 1} of {args.cycles} cycles: over --cycle-seconds {args.cycle_seconds:.0f}"
                break
            if server.process.poll() is not None:
                cut_short = f"stopped after {index - 1} cycles: the server exited ({server.process.returncode})"
                break
            run.cycle = index
            kind = run.rng.choices(["stream", "pairing", "page"], weights=[45, 25, 30])[0]
            run.kinds[kind] += 1
            {"stream": run.stream_cycle, "pairing": run.pairing_cycle, "page": run.page_cycle}[kind]()
            run.rss_peak_kib = max(run.rss_peak_kib, server.rss())
            if index % 50 == 0:
                print(f"  {index} cycles, {time.monotonic() - cycles_began:.1f} s, {len(run.cars)} paired cars, "
                      f"5xx so far {run.server_errors['cycles']}", flush=True)
        cycles_done = run.cycle
        cycles_seconds = time.monotonic() - cycles_began
        if cut_short:
            print(f"  {cut_short}", flush=True)

        # The checks.
        run.phase = "checks"
        print(f"\nchecks after {cycles_done} cycles:", flush=True)
        check_fresh_pairing(run)
        check_sign_in(run)
        check_owner_add(run, binary, config)
        check_charging(run, binary, config)
        check_transactions(run, args.store, folder, postgres)
        alive = server.process.poll() is None
        run.check("f. the server is alive, its log without \"database is locked\"", alive and run.log_locked == 0,
                  f"alive: {alive}; \"database is locked\" lines: {run.log_locked}; 5xx answers during the cycles: "
                  f"{run.server_errors['cycles']}, after: {run.server_errors['checks']}")
        run.rss_peak_kib = max(run.rss_peak_kib, server.rss("VmHWM"))
        stopped = server.stop()
        server.reader.join(timeout=10)
        done.set()

        # The summary.
        failed = [name for name, ok in run.checks if not ok]
        print(f"\nsummary ({args.store}, seed {args.seed}):")
        print(f"  cycles: {cycles_done} of {args.cycles} in {cycles_seconds:.1f} s"
              + "".join(f"; {kind} {n}" for kind, n in sorted(run.kinds.items())) + (f" ({cut_short})" if cut_short else ""))
        print(f"  paired cars: {len(run.cars)} (credentials lost with a dropped answer: {run.lost_credentials})")
        print("  drops as chosen (the outcomes say where each ended): kind, point (read whole: not dropped), by reset / by close")
        table = collections.defaultdict(collections.Counter)
        for (kind, point, how), n in run.drops.items():
            table[(kind, point)][how] += n
        for (kind, point), hows in sorted(table.items()):
            print(f"    {kind:32} {point:24} " + (f"{hows['-']}" if "-" in hows else f"rst {hows['rst']}, close {hows['close']}"))
        print("  outcomes:")
        for (kind, what), n in sorted(run.outcomes.items()):
            print(f"    {kind:32} {what:60} {n}")
        if run.first:
            print("  first seen during the cycles (log lines: the cycle running when the line was read):")
            for what, cycle in sorted(run.first.items(), key=lambda kv: int(kv[1].split()[0])):
                print(f"    {what}: cycle {cycle}")
        if run.log_errors:
            print("  server log errors:")
            for line, n in run.log_errors.most_common(6):
                print(f"    {n} x {line}")
        print(f"  5xx answers: {run.server_errors['cycles']} during the cycles, {run.server_errors['checks']} after")
        print(f"  checks: {len(run.checks) - len(failed)} passed, {len(failed)} failed" + (f" ({', '.join(f.split('.')[0] for f in failed)})" if failed else ""))
        print(f"  server RSS: {start_rss / 1024:.1f} MiB at start, peak {run.rss_peak_kib / 1024:.1f} MiB; {stopped}")
        print(f"  elapsed: {time.monotonic() - began:.1f} s")
        if failed or args.keep:
            print(f"  the run's folder is kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
        return 1 if failed else 0
    finally:
        done.set()
        cleanup()


def check_fresh_pairing(run):
    """A new sign-in, then a car paired through it with nothing dropped (device_authorization,
    /pair, /pair/decide, the car's poll), every answer within the final time-out."""
    seen = []
    try:
        jar, csrf, signed = run.sign_in(CHECKER_EMAIL, PASSWORD, CLEAN_ADDRESS, timeout=FINAL_TIMEOUT)
        seen += signed
        _, _, paired = run.pair_car(jar, csrf, CLEAN_ADDRESS, "the check's car", timeout=FINAL_TIMEOUT)
        seen += paired
        run.check("a. a fresh pairing end to end", True, describe(seen))
    except SetupError as error:
        run.check("a. a fresh pairing end to end", False, f"{error}; {describe(seen + error.seen)}")
    except PeerError as error:
        run.check("a. a fresh pairing end to end", False, f"{type(error).__name__}: {error} after {describe(seen) or 'nothing'}")


def check_sign_in(run):
    try:
        jar = {}
        page = run.http("GET", "/signin", jar=jar, address=CLEAN_ADDRESS, timeout=FINAL_TIMEOUT)
        seen = [("GET /signin", page)]
        answer = run.post_signin(jar, csrf_of(page.text()) or "", MAIN_EMAIL, PASSWORD, CLEAN_ADDRESS, FINAL_TIMEOUT, seen)
        ok = answer.status == 303 and answer.get("location") == "/"
        run.check("b. sign-in with the right password", ok, f"{MAIN_EMAIL}: {describe(seen)}, to {answer.get('location')}")
    except PeerError as error:
        run.check("b. sign-in with the right password", False, f"{type(error).__name__}: {error}")


def check_owner_add(run, binary, config):
    status, out, err, seconds = command(binary, ["owner", "add", "another@example.org"], config, 30)
    ok = status == 0 and "set-password?token=" in out
    run.check("c. owner add another@example.org", ok,
              f"exit {status} in {seconds:.1f} s" + ("" if ok else f"; stderr: {err.strip()[-400:]!r}"))


def usage_of(binary, config, device):
    status, out, err, _ = command(binary, ["usage", "--json", device], config, 30)
    try:
        return json.loads(out)[0], None
    except (ValueError, IndexError, KeyError, TypeError):
        return None, f"usage exit {status}: {err.strip()[-300:]!r}"


def check_charging(run, binary, config):
    name = "d. a static-token car's segment is acknowledged and charged"
    before, problem_before = usage_of(binary, config, "car-1")
    segment = run.segment
    deadline = time.monotonic() + FINAL_TIMEOUT
    stream = None
    got = {}
    try:
        stream = Stream(run, deadline)
        stream.peer.send(stream.upgrade_request("good-token"), deadline)
        status = stream.read_upgrade(deadline)
        if status != 101:
            raise Gone(f"upgrade answered {status}")
        stream.text(segment.hello("car-1"), deadline)
        got["welcome"] = stream.wait_for(lambda m: m.get("type") == "welcome", deadline)
        stream.text(segment.header(0), deadline)
        stream.peer.send(b"".join(segment.frames_bytes), deadline)
        while "ack" not in got or "usage" not in got:
            message = stream.wait_for(lambda m: m.get("type") in ("ack", "usage", "error"), deadline)
            if message["type"] == "error":
                raise Gone(f"error {message.get('code')}: {message.get('message')}")
            got[message["type"]] = message
        stream.peer.drop("close")
    except PeerError as error:
        if stream is not None:
            stream.peer.drop("close")
        run.check(name, False, f"{type(error).__name__}: {error}; the session saw {stream.seen if stream else []}")
        return
    after, problem_after = usage_of(binary, config, "car-1")
    welcome_left = (got["welcome"].get("usage") or {}).get("remainingSeconds")
    left = got["usage"].get("remainingSeconds")
    by_message = welcome_left is not None and left is not None and welcome_left - left == segment.cost
    by_command = before is not None and after is not None and after.get("spentSeconds", 0) - before.get("spentSeconds", 0) == segment.cost
    run.check(name, by_message and (by_command or before is None or after is None),
              f"ack seq {got['ack'].get('seq')}; remaining {welcome_left} at welcome, {left} after (cost {segment.cost} s); "
              f"`usage car-1` spent {before.get('spentSeconds') if before else problem_before} -> {after.get('spentSeconds') if after else problem_after}")


def check_transactions(run, store, folder, postgres):
    name = "e. no connection left inside a transaction"
    if store == "sqlite":
        started = time.monotonic()
        try:
            db = sqlite3.connect(os.path.join(folder, "usage.sqlite"), timeout=5, isolation_level=None)
            try:
                db.execute("BEGIN IMMEDIATE")
                db.execute("ROLLBACK")
            finally:
                db.close()
            run.check(name, True, f"BEGIN IMMEDIATE + ROLLBACK took {time.monotonic() - started:.2f} s")
        except sqlite3.Error as error:
            run.check(name, False, f"BEGIN IMMEDIATE after {time.monotonic() - started:.1f} s: {error}")
        return
    query = ("SELECT count(*) FROM pg_stat_activity WHERE datname = 'chaos' AND state LIKE 'idle in transaction%'")
    until = time.monotonic() + 15
    counts = []
    while True:
        status, out, err = postgres.psql("postgres", query)
        counts.append(out if status == 0 else f"psql failed: {err}")
        if status == 0 and out == "0":
            run.check(name, True, f"idle in transaction: 0 (asked {len(counts)} times)")
            return
        if time.monotonic() >= until:
            break
        time.sleep(0.5)  # polled: PostgreSQL has no event to wait on for this
    _, detail, _ = postgres.psql("postgres", "SELECT pid, state, now() - xact_start, left(query, 80) FROM pg_stat_activity "
                                             "WHERE datname = 'chaos' AND state LIKE 'idle in transaction%'")
    run.check(name, False, f"idle in transaction after 15 s: {counts[-1]} (first {counts[0]}); {detail.replace(chr(10), ' | ')}")


if __name__ == "__main__":
    sys.exit(main())
