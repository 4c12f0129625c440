#!/usr/bin/env python3
"""Writes the seed corpus of bench/fuzz.sh into fuzz/corpus/: real segments (ffmpeg's libx265 and
libx264), the messages an agent sends (in the record format of fuzz/Harness/Messages.swift) and
the bodies a model service answers with. Run again after a change to a format; the files are
committed, so a fuzz run needs neither ffmpeg nor this script.

    python3 fuzz/make-corpus.py
"""
import base64
import hashlib
import json
import os
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

# Messages.sizes in fuzz/Harness/Messages.swift: byte 0 of an input picks one.
SIZES = [1, 100, 4096, 65_535, 65_536, 65_537, 200_000]
CHUNK = 64 * 1024


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# MARK: - Segments

SEGMENTS = {
    # name: (codec arguments, lavfi source, seconds)
    "hevc-160x90-10fps-1s.mp4": (["-c:v", "libx265", "-preset", "ultrafast", "-tag:v", "hvc1"], "testsrc2=size=160x90:rate=10", "1"),
    "hevc-128x72-5fps-2s-faststart.mp4": (["-c:v", "libx265", "-preset", "ultrafast", "-tag:v", "hvc1", "-movflags", "+faststart"],
                                          "testsrc2=size=128x72:rate=5", "2"),
    "hevc-64x36-1frame.mp4": (["-c:v", "libx265", "-preset", "ultrafast", "-tag:v", "hvc1", "-frames:v", "1"], "testsrc2=size=64x36:rate=10", "1"),
    "h264-160x90-10fps-1s.mp4": (["-c:v", "libx264", "-preset", "ultrafast", "-crf", "30", "-pix_fmt", "yuv420p"], "testsrc2=size=160x90:rate=10", "1"),
}


def segments():
    made = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, (codec, source, seconds) in SEGMENTS.items():
            path = os.path.join(scratch, name)
            arguments = ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", source, "-t", seconds, *codec]
            if "libx265" in codec:
                arguments += ["-x265-params", "log-level=error"]
            subprocess.run(arguments + ["-map_metadata", "-1", "-fflags", "+bitexact", "-y", path], check=True)
            probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=nb_frames,duration",
                                    "-of", "json", path], check=True, capture_output=True, text=True)
            stream = json.loads(probe.stdout)["streams"][0]
            with open(path, "rb") as f:
                made[name] = (f.read(), int(stream["nb_frames"]), round(float(stream["duration"]) * 1000))
            write("segments", name, made[name][0])
    return made


# MARK: - Messages

def text(s, template=False):
    data = s.encode()
    return bytes([2 if template else 0]) + struct.pack("<H", len(data)) + data


def binary(data):
    return bytes([1]) + struct.pack("<H", len(data)) + data


def filler(count, byte):
    return bytes([3]) + struct.pack("<I", count)[:3] + bytes([byte])


def compact(obj):
    # As the agent writes it: JSONEncoder with sorted keys, no spaces.
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


HELLO = compact({
    "type": "hello", "protocol": 1, "device": "car-7", "locale": "ko-KR", "agent": "0.1.0",
    "stream": "3f2b8c1e-9d4a-4e6f-a1b2-7c8d9e0f1a2b",
    "video": {"codec": "hevc", "container": "mp4", "width": 640, "height": 360, "fps": 10, "segmentMs": 5000},
})


def header(seq, segment, chunked=True, **overrides):
    """A segment's header as the agent writes it; `segment` is (bytes, frames, milliseconds)."""
    payload, frames, milliseconds = segment
    fields = {
        "type": "segment", "seq": seq, "capturedAt": "2026-11-22T04:17:17.569Z", "durationMs": milliseconds, "frames": frames,
        "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest(),
    }
    if chunked:
        fields["chunks"] = (len(payload) + CHUNK - 1) // CHUNK
    else:
        fields["data"] = base64.b64encode(payload).decode()
    fields.update(overrides)
    return compact(fields)


def chunks(data):
    return b"".join(binary(data[i:i + CHUNK]) for i in range(0, len(data), CHUNK))


