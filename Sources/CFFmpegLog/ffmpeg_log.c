#include "CFFmpegLog.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>

#include <libavutil/log.h>

static _Atomic(ffmpeg_log_sink) routed_sink;
static atomic_int routed_max_level = AV_LOG_INFO;

static void route(void *context, int level, const char *format, va_list arguments) {
    ffmpeg_log_sink sink = atomic_load(&routed_sink);
    if (!sink || level > atomic_load(&routed_max_level)) return;
    char line[1024];
    int print_prefix = 0;
    av_log_format_line2(context, level, format, arguments, line, sizeof line, &print_prefix);
    size_t length = strlen(line);
    while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r' || line[length - 1] == ' ')) line[--length] = 0;
    if (length == 0) return;
    const char *item = "";
    if (context) {
        const AVClass *class = *(const AVClass **)context;
        if (class && class->item_name) {
            const char *name = class->item_name(context);
            if (name) item = name;
        }
    }
    sink(level, item, line);
}

void ffmpeg_log_route(ffmpeg_log_sink sink, int max_level) {
    atomic_store(&routed_max_level, max_level);
    atomic_store(&routed_sink, sink);
    // FFmpeg checks this level before calling back (and before work done only for a log line).
    av_log_set_level(max_level);
    av_log_set_callback(route);
}

static const char *emitted_name(void *context) { return *(const char **)((const AVClass **)context + 1); }

void ffmpeg_log_emit(int level, const char *item, const char *line) {
    static const AVClass emitted_class = {
        .class_name = "emitted",
        .item_name = emitted_name,
        .version = LIBAVUTIL_VERSION_INT,
    };
    struct {
        const AVClass *class;
        const char *name;
    } emitter = {&emitted_class, item};
    av_log(&emitter, level, "%s\n", line);
}
