#!/usr/bin/env python3
"""Two streams from one camera: the agent's `record` against the ffmpeg CLI doing the same job.

The camera is a 1920x1080@30 file played at real-time pace. Both tools make from it, in one
process, with one decode:

- evidence: every frame at 1920x1080@30, libx264 (ultrafast, zerolatency, no B-frames,
  keyint = min-keyint = 150, scenecut 0, closed GOP, forced IDR every 5 s, CRF 23), 5-second MP4
  segments tagged avc1;
- guidance: every third frame, scaled once (libswscale, bilinear) to 640x360, libx265 (the same
  GOP rules at 10 fps, CRF 28), 5-second MP4 segments tagged hvc1.

The agent gets `uplink.video.*` set and no uplink.url, so its guidance segments are made and
printed as JSON lines but not written; ffmpeg (`-re`, `split`, `fps=10,scale=640:360`, two
`segment` muxers) writes both. Local guidance is off in the agent: ffmpeg has nothing like it.
Runs alternate between the two; each run's CPU time (user + sys) and peak RSS come from wait4()'s
rusage. Then the evidence's quality: SSIM (ffmpeg's `ssim` filter, frame by frame in order)
of each tool's evidence segments, concatenated, against the source, and the size of both streams
an hour. Prints Markdown tables.

What differs between the two besides the code that runs: the agent's MP4s reserve room for
`moov` at the front (8192 + 32 bytes a frame, the unused part a `free` box), ffmpeg's put `moov`
at the end, so each agent segment is a few KB bigger for the same frames; and the guidance
branches take different frames of each three: the agent the first (camera frames 0, 3, 6, ...),
ffmpeg's `fps` filter the second (1, 4, 7, ... with these timestamps), which on the interpolated
source below are in-between frames, a little cheaper to encode than vtest's own.

The source is real footage when the machine has it: OpenCV's sample vtest.avi (opencv-doc; a
fixed camera over a car park with people walking, 768x576 at 10 fps), cropped to 16:9, brought
to 30 fps by motion-compensated interpolation (minterpolate) and scaled to 1920x1080; else
testsrc2. `--source FILE` takes a 1920x1080@30 file of your own instead.

The agent measured is the one the package ships: built by deploy/build-deb.sh in its own build
folder, .build-bench, so the shared .build is not locked meanwhile.

    python3 bench/two_streams_vs_ffmpeg.py [--runs 3] [--seconds 60] [--agent PATH] [--source FILE]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from packaged_agent import build_agent, run_measured

WIDTH, HEIGHT, FPS = 1920, 1080, 30
SMALL_WIDTH, SMALL_HEIGHT, SMALL_FPS = 640, 360, 10
EVIDENCE_CRF, GUIDANCE_CRF = 23, 28
SEGMENT_SECONDS = 5
VTEST = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_source(folder, seconds, synthetic):
    """A 1920x1080@30 file of `seconds`; returns (path, description)."""
    path = os.path.join(folder, f"source-{WIDTH}x{HEIGHT}-{FPS}-{seconds}.mkv")
    if not synthetic and os.path.exists(VTEST):
        # 768x576 (4:3) -> 768x432 (16:9, the middle), 10 -> 30 fps with motion-compensated
        # in-between frames (duplicates would make every third frame nearly free to encode),
        # then 2.5x up with lanczos.
        source = ["-i", VTEST]
        filters = f"crop=768:432,minterpolate=fps={FPS}:mi_mode=mci,scale={WIDTH}:{HEIGHT}:flags=lanczos,setsar=1"
        what = (f"real footage: opencv-doc's vtest.avi (768x576@10, fixed camera, people walking), "
                f"cropped to 16:9, interpolated to {FPS} fps (minterpolate mci), scaled to {WIDTH}x{HEIGHT} (lanczos)")
    else:
        source = ["-f", "lavfi", "-i", f"testsrc2=size={WIDTH}x{HEIGHT}:rate={FPS}"]
        filters = "null"
        what = f"synthetic: ffmpeg's testsrc2 at {WIDTH}x{HEIGHT}@{FPS} (no real footage on this machine)"
    # MPEG-4 part 2 at q 2: cheap to decode, so decoding weighs little in either tool's CPU time.
    subprocess.run(["ffmpeg", "-v", "error", "-y"] + source + ["-vf", filters, "-t", str(seconds), "-r", str(FPS),
                    "-pix_fmt", "yuv420p", "-c:v", "mpeg4", "-q:v", "2", path], check=True)
    return path, what + f", {seconds} s, stored as MPEG-4 part 2 q 2"


def agent_command(agent, folder, source):
    config = os.path.join(folder, "agent-two-streams.yaml")
    with open(config, "w") as file:
        file.write(f"camera:\n  source: file\n  file: {source}\n  pace: realtime\n"
                   f"  width: {WIDTH}\n  height: {HEIGHT}\n  fps: {FPS}\n"
                   f"encoder:\n  preference: [libx264]\n  crf: {EVIDENCE_CRF}\n  segmentSeconds: {SEGMENT_SECONDS}\n"
                   f"recording:\n  dir: {folder}/agent-out\n"
                   f"uplink:\n  video:\n    width: {SMALL_WIDTH}\n    height: {SMALL_HEIGHT}\n    fps: {SMALL_FPS}\n"
                   f"    crf: {GUIDANCE_CRF}\n"
                   f"offline:\n  enabled: false\nlog:\n  level: error\n")
    return [agent, "record", "--config", config]


def ffmpeg_command(folder, source):
    def encoder(codec, crf, fps, tag):
        keyint = fps * SEGMENT_SECONDS
        params = f"keyint={keyint}:min-keyint={keyint}:scenecut=0:open-gop=0:bframes=0"
        if codec == "libx265":
            return ["-c:v", codec, "-preset", "ultrafast", "-tune", "zerolatency", "-crf", str(crf),
                    "-x265-params", params + ":log-level=error", "-forced-idr", "1",
                    "-force_key_frames", f"expr:gte(t,n_forced*{SEGMENT_SECONDS})", "-tag:v", tag]
        return ["-c:v", codec, "-preset", "ultrafast", "-tune", "zerolatency", "-crf", str(crf),
                "-x264-params", params, "-forced-idr", "1",
                "-force_key_frames", f"expr:gte(t,n_forced*{SEGMENT_SECONDS})", "-tag:v", tag]

    def segments(sub):
        return ["-f", "segment", "-segment_time", str(SEGMENT_SECONDS), "-segment_format", "mp4",
                "-reset_timestamps", "1", os.path.join(folder, sub, "%06d.mp4")]

    # One decode, split in two; the small branch decimated first, so only the frames it keeps are
    # scaled (the agent does the same).
    graph = (f"[0:v]split=2[full][small];"
             f"[small]fps={SMALL_FPS},scale={SMALL_WIDTH}:{SMALL_HEIGHT}:flags=bilinear[guidance]")
    return (["ffmpeg", "-v", "error", "-y", "-re", "-i", source, "-filter_complex", graph]
            + ["-map", "[full]"] + encoder("libx264", EVIDENCE_CRF, FPS, "avc1") + segments("ffmpeg-evidence")
            + ["-map", "[guidance]"] + encoder("libx265", GUIDANCE_CRF, SMALL_FPS, "hvc1") + segments("ffmpeg-guidance"))


def fresh_outputs(folder):
    for sub in ("agent-out", "ffmpeg-evidence", "ffmpeg-guidance"):
        shutil.rmtree(os.path.join(folder, sub), ignore_errors=True)
        os.makedirs(os.path.join(folder, sub))


def probe_segment(path):
    """(video packets, duration s) of one MP4."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_packets",
                          "-show_entries", "stream=nb_read_packets:format=duration", "-of", "json", path],
                         check=True, capture_output=True, text=True).stdout
    info = json.loads(out)
    return int(info["streams"][0]["nb_read_packets"]), float(info["format"]["duration"])


