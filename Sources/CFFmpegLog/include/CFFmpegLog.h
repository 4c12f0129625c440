#ifndef CFFMPEGLOG_H
#define CFFMPEGLOG_H

/// FFmpeg's log (`av_log`) handed to a function instead of standard error: one call per line,
/// formatted, with no `[name @ 0x…]` prefix. `item` is the name of what logged (a codec such as
/// `hevc_v4l2m2m`, a format such as `mov,mp4,m4a,3gp,3g2,mj2`), or "" when FFmpeg gives none.
/// Called on whichever thread FFmpeg logs from.
typedef void (*ffmpeg_log_sink)(int level, const char *item, const char *line);

/// From now on, lines at `max_level` (an `AV_LOG_*` value) or more severe go to `sink`; the
/// rest are dropped before they are formatted. Replaces FFmpeg's own callback.
void ffmpeg_log_route(ffmpeg_log_sink sink, int max_level);

/// Logs `line` through `av_log` as `item` would, at `level`: for tests of the route.
void ffmpeg_log_emit(int level, const char *item, const char *line);

#endif
