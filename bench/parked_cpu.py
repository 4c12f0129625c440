#!/usr/bin/env python3
"""CPU of a parked car's idling against driving, at 640x360.

The release agent records a file source in real time (camera 640x360 at 10 fps, libx265 as the
package's default config has it); the ignition is a GPIO value file. Three modes:

  driving         ignition on: continuous recording (decode, encode, write 5-s segments) of
                  opencv-doc's vtest.avi (people walking in a street), scaled to 640x360;
  parked, still   ignition off (delay 0): the camera at parking.fps, the motion detector on
                  every frame, the pre-roll held in memory; the view is vtest's first picture
                  held still, so nothing is recorded: what a parked car costs almost always;
  parked, motion  the same with vtest's people walking: clips are recorded one after another.

CPU is the process's user + sys time from /proc/PID/stat over a window
that starts once the mode has settled (parked: the log says so; driving: after the second
segment), as a percentage of one core. A file source decodes H.264 too, which a V4L2 camera does
not: the parked figure is an upper bound.

    python3 bench/parked_cpu.py [--seconds 60] [--runs 3] [--agent .build/release/dashcam-agent] [--parked-fps 5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTEST = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def run(agent, folder, video, mode, seconds, parked_fps):
    ignition = os.path.join(folder, "ignition")
    with open(ignition, "w") as f:
        f.write("1\n" if mode == "driving" else "0\n")
    name = mode.replace(", ", "-")
    config = os.path.join(folder, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(f"""camera:
  source: file
  file: {video}
  width: 640
  height: 360
  fps: 10
  pace: realtime
recording:
  dir: {folder}/rec-{name}
speech:
  sink: wav:{folder}/speech
status:
  socket: {folder}/status.sock
offline:
  enabled: false
parking:
  ignition:
    line: {ignition}
    debounceMs: 0
  delaySeconds: 0
  fps: {parked_fps}
""")
    log = open(os.path.join(folder, f"{name}.log"), "w+")
    out = open(os.path.join(folder, f"{name}.jsonl"), "w+")
    proc = subprocess.Popen([agent, "record", "--config", config], stdout=out, stderr=log)
    try:
        def settled():
            if mode != "driving":
                log.seek(0)
                return "parked: continuous recording and streaming stopped" in log.read()
            out.seek(0)
            return len(out.read().splitlines()) >= 2
        if not wait_for(settled, 120):
            raise SystemExit(f"{mode}: did not settle; see {log.name}")
        before, start = cpu_seconds(proc.pid), time.monotonic()
        peak = 0.0
        while time.monotonic() - start < seconds:
            time.sleep(1)
            peak = max(peak, rss_mib(proc.pid))
        used, wall = cpu_seconds(proc.pid) - before, time.monotonic() - start
        out.seek(0)
        clips = sum('"parking":{' in line for line in out.read().splitlines())
        return 100 * used / wall, peak, clips
    finally:
        proc.terminate()
        proc.wait(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parked-fps", type=int, default=5)
    ap.add_argument("--agent", default=os.path.join(REPO, ".build", "release", "dashcam-agent"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="parked-cpu-") as folder:
        still = os.path.join(folder, "still-street.mp4")
        walking = os.path.join(folder, "walking.mp4")
        length = a.seconds + 60
        subprocess.run(["ffmpeg", "-v", "error", "-i", VTEST, "-frames:v", "1", "-vf", "scale=640:360", "-y",
                        os.path.join(folder, "street.png")], check=True)
        subprocess.run(["ffmpeg", "-v", "error", "-loop", "1", "-i", os.path.join(folder, "street.png"), "-t", str(length),
                        "-r", "10", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-y", still], check=True)
        # vtest is 79.5 s: played as often as the run needs.
        subprocess.run(["ffmpeg", "-v", "error", "-stream_loop", str(length // 79 + 1), "-i", VTEST, "-t", str(length),
                        "-vf", "scale=640:360", "-r", "10", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                        "-y", walking], check=True)
        videos = {"driving": walking, "parked, still": still, "parked, motion": walking}
        results = {mode: [] for mode in videos}
        for _ in range(a.runs):
            for mode, video in videos.items():
                cpu, rss, clips = run(a.agent, folder, video, mode, a.seconds, a.parked_fps)
                results[mode].append((cpu, rss, clips))
                print(f"{mode}: {cpu:.1f} % of a core, peak RSS {rss:.1f} MiB, {clips} clip(s)", file=sys.stderr)
        print(f"| mode (640x360, camera 10 fps, parked {a.parked_fps} fps) | CPU, % of one core (median of {a.runs}) | peak RSS | clips |")
        print("|---|---|---|---|")
        for mode, rows in results.items():
            print(f"| {mode} | {statistics.median(r[0] for r in rows):.1f} % | {statistics.median(r[1] for r in rows):.1f} MiB"
                  f" | {sum(r[2] for r in rows)} |")


if __name__ == "__main__":
    main()