def mp4s(folder):
    return sorted(os.path.join(root, name) for root, _, files in os.walk(folder) for name in files if name.endswith(".mp4"))


def agent_result(folder, stdout_path):
    """What the agent's JSON lines say, per stream, and its evidence files in order."""
    lines = []
    with open(stdout_path) as file:
        for line in file:
            line = line.strip()
            if line.startswith("{"):
                lines.append(json.loads(line))
    result = {}
    for stream in ("evidence", "guidance"):
        mine = sorted((l for l in lines if l.get("stream") == stream), key=lambda l: l["seq"])
        result[stream] = {
            "segments": len(mine),
            "frames": sum(l["frames"] for l in mine),
            "dropped": sum(l["droppedFrames"] for l in mine),
            "bytes": sum(l["bytes"] for l in mine),
            "seconds": sum(l["durationMs"] for l in mine) / 1000,
            # `file` is relative to recording.dir.
            "files": [os.path.join(folder, "agent-out", l["file"]) for l in mine if l.get("file")],
            "encoder": sorted({l.get("encoder", "?") for l in mine}),
            "partnered": sum(1 for l in mine if l.get("partner")),
        }
    others = [l for l in lines if l.get("stream") not in ("evidence", "guidance")]
    if others:
        print(f"note: {len(others)} JSON lines of no stream: {others[0]}", file=sys.stderr)
    # The files as written: the JSON's count against the MP4s' own.
    on_disk = mp4s(os.path.join(folder, "agent-out"))
    packets = sum(probe_segment(path)[0] for path in result["evidence"]["files"])
    result["evidence"]["packets"] = packets
    result["evidence"]["filesOnDisk"] = len(on_disk)
    return result


