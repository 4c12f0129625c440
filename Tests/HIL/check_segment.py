#!/usr/bin/env python3
"""Checks one dashcam MP4 segment; the one copy of the HIL segment checks.

    check_segment.py FILE --fps 5 --seconds 5 [--width W --height H]
                     [--partial] [--record JSON_LINE]

Checks (each printed as `ok:`/`FAIL:`; exit 0 only if all pass):
  * top-level boxes tile the file exactly, `ftyp` first, `moov` before `mdat`
  * ffprobe reads it; video stream codec_name hevc, codec_tag_string hvc1 (--codec h264: h264, avc1)
    (and the width/height if given)
  * frames counted by decoding (ffprobe -count_frames) == fps*seconds,
    stream duration == seconds within one frame (1/fps)
  * exactly one keyframe, and it is the first frame (an I picture)

--partial: the segment may have fewer frames (closed early by a camera loss or
a shutdown, or frames dropped): 1 <= frames <= fps*seconds, and the duration
covers the frames (>= (frames-1)/fps) without exceeding the segment length
(<= seconds + 1/fps).

--exact: fps*seconds frames whatever the record says.

--record: the agent's JSON line for this segment; cross-checked against the
file (frames, bytes, sha256, durationMs within one frame), and `complete`
decides the mode: a complete segment (complete: true, endReason complete)
must be exact, an incomplete one is checked as --partial.

Only the Python standard library and ffprobe are used.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

FAILS = []


def ok(msg):
    print(f"  ok: {msg}")


def fail(msg):
    FAILS.append(msg)
    print(f"  FAIL: {msg}")


def check(cond, msg):
    (ok if cond else fail)(msg)
    return cond


def top_level_boxes(path):
    """[(type, offset, size)] of the top-level ISO-BMFF boxes, or raises ValueError."""
    boxes = []
    total = os.path.getsize(path)
    with open(path, "rb") as f:
        off = 0
        while off < total:
            f.seek(off)
            hdr = f.read(8)
            if len(hdr) < 8:
                raise ValueError(f"truncated box header at offset {off} (file is {total} bytes)")
            size = int.from_bytes(hdr[:4], "big")
            btype = hdr[4:8].decode("latin-1")
            if size == 1:
                ext = f.read(8)
                if len(ext) < 8:
                    raise ValueError(f"truncated largesize of '{btype}' at offset {off}")
                size = int.from_bytes(ext, "big")
            elif size == 0:
                size = total - off
            if size < 8 or off + size > total:
                raise ValueError(
                    f"box '{btype}' at offset {off} has size {size}, runs past the end ({total} bytes)")
            boxes.append((btype, off, size))
            off += size
    return boxes


def check_boxes(path):
    try:
        boxes = top_level_boxes(path)
    except (OSError, ValueError) as e:
        fail(f"box structure: {e}")
        return
    order = [b[0] for b in boxes]
    ok(f"top-level boxes tile the file: {' '.join(order)}")
    check(order and order[0] == "ftyp", f"first box is ftyp (got {order[0] if order else 'none'})")
    if "moov" not in order or "mdat" not in order:
        fail(f"moov and mdat both present (boxes: {order})")
        return
    check(order.index("moov") < order.index("mdat"),
          f"moov before mdat (moov #{order.index('moov')}, mdat #{order.index('mdat')})")


def ffprobe_json(args):
    p = subprocess.run(["ffprobe", "-v", "error", "-of", "json"] + args,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"ffprobe exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def as_float(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def check_stream(path, a, expected_frames, partial):
    frame_dur = 1.0 / a.fps
    try:
        # One pass (slow under TCG): decodes every frame, counts them and lists their types.
        info = ffprobe_json(["-count_frames", "-show_frames", "-select_streams", "v:0",
                             "-show_entries",
                             "stream=codec_name,codec_tag_string,width,height,nb_read_frames,duration"
                             ":format=duration:frame=key_frame,pict_type", path])
    except (RuntimeError, ValueError) as e:
        fail(f"ffprobe reads the file: {e}")
        return None
    streams = info.get("streams") or []
    if not check(len(streams) == 1, f"ffprobe reads the file, one video stream (found {len(streams)})"):
        return None
    s = streams[0]
    codec, tag = (a.codec, {"hevc": "hvc1", "h264": "avc1"}[a.codec])
    check(s.get("codec_name") == codec, f"codec_name {codec} (got {s.get('codec_name')})")
    check(s.get("codec_tag_string") == tag, f"codec_tag_string {tag} (got {s.get('codec_tag_string')})")
    if a.width:
        check(s.get("width") == a.width and s.get("height") == a.height,
              f"size {a.width}x{a.height} (got {s.get('width')}x{s.get('height')})")
    frames = int(s.get("nb_read_frames") or 0)
    duration = as_float(s.get("duration"))
    if duration is None:
        duration = as_float((info.get("format") or {}).get("duration"))
    eps = 0.001  # rounding of timescale units
    if duration is None:
        fail("duration readable")
    if partial:
        check(1 <= frames <= expected_frames,
              f"decoded frames 1..{expected_frames} (partial segment) (got {frames})")
        if duration is not None:
            lo, hi = (frames - 1) * frame_dur, a.seconds + frame_dur
            check(lo - eps <= duration <= hi + eps,
                  f"duration between {lo:.3f} and {hi:.3f} s (got {duration:.3f})")
    else:
        check(frames == expected_frames, f"decoded frames == {expected_frames} (got {frames})")
        if duration is not None:
            check(abs(duration - a.seconds) <= frame_dur + eps,
                  f"duration {a.seconds:.3f} s within one frame ({frame_dur:.3f} s) (got {duration:.3f})")
    a.measured_duration = duration

    flist = info.get("frames") or []
    keys = [i for i, f in enumerate(flist) if int(f.get("key_frame", 0)) == 1]
    check(len(flist) == frames, f"-show_frames lists the {frames} decoded frames (got {len(flist)})")
    if flist:
        check(keys[:1] == [0] and flist[0].get("pict_type") == "I",
              f"first frame is a keyframe (key_frame={flist[0].get('key_frame')}, "
              f"pict_type={flist[0].get('pict_type')})")
    check(len(keys) == 1, f"exactly one keyframe (got {len(keys)} at frames {keys[:10]})")
    return frames


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--fps", type=int, required=True)
    ap.add_argument("--seconds", type=int, required=True)
    ap.add_argument("--width", type=int)
    ap.add_argument("--height", type=int)
    ap.add_argument("--partial", action="store_true")
    ap.add_argument("--codec", choices=["hevc", "h264"], default="hevc",
                    help="the evidence stream may be H.264 (avc1); HEVC (hvc1) otherwise")
    ap.add_argument("--exact", action="store_true",
                    help="fps*seconds frames even if the record says incomplete")
    ap.add_argument("--record", help="the agent's JSON line for this segment")
    a = ap.parse_args()

    expected = a.fps * a.seconds
    print(f"segment {os.path.basename(a.file)}")
    if not os.path.isfile(a.file):
        fail("file exists")
        return 1
    size = os.path.getsize(a.file)

    rec = None
    partial = a.partial
    if a.record is not None:
        try:
            rec = json.loads(a.record)
        except ValueError as e:
            fail(f"record is JSON: {e}")
            rec = None
        if rec is not None:
            missing = [k for k in ("seq", "frames", "durationMs", "droppedFrames", "complete",
                                   "endReason", "bytes", "sha256", "encoder") if k not in rec]
            check(not missing, f"record has the contract's fields (missing: {missing or 'none'})")
            check(rec.get("endReason") in ("complete", "cameraLost", "cameraStalled", "endOfInput", "parked",
                                           "shutdown"),
                  f"record's endReason is a known one (got {rec.get('endReason')})")
            check(isinstance(rec.get("complete"), bool),
                  f"record's complete is a bool (got {rec.get('complete')!r})")
            if rec.get("complete") is True:
                partial = False
                check(rec.get("endReason") == "complete",
                      f"complete record has endReason complete (got {rec.get('endReason')})")
            else:
                partial = True
    if a.exact:
        partial = False
    if rec is not None:
        print(f"  record: complete={rec.get('complete')} endReason={rec.get('endReason')} "
              f"frames={rec.get('frames')} droppedFrames={rec.get('droppedFrames')} "
              f"durationMs={rec.get('durationMs')}")
    print(f"  mode: {'partial (fewer frames allowed)' if partial else 'complete (exact)'}, {size} bytes")

    check_boxes(a.file)
    frames = check_stream(a.file, a, expected, partial)

    if rec is not None:
        check(rec.get("bytes") == size, f"record bytes == file size {size} (got {rec.get('bytes')})")
        with open(a.file, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        check(str(rec.get("sha256", "")).lower() == digest,
              f"record sha256 == file's ({digest[:16]}..., got {str(rec.get('sha256'))[:16]}...)")
        if frames is not None:
            check(rec.get("frames") == frames, f"record frames == decoded frames {frames} "
                                               f"(got {rec.get('frames')})")
        dur = getattr(a, "measured_duration", None)
        if dur is not None and isinstance(rec.get("durationMs"), (int, float)):
            check(abs(rec["durationMs"] / 1000 - dur) <= 1.0 / a.fps + 0.001,
                  f"record durationMs within one frame of the file's {dur:.3f} s "
                  f"(got {rec['durationMs']})")

    print(f"  => {'PASS' if not FAILS else 'FAIL'} ({len(FAILS)} failed checks)")
    return 0 if not FAILS else 1


if __name__ == "__main__":
    sys.exit(main())
