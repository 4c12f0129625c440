#include "CALSALog.h"

#include <alsa/asoundlib.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static _Atomic(alsa_log_sink) routed_sink;

static void route(const char *file, int line, const char *function, int err, const char *format, ...) {
    (void)file;
    (void)line;
    alsa_log_sink sink = atomic_load(&routed_sink);
    if (!sink) return;
    char text[1024];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(text, sizeof text, format, arguments);
    va_end(arguments);
    size_t length = strlen(text);
    while (length > 0 && (text[length - 1] == '\n' || text[length - 1] == ' ')) text[--length] = 0;
    if (err && length + 3 < sizeof text) snprintf(text + length, sizeof text - length, ": %s", snd_strerror(err));
    sink(function ? function : "", err, text);
}

void alsa_log_route(alsa_log_sink sink) {
    atomic_store(&routed_sink, sink);
    snd_lib_error_set_handler(sink ? route : NULL);
}

int alsa_log_try_pcm(const char *name) {
    snd_pcm_t *pcm = NULL;
    int status = snd_pcm_open(&pcm, name, SND_PCM_STREAM_PLAYBACK, SND_PCM_NONBLOCK);
    if (status == 0) snd_pcm_close(pcm);
    return status;
}
