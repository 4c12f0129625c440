/* strdup */
#define _POSIX_C_SOURCE 200809L

#include "CGPIOD.h"

#include <gpiod.h>

#include <errno.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Only the 1.x header has GPIOD_LINE_BULK_MAX_LINES. */
#ifdef GPIOD_LINE_BULK_MAX_LINES
#define CGPIOD_V1 1
#else
#define CGPIOD_V1 0
#endif

/* The kernel keeps names and labels to 32 bytes with the NUL; room to spare. */
#define CGPIOD_NAME_MAX 64

struct cgpiod_chip {
    struct gpiod_chip *chip;
    char *path; /* 1.x: a request opens the chip again, as the line lives as long as its chip */
    char name[CGPIOD_NAME_MAX];
    char label[CGPIOD_NAME_MAX];
    unsigned int num_lines;
};

/* A requested line, whichever API holds it. */
struct held {
#if CGPIOD_V1
    struct gpiod_chip *chip; /* 1.x: the line lives as long as its chip */
    struct gpiod_line *line;
#else
    struct gpiod_line_request *request;
    unsigned int offset;
#endif
};

struct cgpiod_output {
    struct held held;
};

struct cgpiod_input {
    struct held held;
#if !CGPIOD_V1
    struct gpiod_edge_event_buffer *events;
#endif
};

static void copy(char *dst, size_t len, const char *src)
{
    if (dst != NULL && len > 0)
        snprintf(dst, len, "%s", src != NULL ? src : "");
}

int cgpiod_api_major(void)
{
    return CGPIOD_V1 ? 1 : 2;
}

const char *cgpiod_library_version(void)
{
#if CGPIOD_V1
    return gpiod_version_string();
#else
    return gpiod_api_version();
#endif
}

cgpiod_chip *cgpiod_chip_open(const char *path)
{
    cgpiod_chip *c;
    int e;

    if (path == NULL) {
        errno = EINVAL;
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL || (c->path = strdup(path)) == NULL)
        goto fail;
    c->chip = gpiod_chip_open(path);
    if (c->chip == NULL)
        goto fail;
#if CGPIOD_V1
    copy(c->name, sizeof c->name, gpiod_chip_name(c->chip));
    copy(c->label, sizeof c->label, gpiod_chip_label(c->chip));
    c->num_lines = gpiod_chip_num_lines(c->chip);
#else
    {
        struct gpiod_chip_info *info = gpiod_chip_get_info(c->chip);
        if (info == NULL)
            goto fail;
        copy(c->name, sizeof c->name, gpiod_chip_info_get_name(info));
        copy(c->label, sizeof c->label, gpiod_chip_info_get_label(info));
        c->num_lines = (unsigned int)gpiod_chip_info_get_num_lines(info);
        gpiod_chip_info_free(info);
    }
#endif
    return c;

fail:
    e = errno;
    cgpiod_chip_close(c);
    errno = e;
    return NULL;
}

void cgpiod_chip_close(cgpiod_chip *chip)
{
    if (chip == NULL)
        return;
    if (chip->chip != NULL)
        gpiod_chip_close(chip->chip);
    free(chip->path);
    free(chip);
}

const char *cgpiod_chip_name(const cgpiod_chip *chip)
{
    return chip != NULL ? chip->name : "";
}

const char *cgpiod_chip_label(const cgpiod_chip *chip)
{
    return chip != NULL ? chip->label : "";
}

unsigned int cgpiod_chip_num_lines(const cgpiod_chip *chip)
{
    return chip != NULL ? chip->num_lines : 0;
}

int cgpiod_chip_find_line(cgpiod_chip *chip, const char *name)
{
    if (chip == NULL || name == NULL) {
        errno = EINVAL;
        return -1;
    }
#if CGPIOD_V1
    {
        struct gpiod_line *line = gpiod_chip_find_line(chip->chip, name);
        return line != NULL ? (int)gpiod_line_offset(line) : -1;
    }
#else
    return gpiod_chip_get_line_offset_from_name(chip->chip, name);
#endif
}

