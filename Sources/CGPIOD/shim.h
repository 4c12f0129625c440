/*
 * One GPIO output line through libgpiod, for Swift.
 *
 * Builds against libgpiod 1.x (v1 API, e.g. Debian 12) and 2.x (v2 API); the v1 header is told
 * apart by GPIOD_LINE_BULK_MAX_LINES. Everything is static inline: no library of our own.
 *
 *   char err[256];
 *   cgpiod_output *out = cgpiod_output_open("gpiochip0", 5, NULL, false, "dashcam-agent",
 *                                           err, sizeof err);
 *   if (out == NULL) { report err; }
 *   cgpiod_output_set(out, 1, err, sizeof err);   // logical value: active
 *   cgpiod_output_release(out);                    // drives inactive, frees everything
 *
 * Chip: a path ("/dev/gpiochip0"), a name ("gpiochip0"), a number ("0") or a label
 * ("gpio-sim.0-node0"). Line: an offset (>= 0) or a line name (pass -1 as offset). With a line
 * name and no chip (NULL or ""), every /dev/gpiochipN is searched in order, like gpiofind.
 * Errors: NULL or -1, errno set, and a message naming the chip and the line in err (which may be
 * NULL). Not thread-safe per handle; separate handles are independent.
 */
#ifndef CGPIOD_SHIM_H
#define CGPIOD_SHIM_H

#include <gpiod.h>

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPIOD_LINE_BULK_MAX_LINES
#define CGPIOD_V1 1 /* libgpiod 1.x */
#else
#define CGPIOD_V1 0 /* libgpiod 2.x */
#endif

/* Kernel limit for chip and line names and labels is 32 bytes with the NUL. */
#define CGPIOD_NAME_MAX 64
#define CGPIOD_PATH_MAX 256
#define CGPIOD_MAX_CHIPS 256

typedef struct cgpiod_output {
#if CGPIOD_V1
    struct gpiod_chip *chip; /* owns the line */
    struct gpiod_line *line;
#else
    struct gpiod_line_request *request;
#endif
    unsigned int offset;
    bool active_low;
    char chip_path[CGPIOD_PATH_MAX];
    char chip_name[CGPIOD_NAME_MAX];
    char chip_label[CGPIOD_NAME_MAX];
    char line_name[CGPIOD_NAME_MAX]; /* "" if the line has no name */
    char description[2 * CGPIOD_PATH_MAX];
} cgpiod_output;

/* ---- internals (cgpiod_priv_*) ---- */

/* An open chip while resolving. */
typedef struct cgpiod_priv_chip {
    struct gpiod_chip *chip;
    unsigned int num_lines;
    char path[CGPIOD_PATH_MAX];
    char name[CGPIOD_NAME_MAX];
    char label[CGPIOD_NAME_MAX];
} cgpiod_priv_chip;