def size(limit):
    return bytes([SIZES.index(limit)])


INCIDENT = {"type": "incident", "id": "20261126T080230.822Z", "at": "2026-11-26T08:02:30.822Z", "from": "2026-11-26T08:02:20.822Z",
            "to": "2026-11-26T08:02:40.822Z", "peakG": 2.41, "seqs": [1, 2, 3], "final": False}


CLIP = {"type": "clip", "id": "20261126T080230.822Z", "kind": "incident", "at": "2026-11-26T08:02:30.822Z",
        "from": "2026-11-26T08:02:20.822Z", "to": "2026-11-26T08:02:40.822Z", "clock": "synced", "peakG": 2.41, "triggerMs": 10000,
        "gps": [{"t": "2026-11-26T08:02:30Z", "mode": 3, "lat": 37.5665, "lon": 126.978, "speed": 13.89}]}


def clip_part(offset, count):
    return {"type": "clip_part", "id": CLIP["id"], "name": "seg-000001.mp4", "offset": offset, "bytes": count}


def messages(mp4s):
    small = mp4s["hevc-64x36-1frame.mp4"]
    clip = mp4s["hevc-160x90-10fps-1s.mp4"]
    h264 = mp4s["h264-160x90-10fps-1s.mp4"]
    write("messages", "hello", size(65_536) + text(HELLO))
    write("messages", "hello-segment-chunked", size(200_000) + text(HELLO) + text(header(1, clip)) + chunks(clip[0]))
    write("messages", "hello-segment-h264", size(65_536) + text(HELLO) + text(header(1, h264)) + chunks(h264[0]))
    # Refused: base64 in the header (agents of an earlier release), a header that disagrees with its MP4.
    write("messages", "hello-segment-base64", size(65_536) + text(HELLO) + text(header(1, small, chunked=False)))
    write("messages", "hello-two-segments", size(200_000) + text(HELLO) + text(header(1, small)) + chunks(small[0])
          + text(header(2, clip, frames=49)) + chunks(clip[0]))
    # Templates: the harness fills in the payload's SHA-256, size, chunk count and base64.
    template = compact({"type": "segment", "seq": 3, "capturedAt": "2026-11-22T04:17:22.569Z", "durationMs": 5000, "frames": 50,
                        "bytes": 0, "sha256": "", "chunks": 0}).replace('"bytes":0', '"bytes":$LEN') \
        .replace('"sha256":""', '"sha256":"$SHA"').replace('"chunks":0', '"chunks":$CHUNKS')
    write("messages", "template-two-full-chunks", size(200_000) + text(HELLO) + text(template, template=True)
          + filler(CHUNK, 0x41) + filler(CHUNK, 0x42) + binary(b"tail"))
    write("messages", "template-one-chunk", size(4096) + text(HELLO) + text(template, template=True) + binary(b"\x00\x00\x00\x18ftypmp42"))
    # A real segment's bytes under a template header whose frames and duration are its own.
    write("messages", "template-real-segment", size(65_536) + text(HELLO)
          + text(template.replace('"durationMs":5000', f'"durationMs":{small[2]}').replace('"frames":50', f'"frames":{small[1]}'), template=True)
          + binary(small[0]))
    base64_template = compact({"type": "segment", "seq": 4, "capturedAt": "2026-11-22T04:17:27.569Z", "durationMs": 1, "frames": 1,
                               "bytes": 0, "sha256": "", "data": ""}).replace('"bytes":0', '"bytes":$LEN') \
        .replace('"sha256":""', '"sha256":"$SHA"').replace('"data":""', '"data":"$B64"')
    write("messages", "template-base64", size(100) + text(HELLO) + text(base64_template, template=True) + binary(b"0123456789"))
    # Ways off the path: a short segment then the next header, an overrun, a second hello, an
    # unknown type, chunks without a header, binary before hello, a hello the server refuses.
    write("messages", "incomplete-then-next", size(200_000) + text(HELLO) + text(header(5, (clip[0] * 7, 70, 7000)))
          + chunks(clip[0]) + text(header(6, small)) + chunks(small[0]))
    write("messages", "overrun", size(65_537) + text(HELLO) + text(header(7, small)) + binary(small[0] + b"!") + binary(b"more"))
    write("messages", "out-of-order", size(65_536) + text(HELLO) + text(HELLO) + text(compact({"type": "ping", "seq": 1}))
          + binary(b"stray") + text("not json"))
    write("messages", "binary-first", size(1) + binary(b"\x00") + text(HELLO))
    write("messages", "hello-refused", size(65_536) + text(HELLO.replace('"segmentMs":5000', '"segmentMs":0')))
    write("messages", "incident", size(4096) + text(HELLO) + text(compact(INCIDENT))
          + text(compact(dict(INCIDENT, final=True, seqs=[1, 2, 3, 4, 5, 6]))) + text(compact(dict(INCIDENT, id="../x")))
          + text(compact(dict(INCIDENT, to="2026-11-26T09:02:40.822Z"))) + text(compact(dict(INCIDENT, peakG=-1))))
    # A clip: announced, one file in two parts (the second re-sent, and one of the wrong length),
    # then announcements and parts that break a rule.
    payload = clip[0]
    half = len(payload) // 2
    announced = dict(CLIP, files=[{"name": "seg-000001.mp4", "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}])
    write("messages", "clip", size(4096) + text(HELLO) + text(compact(announced))
          + text(compact(clip_part(0, half))) + binary(payload[:half])
          + text(compact(clip_part(half, len(payload) - half))) + binary(payload[half:])
          + text(compact(clip_part(0, half))) + binary(payload[:half])
          + text(compact(clip_part(0, 10))) + binary(b"short")
          + text(compact(dict(announced, id=".."))) + text(compact(dict(announced, kind="crash")))
          + text(compact(dict(announced, files=[{"name": "../x.mp4", "bytes": 1, "sha256": "0" * 64}])))
          + text(compact(clip_part(-1, 3))) + binary(b"abc") + text(compact(dict(clip_part(0, 3), name="clip.json"))) + binary(b"abc"))
    write("messages", "rejected-headers", size(4096) + text(HELLO)
          + text(header(-1, small)) + text(header(8, small, durationMs=10001)) + text(header(9, small, frames=-1))
          + text(header(10, small, sha256="XYZ")) + text(header(11, small, chunks=2)) + binary(small[0][:50])
          + text(header(12, small, data="AAAA")))


# MARK: - Model answers

ANSWER = {"clear": False, "priority": "urgent", "text": "보행자가 있습니다. 속도를 줄이세요.", "hazards": ["pedestrian"]}
CLEAR = {"clear": True, "priority": "normal", "text": "", "hazards": []}


def pretty(obj):
    return json.dumps(obj, ensure_ascii=False, indent=2).encode()


def answers():
    write("answers", "answer.json", json.dumps(ANSWER, ensure_ascii=False).encode())
    write("answers", "answer-clear.json", json.dumps(CLEAR).encode())
    write("answers", "gemini-generate-content.json", pretty({
        "candidates": [{
            "content": {"parts": [{"text": json.dumps(ANSWER, ensure_ascii=False)}], "role": "model"},
            "finishReason": "STOP", "avgLogprobs": -0.0412, "index": 0,
        }],
        "usageMetadata": {
            "promptTokenCount": 1642, "candidatesTokenCount": 38, "totalTokenCount": 1680, "thoughtsTokenCount": 0,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 142}, {"modality": "VIDEO", "tokenCount": 1500}],
        },
        "modelVersion": "gemini-2.5-flash", "responseId": "x3kgaePJC9PUxN8Pm5fBsQs",
    }))
    write("answers", "gemini-thought-and-clear.json", pretty({
        "candidates": [{"content": {"parts": [{"text": "The road ahead is empty.", "thought": True},
                                              {"text": json.dumps(CLEAR)}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 1642, "candidatesTokenCount": 21, "thoughtsTokenCount": 64, "totalTokenCount": 1727},
    }))
    write("answers", "gemini-429-retry-info.json", pretty({"error": {
        "code": 429, "message": "You exceeded your current quota, please check your plan and billing details.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "quotaValue": "10"}]},
            {"@type": "type.googleapis.com/google.rpc.Help", "links": [{"description": "Learn more about Gemini API quotas",
                                                                        "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
        ],
    }}))
    write("answers", "gemini-503.json", pretty({"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                                                          "status": "UNAVAILABLE"}}))
    write("answers", "openai-chat-completion.json", pretty({
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion", "created": 1764045437,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": json.dumps(ANSWER, ensure_ascii=False), "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1131, "completion_tokens": 41, "total_tokens": 1172,
                  "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}},
        "system_fingerprint": "fp_560af6e559",
    }))
    write("answers", "llama-server-chat-completion.json", json.dumps({
        "choices": [{"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": json.dumps(CLEAR)}}],
        "created": 1764045501, "model": "gemma-3-4b-it-Q4_K_M.gguf", "system_fingerprint": "b6273-b9f3a1e2", "object": "chat.completion",
        "usage": {"completion_tokens": 27, "prompt_tokens": 812, "total_tokens": 839}, "id": "chatcmpl-k2V1yq0dDtdN9gHmTjWb0Qz2YhTDBLsq",
        "timings": {"prompt_n": 812, "prompt_ms": 2101.3, "predicted_n": 27, "predicted_ms": 905.2},
    }, separators=(",", ":")).encode())
    # The first line is also read as Retry-After.
    write("answers", "openai-429-retry-after", b"20\r\n" + pretty({"error": {
        "message": "Rate limit reached for gpt-4o-mini in organization org-123 on requests per min (RPM): Limit 3, Used 3, Requested 1.",
        "type": "requests", "param": None, "code": "rate_limit_exceeded"}}))


# MARK: - gpsd

# Lines gpsd 3.22 sent a client after ?WATCH (fed NMEA over UDP); byte 0 of an input picks where
# the harness splits the stream in two reads (fuzz/Harness/Gpsd.swift).
GPSD_SESSION = [
    '{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}',
    '{"class":"DEVICES","devices":[{"class":"DEVICE","path":"udp://127.0.0.1:29471","driver":"NMEA0183",'
    '"activated":"2026-11-26T08:05:51.785Z","flags":1}]}',
    '{"class":"WATCH","enable":true,"json":true,"nmea":false,"raw":0,"scaled":false,"timing":false,"split24":false,"pps":false}',
    '{"class":"TPV","device":"udp://127.0.0.1:29471","mode":3,"time":"2026-11-26T08:10:11.000Z","ept":0.005,"lat":37.566500000,'
    '"lon":126.978000000,"altHAE":53.0000,"altMSL":35.0000,"alt":35.0000,"epv":27.600,"track":91.5000,"magtrack":82.9980,'
    '"magvar":-8.5,"speed":13.890,"climb":0.000,"epc":55.20,"geoidSep":18.000,"eph":17.100,"sep":28.500}',
]


def gpsd():
    write("gpsd", "session-3.22", bytes([3]) + ("\r\n".join(GPSD_SESSION) + "\r\n").encode())
    write("gpsd", "no-fix", bytes([0]) + b'{"class":"TPV","device":"udp://127.0.0.1:29471","mode":1,"time":"2026-11-26T08:17:30.000Z"}\n')
    write("gpsd", "odd-values", bytes([1]) + b'{"class":"TPV","mode":7,"lat":91,"lon":"east","speed":-3,"track":360,"alt":1e300}\n'
          b'{"class":"SKY","satellites":[{"PRN":1,"used":true}]}\n{"class":"ERROR","message":"bad"}\nnot json\n')


if __name__ == "__main__":
    mp4s = segments()
    messages(mp4s)
    answers()
    gpsd()
    for target in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, target))
        print(f"{target}: {len(files)} files, {sum(os.path.getsize(os.path.join(CORPUS, target, f)) for f in files)} bytes")