int cgpiod_chip_line_info(cgpiod_chip *chip, unsigned int offset, char *name, size_t name_len,
                          char *consumer, size_t consumer_len)
{
    int used;

    copy(name, name_len, "");
    copy(consumer, consumer_len, "");
    if (chip == NULL) {
        errno = EINVAL;
        return -1;
    }
#if CGPIOD_V1
    {
        struct gpiod_line *line = gpiod_chip_get_line(chip->chip, offset);
        if (line == NULL || gpiod_line_update(line) < 0)
            return -1;
        used = gpiod_line_is_used(line);
        copy(name, name_len, gpiod_line_name(line));
        copy(consumer, consumer_len, gpiod_line_consumer(line));
    }
#else
    {
        struct gpiod_line_info *info = gpiod_chip_get_line_info(chip->chip, offset);
        if (info == NULL)
            return -1;
        used = gpiod_line_info_is_used(info);
        copy(name, name_len, gpiod_line_info_get_name(info));
        copy(consumer, consumer_len, gpiod_line_info_get_consumer(info));
        gpiod_line_info_free(info);
    }
#endif
    return used ? 1 : 0;
}

/*
 * Requests the line at offset into held: an output driven inactive, or an input with edge events
 * on both edges (no bias: the board's pull stays). 0, or -1 with errno set.
 */
static int request_line(cgpiod_chip *chip, unsigned int offset, bool input, bool active_low, const char *consumer,
                        struct held *held)
{
    int e;
#if CGPIOD_V1
    int flags = active_low ? GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW : 0;

    held->chip = gpiod_chip_open(chip->path);
    if (held->chip == NULL)
        return -1;
    held->line = gpiod_chip_get_line(held->chip, offset);
    if (held->line != NULL &&
        (input ? gpiod_line_request_both_edges_events_flags(held->line, consumer, flags)
               : gpiod_line_request_output_flags(held->line, consumer, flags, 0)) == 0)
        return 0;
    e = errno;
    gpiod_chip_close(held->chip);
    held->chip = NULL;
    held->line = NULL;
#else
    struct gpiod_line_settings *settings = gpiod_line_settings_new();
    struct gpiod_line_config *line_cfg = gpiod_line_config_new();
    struct gpiod_request_config *req_cfg = gpiod_request_config_new();

    e = ENOMEM;
    if (settings != NULL && line_cfg != NULL && req_cfg != NULL &&
        gpiod_line_settings_set_direction(settings, input ? GPIOD_LINE_DIRECTION_INPUT : GPIOD_LINE_DIRECTION_OUTPUT) == 0 &&
        (input ? gpiod_line_settings_set_edge_detection(settings, GPIOD_LINE_EDGE_BOTH)
               : gpiod_line_settings_set_output_value(settings, GPIOD_LINE_VALUE_INACTIVE)) == 0) {
        gpiod_line_settings_set_active_low(settings, active_low);
        gpiod_request_config_set_consumer(req_cfg, consumer);
        if (gpiod_line_config_add_line_settings(line_cfg, &offset, 1, settings) == 0)
            held->request = gpiod_chip_request_lines(chip->chip, req_cfg, line_cfg);
        e = errno;
    }
    if (req_cfg != NULL)
        gpiod_request_config_free(req_cfg);
    if (line_cfg != NULL)
        gpiod_line_config_free(line_cfg);
    if (settings != NULL)
        gpiod_line_settings_free(settings);
    held->offset = offset;
    if (held->request != NULL)
        return 0;
#endif
    errno = e;
    return -1;
}

static void release_line(struct held *held)
{
#if CGPIOD_V1
    gpiod_line_release(held->line);
    gpiod_chip_close(held->chip);
#else
    gpiod_line_request_release(held->request);
#endif
}

