#ifndef CALSALOG_H
#define CALSALOG_H

/// alsa-lib's error messages (`ALSA lib pcm.c:2666:(snd_pcm_open_noupdate) Unknown PCM …`)
/// handed to a function instead of standard error: one call per message, formatted. `err` is the
/// negative errno alsa-lib gave with it (0: none). Called on whichever thread alsa-lib reports from.
typedef void (*alsa_log_sink)(const char *function, int err, const char *line);

/// From now on alsa-lib's messages go to `sink` (NULL: back to standard error).
void alsa_log_route(alsa_log_sink sink);

/// Opens the PCM `name` for playback and closes it again: alsa-lib reports why it cannot. For tests.
int alsa_log_try_pcm(const char *name);

#endif
