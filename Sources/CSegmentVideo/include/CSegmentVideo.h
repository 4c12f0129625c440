#ifndef CSEGMENTVIDEO_H
#define CSEGMENTVIDEO_H

#include <stddef.h>
#include <stdint.h>

/// What the guidance server does with a received segment's video besides keeping it: decode it,
/// encode a few of its frames as JPEG (for models that take images), re-encode it as H.264 (for a
/// service that refuses HEVC), and hand frames in 8-bit gray to a detector. libavformat reads the
/// segment from memory, as MP4 only, and opens nothing else; every function returns 0 or more on success and a negative AVERROR, with
/// FFmpeg's text in `error`, on failure.

/// The largest frame any function decodes; bigger ones are refused before a decoder is opened (the
/// MP4's sample entry) and as they decode (the bitstream's parameter sets, which may say otherwise).
#define SEGMENT_VIDEO_MAX_WIDTH 4096
#define SEGMENT_VIDEO_MAX_HEIGHT 4096
#define SEGMENT_VIDEO_MAX_SIZE_TEXT "4096x4096"

typedef struct {
    uint8_t *data; ///< av_malloc'd; free with segment_video_free
    size_t size;
} segment_video_buffer;

void segment_video_free(segment_video_buffer *buffer);

/// Decodes the segment and encodes `count` (1…8) frames spread evenly over it, first and last
/// included, as JPEG no wider than `max_width` (the aspect kept). Fills `out[0..<n]`; returns n.
int segment_video_keyframe_jpegs(const uint8_t *data, size_t size, int count, int max_width, segment_video_buffer *out,
                                 char *error, size_t error_size);

/// Re-encodes the segment's video as H.264 (libx264, or the first H.264 encoder libavcodec has) into
/// the MP4 file `output`, frame for frame at the same timestamps. Returns the frames written.
int segment_video_transcode_h264(const uint8_t *data, size_t size, const char *output, char *error, size_t error_size);

/// Called with one decoded frame in 8-bit gray, `width` x `height`, rows `stride` bytes apart;
/// `index` counts decoded frames from 0. Return non-zero to stop.
typedef int (*segment_video_gray_callback)(void *context, const uint8_t *gray, int width, int height, int stride, int index);

/// Decodes the segment and calls `callback` with every `every`-th frame (0, every, 2·every, …) in gray,
/// scaled to `width` (the aspect kept; 0 keeps the size). Returns the frames decoded.
int segment_video_gray_frames(const uint8_t *data, size_t size, int every, int width, segment_video_gray_callback callback,
                              void *context, char *error, size_t error_size);

/// What a segment's MP4 says of itself, read from its boxes without decoding a frame.
typedef struct {
    int streams;       ///< tracks of any kind
    int video_streams; ///< video tracks
    char codec[32];    ///< the first video track's codec, FFmpeg's name ("hevc", "h264"), or ""
    int width, height;
    int64_t frames;      ///< samples in the first video track (0: unknown)
    int64_t duration_ms; ///< the first video track's duration (0: unknown)
} segment_video_info;

/// Reads the MP4 boxes of `data` (size bytes) into `info`. Returns 0, or a negative AVERROR when
/// it is not an MP4 libavformat can read.
int segment_video_inspect(const uint8_t *data, size_t size, segment_video_info *info, char *error, size_t error_size);

#endif
