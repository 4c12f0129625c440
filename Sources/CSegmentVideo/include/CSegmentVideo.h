#ifndef CSEGMENTVIDEO_H
#define CSEGMENTVIDEO_H

#include <stddef.h>
#include <stdint.h>

/// What the guidance server does with a received segment's video besides keeping it: decode it,
/// encode a few of its frames as JPEG (for models that take images), re-encode it as H.264 (for a
/// service that refuses HEVC), and hand frames in 8-bit gray to a detector. libavformat reads the
/// segment from a file; every function returns 0 or more on success and a negative AVERROR, with
/// FFmpeg's text in `error`, on failure.

typedef struct {
    uint8_t *data; ///< av_malloc'd; free with segment_video_free
    size_t size;
} segment_video_buffer;

void segment_video_free(segment_video_buffer *buffer);

/// FFmpeg's own log (encoder banners, statistics) down to errors: the server logs what matters.
void segment_video_quiet(void);

/// Decodes `path` and encodes `count` (1…8) frames spread evenly over it, first and last
/// included, as JPEG no wider than `max_width` (the aspect kept). Fills `out[0..<n]`; returns n.
int segment_video_keyframe_jpegs(const char *path, int count, int max_width, segment_video_buffer *out,
                                 char *error, size_t error_size);

/// Re-encodes `input`'s video as H.264 (libx264, or the first H.264 encoder libavcodec has) into
/// the MP4 file `output`, frame for frame at the same timestamps. Returns the frames written.
int segment_video_transcode_h264(const char *input, const char *output, char *error, size_t error_size);

/// Called with one decoded frame in 8-bit gray, `width` x `height`, rows `stride` bytes apart;
/// `index` counts decoded frames from 0. Return non-zero to stop.
typedef int (*segment_video_gray_callback)(void *context, const uint8_t *gray, int width, int height, int stride, int index);

/// Decodes `path` and calls `callback` with every `every`-th frame (0, every, 2·every, …) in gray,
/// scaled to `width` (the aspect kept; 0 keeps the size). Returns the frames decoded.
int segment_video_gray_frames(const char *path, int every, int width, segment_video_gray_callback callback, void *context,
                              char *error, size_t error_size);

#endif
