#ifndef CGPIOD_H
#define CGPIOD_H
/*
 * One GPIO output or input line through libgpiod, whichever API the system has: 1.x (Debian 12)
 * or 2.x (Debian 13). Only the difference between the two lives here; finding a chip by path or
 * label, naming lines and wording errors is Swift's (HAL/GPIO).
 *
 * Every call that fails returns NULL or -1 with errno set, as libgpiod and the kernel left it.
 * A handle is not thread-safe; separate handles are independent.
 */

#include <stdbool.h>
#include <stddef.h>

/* An open chip device, for its name, label and lines. */
typedef struct cgpiod_chip cgpiod_chip;
/* One line requested as an output. */
typedef struct cgpiod_output cgpiod_output;
/* One line requested as an input that reports both edges. */
typedef struct cgpiod_input cgpiod_input;

/* 1 for libgpiod 1.x, 2 for 2.x (decided at build time). */
int cgpiod_api_major(void);
/* The libgpiod version at run time, e.g. "1.6.3" or "2.2.1". */
const char *cgpiod_library_version(void);

/* Opens the chip device at path (ENOENT: none; ENOTTY or ENODEV: not a GPIO chip). */
cgpiod_chip *cgpiod_chip_open(const char *path);
void cgpiod_chip_close(cgpiod_chip *chip);
/* The kernel's name ("gpiochip0") and label ("pinctrl-bcm2711", may be ""); "" for NULL. */
const char *cgpiod_chip_name(const cgpiod_chip *chip);
const char *cgpiod_chip_label(const cgpiod_chip *chip);
unsigned int cgpiod_chip_num_lines(const cgpiod_chip *chip);

/* Offset of the first line called name (ENOENT: no line has it). */
int cgpiod_chip_find_line(cgpiod_chip *chip, const char *name);
/*
 * What the kernel says of the line at offset now: its name and its consumer, copied ("" if it has
 * none, truncated to the buffer). 1 if someone holds the line, 0 if it is free, -1 on error.
 */
int cgpiod_chip_line_info(cgpiod_chip *chip, unsigned int offset, char *name, size_t name_len,
                          char *consumer, size_t consumer_len);

/*
 * Requests the line at offset as an output driven inactive, shown as consumer while held
 * (EBUSY: someone else holds it; EINVAL: no such offset). The output does not need the chip
 * handle afterwards.
 */
cgpiod_output *cgpiod_output_request(cgpiod_chip *chip, unsigned int offset, bool active_low,
                                     const char *consumer);
/* Drives the line active or inactive (logical values: active_low decides the level). */
int cgpiod_output_set(cgpiod_output *out, bool active);
/* Drives the line inactive, gives it back and frees out. NULL is ignored. */
void cgpiod_output_release(cgpiod_output *out);


/*
 * Requests the line at offset as an input with edge events on both edges, shown as consumer
 * while held (errors as for an output). The input does not need the chip handle afterwards.
 */
cgpiod_input *cgpiod_input_request(cgpiod_chip *chip, unsigned int offset, bool active_low,
                                   const char *consumer);
/*
 * Waits up to timeout_ns for an edge; 1 if one (or more) arrived, 0 on timeout, -1 on error.
 * The events waiting are read and dropped: the caller reads the level with cgpiod_input_get.
 */
int cgpiod_input_wait(cgpiod_input *in, long long timeout_ns);
/* The logical level now (1 active, 0 inactive: active_low decides), or -1. */
int cgpiod_input_get(cgpiod_input *in);
/* Gives the line back and frees in. NULL is ignored. */
void cgpiod_input_release(cgpiod_input *in);

#endif