/* calloc'd room for a handle of size bytes, after checking the chip; NULL with errno set. */
static void *new_handle(const cgpiod_chip *chip, size_t size)
{
    void *handle;

    if (chip == NULL) {
        errno = EINVAL;
        return NULL;
    }
    handle = calloc(1, size);
    if (handle == NULL)
        errno = ENOMEM;
    return handle;
}

cgpiod_output *cgpiod_output_request(cgpiod_chip *chip, unsigned int offset, bool active_low,
                                     const char *consumer)
{
    cgpiod_output *out = new_handle(chip, sizeof *out);
    int e;

    if (out == NULL)
        return NULL;
    if (request_line(chip, offset, false, active_low, consumer != NULL ? consumer : "", &out->held) == 0)
        return out;
    e = errno;
    free(out);
    errno = e;
    return NULL;
}

int cgpiod_output_set(cgpiod_output *out, bool active)
{
    if (out == NULL) {
        errno = EINVAL;
        return -1;
    }
#if CGPIOD_V1
    return gpiod_line_set_value(out->held.line, active ? 1 : 0);
#else
    return gpiod_line_request_set_value(out->held.request, out->held.offset,
                                        active ? GPIOD_LINE_VALUE_ACTIVE : GPIOD_LINE_VALUE_INACTIVE);
#endif
}

void cgpiod_output_release(cgpiod_output *out)
{
    if (out == NULL)
        return;
    cgpiod_output_set(out, false);
    release_line(&out->held);
    free(out);
}

cgpiod_input *cgpiod_input_request(cgpiod_chip *chip, unsigned int offset, bool active_low,
                                   const char *consumer)
{
    cgpiod_input *in = new_handle(chip, sizeof *in);
    int e;

    if (in == NULL)
        return NULL;
#if !CGPIOD_V1
    in->events = gpiod_edge_event_buffer_new(16);
    if (in->events == NULL) {
        free(in);
        errno = ENOMEM;
        return NULL;
    }
#endif
    if (request_line(chip, offset, true, active_low, consumer != NULL ? consumer : "", &in->held) == 0)
        return in;
    e = errno;
#if !CGPIOD_V1
    gpiod_edge_event_buffer_free(in->events);
#endif
    free(in);
    errno = e;
    return NULL;
}

int cgpiod_input_wait(cgpiod_input *in, long long timeout_ns)
{
    int ready;

    if (in == NULL || timeout_ns < 0) {
        errno = EINVAL;
        return -1;
    }
#if CGPIOD_V1
    {
        struct timespec ts = { .tv_sec = timeout_ns / 1000000000LL, .tv_nsec = timeout_ns % 1000000000LL };
        struct gpiod_line_event events[16];

        ready = gpiod_line_event_wait(in->held.line, &ts);
        if (ready > 0 && gpiod_line_event_read_multiple(in->held.line, events, 16) < 0)
            return -1;
    }
#else
    ready = gpiod_line_request_wait_edge_events(in->held.request, timeout_ns);
    if (ready > 0 && gpiod_line_request_read_edge_events(in->held.request, in->events, 16) < 0)
        return -1;
#endif
    return ready > 0 ? 1 : ready;
}

int cgpiod_input_get(cgpiod_input *in)
{
    if (in == NULL) {
        errno = EINVAL;
        return -1;
    }
#if CGPIOD_V1
    return gpiod_line_get_value(in->held.line);
#else
    {
        enum gpiod_line_value value = gpiod_line_request_get_value(in->held.request, in->held.offset);
        return value == GPIOD_LINE_VALUE_ERROR ? -1 : (value == GPIOD_LINE_VALUE_ACTIVE ? 1 : 0);
    }
#endif
}

void cgpiod_input_release(cgpiod_input *in)
{
    if (in == NULL)
        return;
    release_line(&in->held);
#if !CGPIOD_V1
    gpiod_edge_event_buffer_free(in->events);
#endif
    free(in);
}
