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

struct cgpiod_output {
#if CGPIOD_V1
    struct gpiod_chip *chip;
    struct gpiod_line *line;
#else
    struct gpiod_line_request *request;
    unsigned int offset;
#endif
};

struct cgpiod_input {
#if CGPIOD_V1
    struct gpiod_chip *chip;
    struct gpiod_line *line;
#else
    struct gpiod_line_request *request;
    struct gpiod_edge_event_buffer *events;
    unsigned int offset;
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

cgpiod_output *cgpiod_output_request(cgpiod_chip *chip, unsigned int offset, bool active_low,
                                     const char *consumer)
{
    cgpiod_output *out;
    int e = ENOMEM;

    if (chip == NULL) {
        errno = EINVAL;
        return NULL;
    }
    if (consumer == NULL)
        consumer = "";
    out = calloc(1, sizeof *out);
    if (out == NULL) {
        errno = ENOMEM;
        return NULL;
    }
#if CGPIOD_V1
    out->chip = gpiod_chip_open(chip->path);
    if (out->chip == NULL)
        goto fail;
    out->line = gpiod_chip_get_line(out->chip, offset);
    if (out->line == NULL ||
        gpiod_line_request_output_flags(out->line, consumer, active_low ? GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW : 0,
                                        0) < 0) {
        out->line = NULL;
        goto fail;
    }
    return out;
fail:
    e = errno;
    if (out->chip != NULL)
        gpiod_chip_close(out->chip);
#else
    {
        struct gpiod_line_settings *settings = gpiod_line_settings_new();
        struct gpiod_line_config *line_cfg = gpiod_line_config_new();
        struct gpiod_request_config *req_cfg = gpiod_request_config_new();

        if (settings != NULL && line_cfg != NULL && req_cfg != NULL &&
            gpiod_line_settings_set_direction(settings, GPIOD_LINE_DIRECTION_OUTPUT) == 0 &&
            gpiod_line_settings_set_output_value(settings, GPIOD_LINE_VALUE_INACTIVE) == 0) {
            gpiod_line_settings_set_active_low(settings, active_low);
            gpiod_request_config_set_consumer(req_cfg, consumer);
            if (gpiod_line_config_add_line_settings(line_cfg, &offset, 1, settings) == 0)
                out->request = gpiod_chip_request_lines(chip->chip, req_cfg, line_cfg);
            e = errno;
        }
        if (req_cfg != NULL)
            gpiod_request_config_free(req_cfg);
        if (line_cfg != NULL)
            gpiod_line_config_free(line_cfg);
        if (settings != NULL)
            gpiod_line_settings_free(settings);
        out->offset = offset;
        if (out->request != NULL)
            return out;
    }
#endif
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
    return gpiod_line_set_value(out->line, active ? 1 : 0);
#else
    return gpiod_line_request_set_value(out->request, out->offset,
                                        active ? GPIOD_LINE_VALUE_ACTIVE : GPIOD_LINE_VALUE_INACTIVE);
#endif
}

void cgpiod_output_release(cgpiod_output *out)
{
    if (out == NULL)
        return;
#if CGPIOD_V1
    gpiod_line_set_value(out->line, 0);
    gpiod_line_release(out->line);
    gpiod_chip_close(out->chip);
#else
    gpiod_line_request_set_value(out->request, out->offset, GPIOD_LINE_VALUE_INACTIVE);
    gpiod_line_request_release(out->request);
#endif
    free(out);
}

cgpiod_input *cgpiod_input_request(cgpiod_chip *chip, unsigned int offset, bool active_low,
                                   const char *consumer)
{
    cgpiod_input *in;
    int e = ENOMEM;

    if (chip == NULL) {
        errno = EINVAL;
        return NULL;
    }
    if (consumer == NULL)
        consumer = "";
    in = calloc(1, sizeof *in);
    if (in == NULL) {
        errno = ENOMEM;
        return NULL;
    }
#if CGPIOD_V1
    in->chip = gpiod_chip_open(chip->path);
    if (in->chip == NULL)
        goto fail;
    in->line = gpiod_chip_get_line(in->chip, offset);
    if (in->line == NULL ||
        gpiod_line_request_both_edges_events_flags(in->line, consumer,
                                                   active_low ? GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW : 0) < 0) {
        in->line = NULL;
        goto fail;
    }
    return in;
fail:
    e = errno;
    if (in->chip != NULL)
        gpiod_chip_close(in->chip);
#else
    {
        struct gpiod_line_settings *settings = gpiod_line_settings_new();
        struct gpiod_line_config *line_cfg = gpiod_line_config_new();
        struct gpiod_request_config *req_cfg = gpiod_request_config_new();

        in->events = gpiod_edge_event_buffer_new(16);
        if (settings != NULL && line_cfg != NULL && req_cfg != NULL && in->events != NULL &&
            gpiod_line_settings_set_direction(settings, GPIOD_LINE_DIRECTION_INPUT) == 0 &&
            gpiod_line_settings_set_edge_detection(settings, GPIOD_LINE_EDGE_BOTH) == 0) {
            gpiod_line_settings_set_active_low(settings, active_low);
            gpiod_request_config_set_consumer(req_cfg, consumer);
            if (gpiod_line_config_add_line_settings(line_cfg, &offset, 1, settings) == 0)
                in->request = gpiod_chip_request_lines(chip->chip, req_cfg, line_cfg);
            e = errno;
        }
        if (req_cfg != NULL)
            gpiod_request_config_free(req_cfg);
        if (line_cfg != NULL)
            gpiod_line_config_free(line_cfg);
        if (settings != NULL)
            gpiod_line_settings_free(settings);
        in->offset = offset;
        if (in->request != NULL)
            return in;
        if (in->events != NULL)
            gpiod_edge_event_buffer_free(in->events);
    }
#endif
    free(in);
    errno = e;
    return NULL;
}

int cgpiod_input_wait(cgpiod_input *in, long long timeout_ns)
{
    if (in == NULL || timeout_ns < 0) {
        errno = EINVAL;
        return -1;
    }
#if CGPIOD_V1
    {
        struct timespec ts = { .tv_sec = timeout_ns / 1000000000LL, .tv_nsec = timeout_ns % 1000000000LL };
        struct gpiod_line_event events[16];
        int ready = gpiod_line_event_wait(in->line, &ts);
        if (ready <= 0)
            return ready;
        if (gpiod_line_event_read_multiple(in->line, events, 16) < 0)
            return -1;
        return 1;
    }
#else
    {
        int ready = gpiod_line_request_wait_edge_events(in->request, timeout_ns);
        if (ready <= 0)
            return ready;
        if (gpiod_line_request_read_edge_events(in->request, in->events, 16) < 0)
            return -1;
        return 1;
    }
#endif
}

int cgpiod_input_get(cgpiod_input *in)
{
    if (in == NULL) {
        errno = EINVAL;
        return -1;
    }
#if CGPIOD_V1
    return gpiod_line_get_value(in->line);
#else
    {
        enum gpiod_line_value value = gpiod_line_request_get_value(in->request, in->offset);
        return value == GPIOD_LINE_VALUE_ERROR ? -1 : (value == GPIOD_LINE_VALUE_ACTIVE ? 1 : 0);
    }
#endif
}

void cgpiod_input_release(cgpiod_input *in)
{
    if (in == NULL)
        return;
#if CGPIOD_V1
    gpiod_line_release(in->line);
    gpiod_chip_close(in->chip);
#else
    gpiod_line_request_release(in->request);
    gpiod_edge_event_buffer_free(in->events);
#endif
    free(in);
}
