/*
 * Checks for the CGPIOD target (Sources/CGPIOD), built against whichever libgpiod is on the
 * include path: what Swift relies on is that every failure comes back as NULL or -1 with the
 * errno it reads as a reason.
 *
 *   shim_check                          error paths that need no GPIO chip; "N passed, N failed"
 *   shim_check version                  libgpiod version and API the binary was built for
 *   shim_check info PATH                the chip's name, label and lines (name, used, consumer)
 *   shim_check find PATH NAME           "offset: N" for the line called NAME
 *   shim_check try PATH OFFSET          request the line and release it at once: "ok"
 *   shim_check hold PATH OFFSET VALUE [active-low]
 *       request, print "held", set VALUE, print "set: VALUE", wait for the end of standard input
 *       (the caller closes it once its checks are done, however slow the machine), release,
 *       print "released"
 *
 * A failure prints "error: ERRNO_NAME (text)" and exits 1. The consumer is "shim-check".
 */
#define _POSIX_C_SOURCE 200809L

#include "CGPIOD.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONSUMER "shim-check"

static int passed, failed;

static const char *errno_name(int e)
{
    switch (e) {
    case 0: return "0";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EBUSY: return "EBUSY";
    case EINVAL: return "EINVAL";
    case ENOTTY: return "ENOTTY";
    case ENODEV: return "ENODEV";
    case EISDIR: return "EISDIR";
    default: return "other";
    }
}

static void check(const char *name, bool ok, int e)
{
    if (ok)
        passed++;
    else
        failed++;
    printf("%s: %s: errno %s (%s)\n", ok ? "ok" : "FAIL", name, errno_name(e), strerror(e));
}

/* Swift reads ENOTTY and ENODEV as "not a GPIO chip". */
static bool not_a_chip(int e)
{
    return e == ENOTTY || e == ENODEV;
}