def ffmpeg_result(folder):
    result = {}
    for stream in ("evidence", "guidance"):
        files = mp4s(os.path.join(folder, f"ffmpeg-{stream}"))
        probes = [probe_segment(path) for path in files]
        result[stream] = {
            "segments": len(files),
            "frames": sum(p[0] for p in probes),
            "dropped": None,
            "bytes": sum(os.path.getsize(path) for path in files),
            "seconds": sum(p[1] for p in probes),
            "files": files,
        }
    return result


def ssim(files, source, folder, label):
    """(All, Y, dB, frames compared) of `files` played one after another against `source`."""
    listing = os.path.join(folder, f"concat-{label}.txt")
    stats = os.path.join(folder, f"ssim-{label}.log")
    with open(listing, "w") as file:
        file.write("".join(f"file '{path}'\n" for path in files))
    # Frame n against frame n: both renumbered, so the segments' own timestamps do not matter.
    graph = (f"[0:v]settb=1/{FPS},setpts=N[a];[1:v]settb=1/{FPS},setpts=N[b];"
             f"[a][b]ssim=shortest=1:stats_file={stats}")
    run = subprocess.run(["ffmpeg", "-hide_banner", "-nostats", "-f", "concat", "-safe", "0", "-i", listing,
                          "-i", source, "-lavfi", graph, "-f", "null", "-"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"ssim of {label} failed:\n{run.stderr}")
    match = re.search(r"SSIM Y:([\d.]+) .* All:([\d.]+) \(([\d.]+|inf)\)", run.stderr)
    if not match:
        sys.exit(f"no SSIM in ffmpeg's output for {label}:\n{run.stderr}")
    with open(stats) as file:
        frames = sum(1 for line in file if line.startswith("n:"))
    return float(match.group(2)), float(match.group(1)), match.group(3), frames


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=60, help="length of the source")
    parser.add_argument("--agent", help="measure this binary instead of building the package's")
    parser.add_argument("--source", help=f"a {WIDTH}x{HEIGHT}@{FPS} file to play instead of the one made here")
    parser.add_argument("--synthetic", action="store_true", help="testsrc2 even when real footage is on the machine")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        agent = os.path.abspath(args.agent) if args.agent else build_agent(folder)
        if args.source:
            source, what = os.path.abspath(args.source), f"given: {os.path.basename(args.source)}"
        else:
            source, what = make_source(folder, args.seconds, args.synthetic)
        source_frames, source_seconds = probe_segment(source)
        expected_segments = -(-args.seconds // SEGMENT_SECONDS)
        print(f"{os.cpu_count()} CPUs; load average before: {load()}")
        print(f"source: {what}; {source_frames} frames")
        print()

        commands = {"agent": agent_command(agent, folder, source), "ffmpeg": ffmpeg_command(folder, source)}
        runs = {tool: [] for tool in commands}
        kept = {}
        print("| run | tool | CPU s | peak RSS MiB | wall s | evidence frames | guidance frames | "
              "evidence dropped | load average (1 min) at start |")
        print("|---|---|---|---|---|---|---|---|---|")
        for index in range(args.runs):
            for tool in commands:  # alternate, so drift hits both alike
                fresh_outputs(folder)
                started_load = os.getloadavg()[0]
                stdout_path = os.path.join(folder, f"{tool}-stdout.jsonl")
                cpu, rss, wall = run_measured(commands[tool], stdout_path)
                result = agent_result(folder, stdout_path) if tool == "agent" else ffmpeg_result(folder)
                for stream in ("evidence", "guidance"):
                    if result[stream]["segments"] != expected_segments:
                        print(f"note: {tool} run {index + 1} made {result[stream]['segments']} {stream} segments, "
                              f"expected {expected_segments}", file=sys.stderr)
                runs[tool].append((cpu, rss, wall, result))
                dropped = result["evidence"]["dropped"]
                print(f"| {index + 1} | {tool} | {cpu:.2f} | {rss:.1f} | {wall:.1f} | {result['evidence']['frames']} | "
                      f"{result['guidance']['frames']} | {'-' if dropped is None else dropped} | {started_load:.2f} |",
                      flush=True)
                if index == 0:
                    # The first run's evidence, for the quality measurement after the timed runs.
                    keep = os.path.join(folder, f"kept-{tool}")
                    os.makedirs(keep)
                    moved = []
                    for number, path in enumerate(result["evidence"]["files"]):
                        target = os.path.join(keep, f"{number:06d}.mp4")
                        shutil.move(path, target)
                        moved.append(target)
                    kept[tool] = (moved, result)

        print()
        print(f"| tool | CPU s (median of {args.runs}) | peak RSS MiB (median) | wall s (median) | "
              f"evidence frames (of {source_frames}) | guidance frames | evidence frames dropped (sum) | "
              f"guidance frames dropped (sum) |")
        print("|---|---|---|---|---|---|---|---|")
        medians = {}
        for tool in commands:
            cpu = statistics.median(r[0] for r in runs[tool])
            rss = statistics.median(r[1] for r in runs[tool])
            wall = statistics.median(r[2] for r in runs[tool])
            medians[tool] = (cpu, rss)
            evidence = "/".join(str(r[3]["evidence"]["frames"]) for r in runs[tool])
            guidance = "/".join(str(r[3]["guidance"]["frames"]) for r in runs[tool])
            if tool == "agent":
                dropped = "/".join(str(r[3]["evidence"]["dropped"]) for r in runs[tool])
                small_dropped = "/".join(str(r[3]["guidance"]["dropped"]) for r in runs[tool])
            else:
                dropped = small_dropped = "n/a (-re waits)"
            print(f"| {tool} | {cpu:.2f} | {rss:.1f} | {wall:.1f} | {evidence} | {guidance} | {dropped} | {small_dropped} |")
        print()
        print("| | agent / ffmpeg |")
        print("|---|---|")
        print(f"| CPU | {medians['agent'][0] / medians['ffmpeg'][0]:.3f} |")
        print(f"| peak RSS | {medians['agent'][1] / medians['ffmpeg'][1]:.3f} |")
        agent_runs = [r[3] for r in runs["agent"]]
        mismatched = [(r["evidence"]["frames"], r["evidence"]["packets"]) for r in agent_runs
                      if r["evidence"]["frames"] != r["evidence"]["packets"]]
        if mismatched:
            print(f"\nnote: the agent's evidence JSON frames differ from its MP4s' packets: {mismatched}")
        print(f"\nload average after the timed runs: {load()}")

        print()
        print(f"| evidence ({WIDTH}x{HEIGHT}@{FPS}, libx264 CRF {EVIDENCE_CRF}), first run | SSIM All | SSIM Y | "
              f"SSIM dB | frames compared | kbit/s | MB per hour |")
        print("|---|---|---|---|---|---|---|")
        for tool in commands:
            files, result = kept[tool]
            all_, y, db, compared = ssim(files, source, folder, tool)
            evidence = result["evidence"]
            kbps = evidence["bytes"] * 8 / evidence["seconds"] / 1000
            per_hour = evidence["bytes"] / evidence["seconds"] * 3600 / 1e6
            print(f"| {tool} | {all_:.4f} | {y:.4f} | {db} | {compared} | {kbps:.0f} | {per_hour:.0f} |", flush=True)
        print()
        print(f"| guidance ({SMALL_WIDTH}x{SMALL_HEIGHT}@{SMALL_FPS}, libx265 CRF {GUIDANCE_CRF}), median of "
              f"{args.runs} | kbit/s | MB per hour | bytes | seconds |")
        print("|---|---|---|---|---|")
        for tool in commands:
            rates = [r[3]["guidance"]["bytes"] * 8 / r[3]["guidance"]["seconds"] / 1000 for r in runs[tool]]
            kbps = statistics.median(rates)
            middle = sorted(runs[tool], key=lambda r: r[3]["guidance"]["bytes"] / r[3]["guidance"]["seconds"])[len(rates) // 2][3]
            print(f"| {tool} | {kbps:.0f} | {kbps * 1000 / 8 * 3600 / 1e6:.1f} | {middle['guidance']['bytes']} | "
                  f"{middle['guidance']['seconds']:.1f} |")
        print(f"\nagent encoders: evidence {kept['agent'][1]['evidence']['encoder']}, "
              f"guidance {kept['agent'][1]['guidance']['encoder']}; segments with a partner: "
              f"evidence {kept['agent'][1]['evidence']['partnered']}, guidance {kept['agent'][1]['guidance']['partnered']}")
        print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