static inline void cgpiod_priv_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline void cgpiod_priv_err(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || err_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

static inline void cgpiod_priv_copy(char *dst, size_t dst_len, const char *src)
{
    snprintf(dst, dst_len, "%s", src != NULL ? src : "");
}

static inline bool cgpiod_priv_is_uint(const char *s)
{
    if (s == NULL || *s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* Numbers N of /dev/gpiochipN in ascending order; count, or -1 with errno. */
static inline int cgpiod_priv_list_chips(unsigned int *nums, int max)
{
    DIR *dir = opendir("/dev");
    struct dirent *ent;
    int n = 0;

    if (dir == NULL)
        return -1;
    while (n < max && (ent = readdir(dir)) != NULL) {
        const char *s = ent->d_name;
        unsigned int v;
        int i;
        if (strncmp(s, "gpiochip", 8) != 0 || !cgpiod_priv_is_uint(s + 8) || strlen(s + 8) > 9)
            continue;
        v = (unsigned int)strtoul(s + 8, NULL, 10);
        for (i = n++; i > 0 && nums[i - 1] > v; i--)
            nums[i] = nums[i - 1];
        nums[i] = v;
    }
    closedir(dir);
    return n;
}

/* What a failed open of a chip device means. */
static inline const char *cgpiod_priv_open_reason(int e)
{
    switch (e) {
    case ENOENT:
        return "no such chip";
    case EACCES:
    case EPERM:
        return "permission denied";
    case ENOTTY:
    case ENODEV:
        return "not a GPIO chip";
    default:
        return "cannot open chip";
    }
}

static inline void cgpiod_priv_chip_close(cgpiod_priv_chip *c)
{
    if (c->chip != NULL)
        gpiod_chip_close(c->chip);
    c->chip = NULL;
}

/* Opens the chip device at path and reads its name, label and line count; -1 with errno. */
static inline int cgpiod_priv_chip_open(const char *path, cgpiod_priv_chip *c)
{
    memset(c, 0, sizeof *c);
    if (snprintf(c->path, sizeof c->path, "%s", path) >= (int)sizeof c->path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    c->chip = gpiod_chip_open(path);
    if (c->chip == NULL)
        return -1;
#if CGPIOD_V1
    cgpiod_priv_copy(c->name, sizeof c->name, gpiod_chip_name(c->chip));
    cgpiod_priv_copy(c->label, sizeof c->label, gpiod_chip_label(c->chip));
    c->num_lines = gpiod_chip_num_lines(c->chip);
#else
    {
        struct gpiod_chip_info *info = gpiod_chip_get_info(c->chip);
        if (info == NULL) {
            int e = errno;
            cgpiod_priv_chip_close(c);
            errno = e;
            return -1;
        }
        cgpiod_priv_copy(c->name, sizeof c->name, gpiod_chip_info_get_name(info));
        cgpiod_priv_copy(c->label, sizeof c->label, gpiod_chip_info_get_label(info));
        c->num_lines = (unsigned int)gpiod_chip_info_get_num_lines(info);
        gpiod_chip_info_free(info);
    }
#endif
    return 0;
}

/* Offset of the first line called name; -1 with errno (ENOENT: no such line). */
static inline int cgpiod_priv_find_line(cgpiod_priv_chip *c, const char *name, unsigned int *offset)
{
#if CGPIOD_V1
    struct gpiod_line *line = gpiod_chip_find_line(c->chip, name);
    if (line == NULL)
        return -1;
    *offset = gpiod_line_offset(line);
#else
    int r = gpiod_chip_get_line_offset_from_name(c->chip, name);
    if (r < 0)
        return -1;
    *offset = (unsigned int)r;
#endif
    return 0;
}

/* The kernel's name of a line, "" if it has none or cannot be read. */
static inline void cgpiod_priv_line_name(cgpiod_priv_chip *c, unsigned int offset, char *dst, size_t len)
{
#if CGPIOD_V1
    struct gpiod_line *line = gpiod_chip_get_line(c->chip, offset);
    cgpiod_priv_copy(dst, len, line != NULL ? gpiod_line_name(line) : NULL);
#else
    struct gpiod_line_info *info = gpiod_chip_get_line_info(c->chip, offset);
    cgpiod_priv_copy(dst, len, info != NULL ? gpiod_line_info_get_name(info) : NULL);
    if (info != NULL)
        gpiod_line_info_free(info);
#endif
}

/* Whether a line is in use and by whom ("" if the kernel gives no consumer). */
static inline bool cgpiod_priv_line_consumer(cgpiod_priv_chip *c, unsigned int offset, char *dst, size_t len)
{
    bool used = false;
#if CGPIOD_V1
    struct gpiod_line *line = gpiod_chip_get_line(c->chip, offset);
    if (line != NULL && gpiod_line_update(line) == 0 && gpiod_line_is_used(line)) {
        used = true;
        cgpiod_priv_copy(dst, len, gpiod_line_consumer(line));
    }
#else
    struct gpiod_line_info *info = gpiod_chip_get_line_info(c->chip, offset);
    if (info != NULL) {
        if (gpiod_line_info_is_used(info)) {
            used = true;
            cgpiod_priv_copy(dst, len, gpiod_line_info_get_consumer(info));
        }
        gpiod_line_info_free(info);
    }
#endif
    return used;
}

/* Requests one line as output, logical value 0; stores it in out. -1 with errno. */
static inline int cgpiod_priv_request(cgpiod_priv_chip *c, cgpiod_output *out, const char *consumer)
{
#if CGPIOD_V1
    struct gpiod_line *line = gpiod_chip_get_line(c->chip, out->offset);
    int flags = out->active_low ? GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW : 0;
    if (line == NULL)
        return -1;
    if (gpiod_line_request_output_flags(line, consumer, flags, 0) < 0)
        return -1;
    out->chip = c->chip; /* the line lives as long as its chip */
    out->line = line;
    c->chip = NULL;
    return 0;
#else
    struct gpiod_line_settings *settings = gpiod_line_settings_new();
    struct gpiod_line_config *line_cfg = gpiod_line_config_new();
    struct gpiod_request_config *req_cfg = gpiod_request_config_new();
    struct gpiod_line_request *request = NULL;
    int e = ENOMEM;

    if (settings != NULL && line_cfg != NULL && req_cfg != NULL &&
        gpiod_line_settings_set_direction(settings, GPIOD_LINE_DIRECTION_OUTPUT) == 0 &&
        gpiod_line_settings_set_output_value(settings, GPIOD_LINE_VALUE_INACTIVE) == 0) {
        gpiod_line_settings_set_active_low(settings, out->active_low);
        gpiod_request_config_set_consumer(req_cfg, consumer);
        if (gpiod_line_config_add_line_settings(line_cfg, &out->offset, 1, settings) == 0)
            request = gpiod_chip_request_lines(c->chip, req_cfg, line_cfg);
        e = errno;
    }
    if (req_cfg != NULL)
        gpiod_request_config_free(req_cfg);
    if (line_cfg != NULL)
        gpiod_line_config_free(line_cfg);
    if (settings != NULL)
        gpiod_line_settings_free(settings);
    if (request == NULL) {
        errno = e;
        return -1;
    }
    out->request = request; /* independent of the chip, which is closed by the caller */
    return 0;
#endif
}

/*
 * Resolves a chip spec (path, name, number or label) to an open chip. On failure fills err,
 * prefixed with "GPIO chip ... line ...", and returns -1 with errno.
 */
static inline int cgpiod_priv_resolve_chip(const char *spec, const char *line_desc, cgpiod_priv_chip *c,
                                           char *err, size_t err_len)
{
    char path[CGPIOD_PATH_MAX];
    unsigned int nums[CGPIOD_MAX_CHIPS];
    char failed_path[CGPIOD_PATH_MAX] = "";
    int failed_errno = 0, n, i, e;

    if (strchr(spec, '/') != NULL || cgpiod_priv_is_uint(spec) ||
        (strncmp(spec, "gpiochip", 8) == 0 && cgpiod_priv_is_uint(spec + 8))) {
        if (strchr(spec, '/') != NULL)
            snprintf(path, sizeof path, "%s", spec);
        else if (cgpiod_priv_is_uint(spec))
            snprintf(path, sizeof path, "/dev/gpiochip%s", spec);
        else
            snprintf(path, sizeof path, "/dev/%s", spec);
        if (cgpiod_priv_chip_open(path, c) == 0)
            return 0;
        e = errno;
        if (strcmp(spec, path) == 0)
            cgpiod_priv_err(err, err_len, "GPIO chip \"%s\" %s: %s (%s)", spec, line_desc,
                            cgpiod_priv_open_reason(e), strerror(e));
        else
            cgpiod_priv_err(err, err_len, "GPIO chip \"%s\" (%s) %s: %s (%s)", spec, path, line_desc,
                            cgpiod_priv_open_reason(e), strerror(e));
        errno = e;
        return -1;
    }

    /* A label: look at every chip. */
    n = cgpiod_priv_list_chips(nums, CGPIOD_MAX_CHIPS);
    if (n < 0) {
        e = errno;
        cgpiod_priv_err(err, err_len, "GPIO chip \"%s\" %s: cannot list /dev (%s)", spec, line_desc,
                        strerror(e));
        errno = e;
        return -1;
    }
    for (i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/dev/gpiochip%u", nums[i]);
        if (cgpiod_priv_chip_open(path, c) < 0) {
            if (failed_errno == 0) {
                failed_errno = errno;
                snprintf(failed_path, sizeof failed_path, "%s", path);
            }
            continue;
        }
        if (strcmp(c->label, spec) == 0)
            return 0;
        cgpiod_priv_chip_close(c);
    }
    if (n == 0)
        cgpiod_priv_err(err, err_len, "GPIO chip \"%s\" %s: no such chip (%s); there are no /dev/gpiochipN devices",
                        spec, line_desc, strerror(ENOENT));
    else if (failed_errno != 0)
        cgpiod_priv_err(err, err_len, "GPIO chip \"%s\" %s: no such chip among those that could be opened; %s: %s (%s)",
                        spec, line_desc, failed_path, cgpiod_priv_open_reason(failed_errno), strerror(failed_errno));
    else
        cgpiod_priv_err(err, err_len, "GPIO chip \"%s\" %s: no such chip (%s); no chip has that label (%d checked)",
                        spec, line_desc, strerror(ENOENT), n);
    errno = failed_errno != 0 ? failed_errno : ENOENT;
    return -1;
}

/* Finds the first chip with a line called name, like gpiofind. -1 with errno and err filled. */
static inline int cgpiod_priv_search_line(const char *name, cgpiod_priv_chip *c, unsigned int *offset,
                                          char *err, size_t err_len)
{
    char path[CGPIOD_PATH_MAX];
    unsigned int nums[CGPIOD_MAX_CHIPS];
    char failed_path[CGPIOD_PATH_MAX] = "";
    int failed_errno = 0, n, i, e;

    n = cgpiod_priv_list_chips(nums, CGPIOD_MAX_CHIPS);
    if (n < 0) {
        e = errno;
        cgpiod_priv_err(err, err_len, "GPIO line \"%s\" (any chip): cannot list /dev (%s)", name, strerror(e));
        errno = e;
        return -1;
    }
    for (i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/dev/gpiochip%u", nums[i]);
        if (cgpiod_priv_chip_open(path, c) < 0) {
            e = errno;
        } else if (cgpiod_priv_find_line(c, name, offset) == 0) {
            return 0;
        } else {
            e = errno;
            cgpiod_priv_chip_close(c);
            if (e == ENOENT)
                continue;
        }
        if (failed_errno == 0) {
            failed_errno = e;
            snprintf(failed_path, sizeof failed_path, "%s", path);
        }
    }
    if (n == 0)
        cgpiod_priv_err(err, err_len, "GPIO line \"%s\" (any chip): no such line (%s); there are no /dev/gpiochipN devices",
                        name, strerror(ENOENT));
    else if (failed_errno != 0)
        cgpiod_priv_err(err, err_len, "GPIO line \"%s\" (any chip): no such line on the chips that could be read; %s: %s (%s)",
                        name, failed_path,
                        failed_errno == EACCES || failed_errno == EPERM ? "permission denied" : "cannot read it",
                        strerror(failed_errno));
    else
        cgpiod_priv_err(err, err_len, "GPIO line \"%s\" (any chip): no such line (%s); no chip has it (%d checked)", name,
                        strerror(ENOENT), n);
    errno = failed_errno != 0 ? failed_errno : ENOENT;
    return -1;
}

/* ---- API ---- */

/* 1 for libgpiod 1.x, 2 for libgpiod 2.x (decided at build time). */
static inline int cgpiod_api_major(void)
{
    return CGPIOD_V1 ? 1 : 2;
}

/* The libgpiod version string at run time, e.g. "1.6.3" or "2.1". */
static inline const char *cgpiod_library_version(void)
{
#if CGPIOD_V1
    return gpiod_version_string();
#else
    return gpiod_api_version();
#endif
}

/*
 * Requests one line as an output driven inactive (logical 0).
 * chip: path, name, number or label; NULL or "" to search all chips for line_name.
 * line_offset: >= 0, or -1 when line_name is given. line_name: NULL or "" when an offset is given.
 * consumer: shown by gpioinfo while the line is held.
 * Returns NULL with errno set and err (if not NULL) filled on failure.
 */
static inline cgpiod_output *cgpiod_output_open(const char *chip, int line_offset, const char *line_name,
                                                bool active_low, const char *consumer, char *err,
                                                size_t err_len)
{
    bool has_chip = chip != NULL && *chip != '\0';
    bool has_name = line_name != NULL && *line_name != '\0';
    char line_desc[2 * CGPIOD_NAME_MAX];
    char chip_desc[3 * CGPIOD_NAME_MAX];
    char used_by[CGPIOD_NAME_MAX];
    cgpiod_priv_chip c;
    cgpiod_output *out;
    int e;

    if (err != NULL && err_len > 0)
        err[0] = '\0';
    memset(&c, 0, sizeof c);

    if (has_name && line_offset >= 0) {
        cgpiod_priv_err(err, err_len, "GPIO chip \"%s\" line %d / \"%s\": give a line offset or a line name, not both",
                        has_chip ? chip : "", line_offset, line_name);
        errno = EINVAL;
        return NULL;
    }
    if (!has_name && line_offset < 0) {
        cgpiod_priv_err(err, err_len, "GPIO chip \"%s\": no line given (a line offset or a line name)",
                        has_chip ? chip : "");
        errno = EINVAL;
        return NULL;
    }
    if (has_name)
        snprintf(line_desc, sizeof line_desc, "line \"%s\"", line_name);
    else
        snprintf(line_desc, sizeof line_desc, "line %d", line_offset);
    if (!has_chip && !has_name) {
        cgpiod_priv_err(err, err_len, "GPIO %s: no chip given (a line offset needs a chip)", line_desc);
        errno = EINVAL;
        return NULL;
    }

    out = (cgpiod_output *)calloc(1, sizeof *out);
    if (out == NULL) {
        cgpiod_priv_err(err, err_len, "GPIO chip \"%s\" %s: %s", has_chip ? chip : "", line_desc, strerror(ENOMEM));
        errno = ENOMEM;
        return NULL;
    }
    out->active_low = active_low;

    /* The chip, and with a line name the offset. */
    if (has_chip) {
        if (cgpiod_priv_resolve_chip(chip, line_desc, &c, err, err_len) < 0)
            goto fail_errno;
    } else if (cgpiod_priv_search_line(line_name, &c, &out->offset, err, err_len) < 0) {
        goto fail_errno;
    }
    if (c.label[0] != '\0')
        snprintf(chip_desc, sizeof chip_desc, "%s [%s]", c.name, c.label);
    else
        snprintf(chip_desc, sizeof chip_desc, "%s", c.name);

    if (has_chip && has_name && cgpiod_priv_find_line(&c, line_name, &out->offset) < 0) {
        e = errno;
        cgpiod_priv_err(err, err_len, "GPIO chip %s %s: %s (%s)", chip_desc, line_desc,
                        e == ENOENT ? "no such line" : "cannot read line names", strerror(e));
        goto fail;
    }
    if (!has_name) {
        if ((unsigned int)line_offset >= c.num_lines) {
            e = EINVAL;
            cgpiod_priv_err(err, err_len, "GPIO chip %s %s: no such line (the chip has %u lines, 0...%u) (%s)",
                            chip_desc, line_desc, c.num_lines, c.num_lines > 0 ? c.num_lines - 1 : 0,
                            strerror(e));
            goto fail;
        }
        out->offset = (unsigned int)line_offset;
    }

    cgpiod_priv_copy(out->chip_path, sizeof out->chip_path, c.path);
    cgpiod_priv_copy(out->chip_name, sizeof out->chip_name, c.name);
    cgpiod_priv_copy(out->chip_label, sizeof out->chip_label, c.label);
    cgpiod_priv_line_name(&c, out->offset, out->line_name, sizeof out->line_name);
    if (out->line_name[0] != '\0')
        snprintf(line_desc, sizeof line_desc, "line %u \"%s\"", out->offset, out->line_name);
    else
        snprintf(line_desc, sizeof line_desc, "line %u", out->offset);
    snprintf(out->description, sizeof out->description, "%s %s%s", chip_desc, line_desc,
             active_low ? " active-low" : "");

    if (cgpiod_priv_request(&c, out, consumer != NULL ? consumer : "") < 0) {
        e = errno;
        if (e == EBUSY) {
            used_by[0] = '\0';
            if (!cgpiod_priv_line_consumer(&c, out->offset, used_by, sizeof used_by))
                cgpiod_priv_err(err, err_len, "GPIO chip %s %s: line busy (%s)", chip_desc, line_desc, strerror(e));
            else if (used_by[0] != '\0')
                cgpiod_priv_err(err, err_len, "GPIO chip %s %s: line busy, used by consumer \"%s\" (%s)", chip_desc,
                                line_desc, used_by, strerror(e));
            else
                cgpiod_priv_err(err, err_len, "GPIO chip %s %s: line busy, used by an unnamed consumer (%s)",
                                chip_desc, line_desc, strerror(e));
        } else {
            cgpiod_priv_err(err, err_len, "GPIO chip %s %s: %s (%s)", chip_desc, line_desc,
                            e == EACCES || e == EPERM ? "permission denied" : "cannot request the line as output",
                            strerror(e));
        }
        goto fail;
    }
    cgpiod_priv_chip_close(&c); /* v1: already handed to out */
    return out;

fail_errno:
    e = errno;
fail:
    cgpiod_priv_chip_close(&c);
    free(out);
    errno = e;
    return NULL;
}

/* Sets the logical value (0 inactive, non-zero active; active_low decides the level). 0 or -1. */
static inline int cgpiod_output_set(cgpiod_output *out, int value, char *err, size_t err_len)
{
    int r, e;

    if (out == NULL) {
        cgpiod_priv_err(err, err_len, "GPIO: no line (the request failed or was released)");
        errno = EINVAL;
        return -1;
    }
#if CGPIOD_V1
    r = gpiod_line_set_value(out->line, value != 0 ? 1 : 0);
#else
    r = gpiod_line_request_set_value(out->request, out->offset,
                                     value != 0 ? GPIOD_LINE_VALUE_ACTIVE : GPIOD_LINE_VALUE_INACTIVE);
#endif
    if (r < 0) {
        e = errno;
        cgpiod_priv_err(err, err_len, "GPIO chip %s: cannot set the line %s (%s)", out->description,
                        value != 0 ? "active" : "inactive", strerror(e));
        errno = e;
        return -1;
    }
    return 0;
}

/* Drives the line inactive, releases it and frees out. NULL is ignored; out is invalid afterwards. */
static inline void cgpiod_output_release(cgpiod_output *out)
{
    if (out == NULL)
        return;
#if CGPIOD_V1
    if (out->line != NULL) {
        gpiod_line_set_value(out->line, 0);
        gpiod_line_release(out->line);
    }
    if (out->chip != NULL)
        gpiod_chip_close(out->chip);
#else
    if (out->request != NULL) {
        gpiod_line_request_set_value(out->request, out->offset, GPIOD_LINE_VALUE_INACTIVE);
        gpiod_line_request_release(out->request);
    }
#endif
    free(out);
}

/* The resolved chip and line, e.g. "gpiochip0 [gpio-sim.0-node0] line 5 \"haptic\" active-low". */
static inline const char *cgpiod_output_description(const cgpiod_output *out)
{
    return out != NULL ? out->description : "";
}

/* Chip name, e.g. "gpiochip0". */
static inline const char *cgpiod_output_chip_name(const cgpiod_output *out)
{
    return out != NULL ? out->chip_name : "";
}

/* Chip label, e.g. "gpio-sim.0-node0"; may be "". */
static inline const char *cgpiod_output_chip_label(const cgpiod_output *out)
{
    return out != NULL ? out->chip_label : "";
}

/* Line offset within the chip. */
static inline unsigned int cgpiod_output_line_offset(const cgpiod_output *out)
{
    return out != NULL ? out->offset : 0;
}

/* Line name as the kernel has it; may be "". */
static inline const char *cgpiod_output_line_name(const cgpiod_output *out)
{
    return out != NULL ? out->line_name : "";
}

#endif /* CGPIOD_SHIM_H */