static int offline_checks(void)
{
    char tmpl[] = "/tmp/shim-check-XXXXXX";
    char name[16], consumer[16];
    cgpiod_chip *chip;
    int fd, r, e;

    printf("libgpiod %s (API v%d)\n", cgpiod_library_version(), cgpiod_api_major());

    errno = 0;
    chip = cgpiod_chip_open("/dev/gpiochip999");
    e = errno;
    check("missing chip device: NULL, ENOENT", chip == NULL && e == ENOENT, e);
    cgpiod_chip_close(chip);

    errno = 0;
    chip = cgpiod_chip_open("/dev/null");
    e = errno;
    check("character device that is not a GPIO chip: NULL, ENOTTY or ENODEV", chip == NULL && not_a_chip(e), e);
    cgpiod_chip_close(chip);

    fd = mkstemp(tmpl);
    if (fd >= 0) {
        close(fd);
        errno = 0;
        chip = cgpiod_chip_open(tmpl);
        e = errno;
        check("regular file: NULL, ENOTTY or ENODEV", chip == NULL && not_a_chip(e), e);
        cgpiod_chip_close(chip);
        unlink(tmpl);
    } else {
        check("temporary file for the regular-file check", false, errno);
    }

    errno = 0;
    chip = cgpiod_chip_open(NULL);
    e = errno;
    check("no path: NULL, EINVAL", chip == NULL && e == EINVAL, e);

    check("getters on no chip: empty",
          strcmp(cgpiod_chip_name(NULL), "") == 0 && strcmp(cgpiod_chip_label(NULL), "") == 0 &&
              cgpiod_chip_num_lines(NULL) == 0,
          0);

    errno = 0;
    r = cgpiod_chip_find_line(NULL, "haptic");
    e = errno;
    check("find a line on no chip: -1, EINVAL", r == -1 && e == EINVAL, e);

    memset(name, 'x', sizeof name);
    memset(consumer, 'x', sizeof consumer);
    errno = 0;
    r = cgpiod_chip_line_info(NULL, 0, name, sizeof name, consumer, sizeof consumer);
    e = errno;
    check("line info on no chip: -1, EINVAL, both names emptied",
          r == -1 && e == EINVAL && name[0] == '\0' && consumer[0] == '\0', e);
    errno = 0;
    r = cgpiod_chip_line_info(NULL, 0, NULL, 0, NULL, 0);
    e = errno;
    check("line info without buffers: -1, EINVAL", r == -1 && e == EINVAL, e);

    errno = 0;
    r = cgpiod_output_request(NULL, 0, false, CONSUMER) == NULL;
    e = errno;
    check("request on no chip: NULL, EINVAL", r && e == EINVAL, e);
    errno = 0;
    r = cgpiod_output_set(NULL, true);
    e = errno;
    check("set on no output: -1, EINVAL", r == -1 && e == EINVAL, e);

    cgpiod_output_release(NULL);
    cgpiod_chip_close(NULL);
    check("release and close of nothing return", true, 0);

    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

static int fail_with(int e)
{
    printf("error: %s (%s)\n", errno_name(e), strerror(e));
    return 1;
}

static cgpiod_chip *open_chip(const char *path)
{
    cgpiod_chip *chip = cgpiod_chip_open(path);
    if (chip == NULL)
        fail_with(errno);
    return chip;
}

int main(int argc, char **argv)
{
    char name[64], consumer[64];
    cgpiod_chip *chip;
    cgpiod_output *out;
    unsigned int i;
    int r;

    if (argc == 1)
        return offline_checks();

    if (strcmp(argv[1], "version") == 0 && argc == 2) {
        printf("libgpiod %s (API v%d)\n", cgpiod_library_version(), cgpiod_api_major());
        return 0;
    }

    if (strcmp(argv[1], "info") == 0 && argc == 3) {
        if ((chip = open_chip(argv[2])) == NULL)
            return 1;
        printf("chip: %s [%s] lines %u\n", cgpiod_chip_name(chip), cgpiod_chip_label(chip), cgpiod_chip_num_lines(chip));
        for (i = 0; i < cgpiod_chip_num_lines(chip); i++) {
            r = cgpiod_chip_line_info(chip, i, name, sizeof name, consumer, sizeof consumer);
            if (r < 0)
                printf("line %u: error: %s\n", i, errno_name(errno));
            else
                printf("line %u: \"%s\" %s \"%s\"\n", i, name, r ? "used" : "free", consumer);
        }
        cgpiod_chip_close(chip);
        return 0;
    }

    if (strcmp(argv[1], "find") == 0 && argc == 4) {
        if ((chip = open_chip(argv[2])) == NULL)
            return 1;
        r = cgpiod_chip_find_line(chip, argv[3]);
        if (r < 0) {
            r = fail_with(errno);
        } else {
            printf("offset: %d\n", r);
            r = 0;
        }
        cgpiod_chip_close(chip);
        return r;
    }

    if ((strcmp(argv[1], "try") == 0 && argc == 4) ||
        (strcmp(argv[1], "hold") == 0 && (argc == 5 || argc == 6))) {
        bool hold = argv[1][0] == 'h';
        if ((chip = open_chip(argv[2])) == NULL)
            return 1;
        out = cgpiod_output_request(chip, (unsigned int)atoi(argv[3]), argc == 6 && strcmp(argv[5], "active-low") == 0,
                                    CONSUMER);
        r = errno;
        /* The output lives on without the chip handle. */
        cgpiod_chip_close(chip);
        if (out == NULL)
            return fail_with(r);
        if (!hold) {
            cgpiod_output_release(out);
            printf("ok\n");
            return 0;
        }
        printf("held\n");
        fflush(stdout);
        if (cgpiod_output_set(out, atoi(argv[4]) != 0) < 0) {
            r = fail_with(errno);
            cgpiod_output_release(out);
            return r;
        }
        printf("set: %d\n", atoi(argv[4]) != 0);
        fflush(stdout);
        while (getchar() != EOF) {
        }
        cgpiod_output_release(out);
        printf("released\n");
        return 0;
    }

    fprintf(stderr,
            "usage: %s [version | info PATH | find PATH NAME | try PATH OFFSET | hold PATH OFFSET VALUE [active-low]]\n",
            argv[0]);
    return 2;
}
