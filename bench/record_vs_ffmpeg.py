#!/usr/bin/env python3
"""The agent's `record` against the ffmpeg CLI doing the same job.

Both decode the same input file, encode it with the same libx265 parameters (ultrafast,
zerolatency, no B-frames, keyint = min-keyint = fps x 5, scenecut 0, closed GOP, forced IDR every
5 s, CRF 28) and write 5-second MP4 segments tagged hvc1. Runs alternate between the two; each
run's CPU time (user + sys) and peak RSS come from wait4()'s rusage. Prints a Markdown table.

The agent measured is the one the package ships: built by deploy/build-deb.sh (static Swift
standard library, lld, link order of deploy/dashcam-agent.order) in its own build folder,
.build-bench, so the shared .build is not locked meanwhile.

    python3 bench/record_vs_ffmpeg.py [--runs 5] [--agent PATH]   # PATH: measure that binary instead
    python3 bench/record_vs_ffmpeg.py --write-order               # profile, rewrite the link order, measure

--write-order runs the agent under callgrind on a short version of the first case and writes every
function of the binary that ran, the code a recording needs, to deploy/dashcam-agent.order; the
linker puts those functions next to each other. Needs valgrind.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from packaged_agent import build_agent, run_measured

CASES = [
    # (label, width, height, fps, seconds of input)
    ("640x360@10", 640, 360, 10, 60),
    ("1280x720@30", 1280, 720, 30, 20),
]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = os.path.join(REPO, "deploy", "dashcam-agent.order")


def make_input(folder, width, height, fps, seconds):
    path = os.path.join(folder, f"input-{width}x{height}-{fps}-{seconds}.mkv")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi",
                    "-i", f"testsrc2=size={width}x{height}:rate={fps}", "-t", str(seconds),
                    "-pix_fmt", "yuv420p", "-c:v", "mpeg4", "-q:v", "3", path], check=True)
    return path


def agent_command(agent, folder, source, width, height, fps, local=True):
    config = os.path.join(folder, f"agent-{width}x{height}-{'local' if local else 'nolocal'}.yaml")
    with open(config, "w") as file:
        file.write(f"camera:\n  source: file\n  file: {source}\n  width: {width}\n  height: {height}\n"
                   f"  fps: {fps}\n  pace: fast\nencoder:\n  preference: [libx265]\n  crf: 28\n"
                   f"  segmentSeconds: 5\nrecording:\n  dir: {folder}/agent-out\noffline:\n  enabled: {str(local).lower()}\n"
                   f"log:\n  level: error\n")
    return [agent, "record", "--config", config]


def ffmpeg_command(folder, source, fps):
    keyint = fps * 5
    return ["ffmpeg", "-v", "error", "-y", "-i", source,
            "-c:v", "libx265", "-preset", "ultrafast", "-tune", "zerolatency", "-crf", "28",
            "-x265-params", f"keyint={keyint}:min-keyint={keyint}:scenecut=0:open-gop=0:bframes=0:log-level=error",
            "-forced-idr", "1", "-force_key_frames", "expr:gte(t,n_forced*5)", "-tag:v", "hvc1",
            "-f", "segment", "-segment_time", "5", "-segment_format", "mp4", "-reset_timestamps", "1",
            os.path.join(folder, "ffmpeg-out", "%06d.mp4")]


def fresh_outputs(folder):
    for sub in ("agent-out", "ffmpeg-out"):
        shutil.rmtree(os.path.join(folder, sub), ignore_errors=True)
        os.makedirs(os.path.join(folder, sub))


def write_order(agent, folder):
    """Every function of `agent` that a short recording of each case runs, to ORDER."""
    # valgrind cannot read the toolchain's DWARF; the symbol table is all it needs.
    plain = os.path.join(folder, "dashcam-agent")
    subprocess.run(["objcopy", "--strip-debug", agent, plain], check=True)
    functions = {}
    # The smaller case only: both run the same code in the binary (the codecs are shared libraries),
    # and the larger one takes minutes under callgrind.
    for label, width, height, fps, _ in CASES[:1]:
        # Two segments and a cut-short third: the end-of-input path runs too.
        source = make_input(folder, width, height, fps, 12)
        fresh_outputs(folder)
        profile = os.path.join(folder, f"callgrind-{width}x{height}.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={profile}"]
                       + agent_command(plain, folder, source, width, height, fps),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        objects, names, current = {}, {}, None
        with open(profile, errors="replace") as file:
            for line in file:
                match = re.match(r"^(ob|cob|fn|cfn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
                if not match:
                    continue
                kind, ident, name = match.groups()
                table = objects if kind in ("ob", "cob") else names
                if name is not None:
                    table[ident] = name
                if kind == "ob":
                    current = objects.get(ident)
                elif kind == "fn" and current == plain:
                    # callgrind marks recursion levels as name'2; the symbol is the name.
                    symbol = re.sub(r"'\d+$", "", names[ident])
                    if not symbol.startswith("0x"):
                        functions.setdefault(symbol, None)
    with open(ORDER, "w") as file:
        file.write("".join(f"{symbol}\n" for symbol in functions))
    print(f"{len(functions)} functions written to {os.path.relpath(ORDER, REPO)}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agent", help="measure this binary instead of building the package's")
    parser.add_argument("--write-order", action="store_true", help="profile the agent and rewrite the link order first")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        if args.agent:
            agent = os.path.abspath(args.agent)
        else:
            agent = build_agent(folder)
            if args.write_order:
                write_order(agent, folder)
                agent = build_agent(folder)
        print(f"{os.cpu_count()} CPUs; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print()
        print(f"| case | tool | CPU s (median of {args.runs}) | peak RSS MiB (median) | wall s |")
        print("|---|---|---|---|---|")
        summary = []
        for label, width, height, fps, seconds in CASES:
            source = make_input(folder, width, height, fps, seconds)
            # The agent as shipped (local guidance on: it looks only once no server has answered
            # for guidance.offlineAfterMs, so OpenCV is never loaded here) and with it off.
            commands = {"agent": agent_command(agent, folder, source, width, height, fps),
                        "agent, local off": agent_command(agent, folder, source, width, height, fps, local=False),
                        "ffmpeg": ffmpeg_command(folder, source, fps)}
            results = {tool: [] for tool in commands}
            for _ in range(args.runs):
                for tool in commands:  # alternate, so drift hits all alike
                    fresh_outputs(folder)
                    results[tool].append(run_measured(commands[tool]))
                    # The agent files segments by day: count files, not folder entries.
                    out = "ffmpeg-out" if tool == "ffmpeg" else "agent-out"
                    produced = sum(name.endswith(".mp4") for _, _, files in os.walk(os.path.join(folder, out)) for name in files)
                    if produced != seconds // 5:
                        sys.exit(f"{tool} wrote {produced} segments for {label}, expected {seconds // 5}")
            medians = {}
            for tool in commands:
                cpu = statistics.median(r[0] for r in results[tool])
                rss = statistics.median(r[1] for r in results[tool])
                wall = statistics.median(r[2] for r in results[tool])
                medians[tool] = (cpu, rss)
                print(f"| {label} | {tool} | {cpu:.2f} | {rss:.1f} | {wall:.2f} |")
            for tool in ("agent", "agent, local off"):
                summary.append((f"{label}, {tool}", medians[tool][0] / medians["ffmpeg"][0], medians[tool][1] / medians["ffmpeg"][1]))
        print()
        print("| case | CPU ratio agent/ffmpeg | RSS ratio agent/ffmpeg |")
        print("|---|---|---|")
        for label, cpu, rss in summary:
            print(f"| {label} | {cpu:.3f} | {rss:.3f} |")
        print()
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
