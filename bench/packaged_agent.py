"""What the benches that set the agent against the ffmpeg CLI share: the agent built as the
package ships it, and a process measured to its end."""
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_agent(folder):
    """The release binary exactly as deploy/build-deb.sh links it, built in .build-bench (so the
    shared .build is not locked meanwhile); returns its path."""
    scratch = os.path.join(REPO, ".build-bench")
    env = dict(os.environ, DEB_SCRATCH=scratch, DEB_OUT=os.path.join(folder, "deb"), DEB_COMPRESSION="none")
    env.pop("AGENT_BIN", None)
    subprocess.run(["bash", os.path.join(REPO, "deploy", "build-deb.sh")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(scratch, "release", "dashcam-agent")


def run_measured(argv, stdout_path=os.devnull):
    """Runs argv to completion, its stdout into stdout_path; returns (CPU s, peak RSS MiB, wall s)
    from wait4(). Exits with its stderr if it failed."""
    start = time.monotonic()
    with open(stdout_path, "wb") as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - start
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed (exit {os.waitstatus_to_exitcode(status)}): {' '.join(argv)}\n{stderr}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, wall
