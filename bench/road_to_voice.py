#!/usr/bin/env python3
"""Road to voice: from a change in front of the camera to the first sample of what the driver
hears, with the real `dashcam-agent` (and `guidance-server`) binaries and a file source played
in real time.

After 20 s for the start-up's own words, the camera's footage alternates 10 s of nothing to report (ffmpeg's moving testsrc2) with 10 s of
the change, cut in at a 5-s segment boundary:

  pedestrian  local guidance (no server): opencv-doc's vtest.avi, people walking, cut in
  dark        local guidance (no server): a black picture with sensor noise, cut in
  server      server guidance (`analyzer.kind: vision` on loopback): the same footage as
              `pedestrian`; measured from the end of each segment that shows people

The change's time is the agent's own: `capturedAt` of the segment it starts (the segment lines
on standard output, milliseconds). The first sample's time comes from the speech itself: the
agent speaks into WAV files (`speech.sink: wav:`), a sink that takes as long as the samples
take to play and is written when the utterance ends, so it began at the file's modification
time less its length (read by sox's `soxi`). Prints each delay, then p50 / p95 per case, and how
many utterances began while nothing was there (false alarms; a change that follows one within
offline.repeatMs is not warned about again, so it is counted apart, not measured).

    swift build -c release          # every product: the agent, the server, libRoadVision.so
    python3 bench/road_to_voice.py [--cycles 8] [--bin .build/release] [--only pedestrian,dark,server]
    python3 bench/road_to_voice.py --camera 1920x1080     # two streams: both guidances on the copy
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

VTEST = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
TOKEN = "bench-token-1"
# The first 20 s are for the start-up's own words ("Dashcam ready.", "No guidance from the
# server…", "Connection lost."), which would otherwise be taken for the first change's.
LEAD_SECONDS = 20
QUIET_SECONDS = 10
EVENT_SECONDS = 10
SEGMENT_SECONDS = 5
GUIDANCE_SIZE = "640x360"


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def footage(folder, kind, cycles, size):
    """20 s of testsrc2, cycles x (10 s of testsrc2, 10 s of the change) at SIZE (WxH), 10 fps, then
    10 s of testsrc2."""
    path = os.path.join(folder, f"{kind}.mkv")
    width, height = size.split("x")
    quiet = ["-f", "lavfi", "-i", f"testsrc2=size={size}:rate=10"]
    if kind == "dark":
        change = ["-f", "lavfi", "-i", f"color=c=0x101010:size={size}:rate=10"]
        change_filter = "noise=alls=8:allf=t,format=yuv420p"
    else:
        change = ["-stream_loop", "-1", "-i", VTEST]
        change_filter = f"scale={width}:{height},fps=10,format=yuv420p"
    parts = [f"[0:v]trim=start=0:duration={LEAD_SECONDS},setpts=PTS-STARTPTS,format=yuv420p[lead]"]
    inputs = ["[lead]"]
    for i in range(cycles):
        parts.append(f"[0:v]trim=start={LEAD_SECONDS + i * QUIET_SECONDS}:duration={QUIET_SECONDS},setpts=PTS-STARTPTS,format=yuv420p[q{i}]")
        parts.append(f"[1:v]trim=start={i * EVENT_SECONDS}:duration={EVENT_SECONDS},setpts=PTS-STARTPTS,{change_filter}[e{i}]")
        inputs += [f"[q{i}]", f"[e{i}]"]
    parts.append(f"[0:v]trim=start={LEAD_SECONDS + cycles * QUIET_SECONDS}:duration={QUIET_SECONDS},setpts=PTS-STARTPTS,format=yuv420p[tail]")
    inputs.append("[tail]")
    graph = ";".join(parts) + ";" + "".join(inputs) + f"concat=n={len(inputs)}:v=1:a=0[out]"
    subprocess.run(["ffmpeg", "-v", "error", "-y"] + quiet + change + ["-filter_complex", graph, "-map", "[out]",
                    "-c:v", "mpeg4", "-q:v", "3", path], check=True)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(path, text, mode=0o644):
    with open(path, "w") as file:
        file.write(text)
    os.chmod(path, mode)
    return path


def agent_config(folder, video, url, local, size):
    """One stream at 640x360 (the camera's size); at any other size two: evidence at the camera's
    size in H.264, and the 640x360 guidance copy (uplink.video) that local guidance and the server
    look at."""
    width, height = size.split("x")
    two_streams = size != GUIDANCE_SIZE
    copy = f"  video:\n    width: 640\n    height: 360\n    fps: 10\n" if two_streams else ""
    return write(os.path.join(folder, "agent.yaml"), f"""camera:
  source: file
  file: {video}
  width: {width}
  height: {height}
  fps: 10
encoder:
  preference: [{"libx264" if two_streams else "libx265"}]
recording:
  dir: {folder}/segments
uplink:
  url: {url}
  allowInsecure: true
  tokenFile: {folder}/token
{copy}speech:
  sink: wav:{folder}/speech
haptics:
  required: false
guidance:
  offlineAfterMs: 1000
offline:
  enabled: {"true" if local else "false"}
  repeatMs: 15000
log:
  level: info
""")


def parse_time(text):
    return datetime.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def utterance_starts(folder):
    """(start, file) of each utterance, in order: modification time less the length soxi reads."""
    speech = os.path.join(folder, "speech")
    starts = []
    for name in sorted(os.listdir(speech)) if os.path.isdir(speech) else []:
        if not name.endswith(".wav"):
            continue
        path = os.path.join(speech, name)
        length = float(subprocess.run(["soxi", "-D", path], capture_output=True, text=True, check=True).stdout)
        starts.append((os.stat(path).st_mtime_ns / 1e9 - length, name))
    return sorted(starts)


def run(case, binaries, cycles, keep, size):
    folder = tempfile.mkdtemp(prefix=f"road-to-voice-{case}-")
    video = footage(folder, "dark" if case == "dark" else "people", cycles, size)
    write(os.path.join(folder, "token"), TOKEN + "\n", 0o600)
    server = None
    if case == "server":
        write(os.path.join(folder, "tokens.yaml"), f"{TOKEN}: bench-car\n", 0o600)
        port = free_port()
        config = write(os.path.join(folder, "server.yaml"), f"server:\n  host: 127.0.0.1\n  port: {port}\n"
                       f"  tokensFile: {folder}/tokens.yaml\nanalyzer:\n  kind: vision\nledger: sqlite:{folder}/usage.sqlite\n")
        server_err = open(os.path.join(folder, "server.err"), "w")
        server = subprocess.Popen([os.path.join(binaries, "guidance-server"), "--config", config], stdout=subprocess.DEVNULL, stderr=server_err)
        deadline = time.monotonic() + 60
        while "listening on" not in open(server_err.name).read():
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("the server did not start:\n" + open(server_err.name).read())
            time.sleep(0.05)
        url = f"ws://127.0.0.1:{port}/v1/stream"
    else:
        # Nothing listens there: local guidance starts 1 s after the agent does.
        url = f"ws://127.0.0.1:{free_port()}/v1/stream"
    config = agent_config(folder, video, url, local=case != "server", size=size)
    with open(os.path.join(folder, "agent.out"), "w") as out, open(os.path.join(folder, "agent.err"), "w") as err:
        agent = subprocess.run([os.path.join(binaries, "dashcam-agent"), "record", "--config", config], stdout=out, stderr=err)
    if server:
        server.send_signal(signal.SIGTERM)
        server.wait()
    lines = [json.loads(line) for line in open(os.path.join(folder, "agent.out")) if line.startswith("{")]
    # With two streams each segment has two lines, the evidence's and its guidance copy's (same
    # seq and capturedAt): the evidence's are the recording's own.
    segments = sorted((line for line in lines if line.get("stream") != "guidance"),
                      key=lambda line: parse_time(line["capturedAt"]))
    starts = [start for start, _ in utterance_starts(folder)]
    delays, false_alarms, suppressed = [], 0, 0
    per_cycle = (QUIET_SECONDS + EVENT_SECONDS) // SEGMENT_SECONDS
    first_event = (LEAD_SECONDS + QUIET_SECONDS) // SEGMENT_SECONDS
    for cycle in range(cycles):
        index = cycle * per_cycle + first_event
        if index >= len(segments):
            break
        change = parse_time(segments[index]["capturedAt"])
        # Words that began in the quiet 10 s before the change (less 2 s for the last looks at
        # the change before): a false alarm, which also holds back the next warning for
        # offline.repeatMs (15 s), so the change after it is not measured.
        quiet = [start for start in starts if change - QUIET_SECONDS + 2 <= start < change]
        false_alarms += len(quiet)
        if case != "server" and quiet:
            suppressed += 1
            continue
        if case == "server":
            # Each segment of the change, from its end to the first sample said after it.
            marks = [parse_time(s["capturedAt"]) + s["durationMs"] / 1000 for s in segments[index:index + EVENT_SECONDS // SEGMENT_SECONDS]]
        else:
            marks = [change]
        for mark in marks:
            after = [start for start in starts if mark < start < mark + EVENT_SECONDS]
            if after:
                delays.append((after[0] - mark) * 1000)
            else:
                print(f"{case}: cycle {cycle}: nothing said within {EVENT_SECONDS} s of the change", file=sys.stderr)
    if agent.returncode != 0:
        print(f"{case}: the agent exited {agent.returncode}; see {folder}", file=sys.stderr)
        keep = True
    if keep:
        print(f"{case}: files kept in {folder}", file=sys.stderr)
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return delays, false_alarms, suppressed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=".build/release")
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--only", default="pedestrian,dark,server")
    parser.add_argument("--keep", action="store_true", help="keep each run's folder")
    parser.add_argument("--camera", default=GUIDANCE_SIZE,
                        help="the camera's WxH; other than 640x360, two streams: H.264 evidence at this size, "
                             "the 640x360 HEVC guidance copy that both kinds of guidance look at")
    args = parser.parse_args()
    if not os.path.exists(VTEST):
        sys.exit(f"needs {VTEST} (apt-get install opencv-doc)")
    if shutil.which("soxi") is None:
        sys.exit("needs soxi (apt-get install sox)")
    binaries = os.path.abspath(args.bin)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start; {args.cycles} changes per case; "
          f"camera {args.camera}" + ("" if args.camera == GUIDANCE_SIZE else f", guidance copy {GUIDANCE_SIZE}"))
    rows = []
    for case in args.only.split(","):
        delays, false_alarms, suppressed = run(case, binaries, args.cycles, args.keep, args.camera)
        print(f"{case}: " + " ".join(f"{d:.0f}" for d in delays) + f" ms; {false_alarms} spoken in quiet phases"
              f" ({suppressed} changes not measured: a warning within offline.repeatMs before them)")
        if delays:
            rows.append((case, len(delays), percentile(delays, 50), percentile(delays, 95), max(delays), false_alarms))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print("| case | changes measured | p50 | p95 | max | spoken while nothing was there |")
    print("|---|---|---|---|---|---|")
    for case, count, p50, p95, top, false_alarms in rows:
        print(f"| {case} | {count} | {p50:.0f} ms | {p95:.0f} ms | {top:.0f} ms | {false_alarms} |")


if __name__ == "__main__":
    main()
