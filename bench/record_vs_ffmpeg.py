#!/usr/bin/env python3
"""The agent's `record` against the ffmpeg CLI doing the same job.

Both decode the same input file, encode it with the same libx265 parameters (ultrafast,
zerolatency, no B-frames, keyint = min-keyint = fps x 5, scenecut 0, closed GOP, forced IDR every
5 s, CRF 28) and write 5-second MP4 segments tagged hvc1. Runs alternate between the two; each
run's CPU time (user + sys) and peak RSS come from wait4()'s rusage. Prints a Markdown table.

    python3 bench/record_vs_ffmpeg.py [--runs 5] [--agent .build/release/dashcam-agent]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CASES = [
    # (label, width, height, fps, seconds of input)
    ("640x360@10", 640, 360, 10, 60),
    ("1280x720@30", 1280, 720, 30, 20),
]


def run_measured(argv):
    """Runs argv to completion; returns (cpu seconds, peak RSS in MiB, wall seconds)."""
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{stderr}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, wall


def make_input(folder, width, height, fps, seconds):
    path = os.path.join(folder, f"input-{width}x{height}-{fps}.mkv")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi",
                    "-i", f"testsrc2=size={width}x{height}:rate={fps}", "-t", str(seconds),
                    "-pix_fmt", "yuv420p", "-c:v", "mpeg4", "-q:v", "3", path], check=True)
    return path


def agent_command(agent, folder, source, width, height, fps):
    config = os.path.join(folder, f"agent-{width}x{height}.yaml")
    with open(config, "w") as file:
        file.write(f"camera:\n  source: file\n  file: {source}\n  width: {width}\n  height: {height}\n"
                   f"  fps: {fps}\n  pace: fast\nencoder:\n  preference: [libx265]\n  crf: 28\n"
                   f"  segmentSeconds: 5\nrecording:\n  dir: {folder}/agent-out\nlog:\n  level: error\n")
    return [agent, "record", "--config", config]


def ffmpeg_command(folder, source, fps):
    keyint = fps * 5
    return ["ffmpeg", "-v", "error", "-y", "-i", source,
            "-c:v", "libx265", "-preset", "ultrafast", "-tune", "zerolatency", "-crf", "28",
            "-x265-params", f"keyint={keyint}:min-keyint={keyint}:scenecut=0:open-gop=0:bframes=0:log-level=error",
            "-forced-idr", "1", "-force_key_frames", "expr:gte(t,n_forced*5)", "-tag:v", "hvc1",
            "-f", "segment", "-segment_time", "5", "-segment_format", "mp4", "-reset_timestamps", "1",
            os.path.join(folder, "ffmpeg-out", "%06d.mp4")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agent", default=".build/release/dashcam-agent")
    args = parser.parse_args()
    agent = os.path.abspath(args.agent)

    print(f"| case | tool | CPU s (median of {args.runs}) | peak RSS MiB (median) | wall s |")
    print("|---|---|---|---|---|")
    summary = []
    with tempfile.TemporaryDirectory() as folder:
        for label, width, height, fps, seconds in CASES:
            source = make_input(folder, width, height, fps, seconds)
            commands = {"agent": agent_command(agent, folder, source, width, height, fps),
                        "ffmpeg": ffmpeg_command(folder, source, fps)}
            results = {"agent": [], "ffmpeg": []}
            for _ in range(args.runs):
                for tool in ("agent", "ffmpeg"):  # alternate, so drift hits both alike
                    for sub in ("agent-out", "ffmpeg-out"):
                        shutil.rmtree(os.path.join(folder, sub), ignore_errors=True)
                        os.makedirs(os.path.join(folder, sub))
                    results[tool].append(run_measured(commands[tool]))
                    # The agent files segments by day: count files, not folder entries.
                    produced = sum(len(files) for _, _, files in os.walk(os.path.join(folder, f"{tool}-out")))
                    if produced != seconds // 5:
                        sys.exit(f"{tool} wrote {produced} segments for {label}, expected {seconds // 5}")
            medians = {}
            for tool in ("agent", "ffmpeg"):
                cpu = statistics.median(r[0] for r in results[tool])
                rss = statistics.median(r[1] for r in results[tool])
                wall = statistics.median(r[2] for r in results[tool])
                medians[tool] = (cpu, rss)
                print(f"| {label} | {tool} | {cpu:.2f} | {rss:.1f} | {wall:.2f} |")
            summary.append((label, medians["agent"][0] / medians["ffmpeg"][0], medians["agent"][1] / medians["ffmpeg"][1]))
    print()
    print("| case | CPU ratio agent/ffmpeg | RSS ratio agent/ffmpeg |")
    print("|---|---|---|")
    for label, cpu, rss in summary:
        print(f"| {label} | {cpu:.3f} | {rss:.3f} |")


if __name__ == "__main__":
    main()
