/*
 * Checks for Sources/CGPIOD/shim.h, built against whichever libgpiod is on the include path.
 *
 *   shim_check                          error paths that need no GPIO chip; "N passed, N failed"
 *   shim_check version                  libgpiod version and API the binary was built for
 *   shim_check try CHIP LINE [active-low]
 *       request the line and release it at once; prints "ok: DESCRIPTION" or "error: MESSAGE"
 *   shim_check hold CHIP LINE VALUE SECONDS [active-low]
 *       request, print "held: DESCRIPTION", set VALUE, wait SECONDS, release, print "released"
 *
 * CHIP is a path, name, number or label, or "-" for none; LINE is an offset if all digits, else a
 * line name. The consumer is "shim-check".
 */
#define _POSIX_C_SOURCE 200809L

#include "shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONSUMER "shim-check"

static int passed, failed;

static void check(const char *name, bool ok, const char *detail)
{
    if (ok) {
        passed++;
        printf("ok: %s: %s\n", name, detail);
    } else {
        failed++;
        printf("FAIL: %s: %s\n", name, detail);
    }
}

/* Expects cgpiod_output_open to fail with a message containing every string in want (NULL-ended). */
static void expect_open_error(const char *name, const char *chip, int offset, const char *line_name,
                              int want_errno, const char *const *want)
{
    char err[512];
    cgpiod_output *out;
    bool ok = true;
    int e, i;

    errno = 0;
    out = cgpiod_output_open(chip, offset, line_name, false, CONSUMER, err, sizeof err);
    e = errno;
    if (out != NULL) {
        check(name, false, "opened, expected an error");
        cgpiod_output_release(out);
        return;
    }
    for (i = 0; want[i] != NULL; i++)
        if (strstr(err, want[i]) == NULL) {
            ok = false;
            printf("  message lacks \"%s\"\n", want[i]);
        }
    if (want_errno != 0 && e != want_errno) {
        ok = false;
        printf("  errno %d (%s), expected %d (%s)\n", e, strerror(e), want_errno, strerror(want_errno));
    }
    check(name, ok, err);
}

static int offline_checks(void)
{
    char err[512], tmpl[] = "/tmp/shim-check-XXXXXX";
    char small[24];
    cgpiod_output *out;
    int fd;

    printf("libgpiod %s (API v%d)\n", cgpiod_library_version(), cgpiod_api_major());

    expect_open_error("missing chip by name", "gpiochip999", 3, NULL, ENOENT,
                      (const char *const[]){"gpiochip999", "/dev/gpiochip999", "line 3", "no such chip",
                                            strerror(ENOENT), NULL});
    expect_open_error("missing chip by path", "/dev/gpiochip999", 0, NULL, ENOENT,
                      (const char *const[]){"\"/dev/gpiochip999\"", "line 0", "no such chip", NULL});
    expect_open_error("missing chip by number", "999", 0, NULL, ENOENT,
                      (const char *const[]){"\"999\"", "/dev/gpiochip999", "no such chip", NULL});
    expect_open_error("missing chip by label", "no-such-gpio-label", 1, NULL, ENOENT,
                      (const char *const[]){"\"no-such-gpio-label\"", "line 1", "no such chip", NULL});
    expect_open_error("missing chip, line by name", "gpiochip999", -1, "haptic", ENOENT,
                      (const char *const[]){"gpiochip999", "line \"haptic\"", "no such chip", NULL});
    expect_open_error("missing line name on all chips", NULL, -1, "no-such-gpio-line", ENOENT,
                      (const char *const[]){"line \"no-such-gpio-line\"", "any chip", "no such line", NULL});
    expect_open_error("character device that is not a GPIO chip", "/dev/null", 0, NULL, 0,
                      (const char *const[]){"\"/dev/null\"", "line 0", "not a GPIO chip", NULL});

    fd = mkstemp(tmpl);
    if (fd >= 0) {
        close(fd);
        expect_open_error("regular file", tmpl, 0, NULL, 0,
                          (const char *const[]){tmpl, "not a GPIO chip", NULL});
        unlink(tmpl);
    }

    expect_open_error("neither offset nor name", "gpiochip0", -1, NULL, EINVAL,
                      (const char *const[]){"\"gpiochip0\"", "no line given", NULL});
    expect_open_error("both offset and name", "gpiochip0", 2, "haptic", EINVAL,
                      (const char *const[]){"\"gpiochip0\"", "line 2", "\"haptic\"", "not both", NULL});
    expect_open_error("offset without chip", NULL, 2, "", EINVAL,
                      (const char *const[]){"line 2", "no chip given", NULL});

    memset(small, 'x', sizeof small);
    out = cgpiod_output_open("gpiochip999", 0, NULL, false, CONSUMER, small, sizeof small);
    check("small error buffer is truncated and terminated",
          out == NULL && memchr(small, '\0', sizeof small) == small + sizeof small - 1, small);

    errno = 0;
    out = cgpiod_output_open("gpiochip999", 0, NULL, true, CONSUMER, NULL, 0);
    check("no error buffer", out == NULL && errno == ENOENT, strerror(errno));

    check("set on no handle", cgpiod_output_set(NULL, 1, err, sizeof err) == -1 && errno == EINVAL, err);
    cgpiod_output_release(NULL);
    check("release of no handle", true, "returned");
    check("getters on no handle",
          strcmp(cgpiod_output_description(NULL), "") == 0 && strcmp(cgpiod_output_chip_name(NULL), "") == 0 &&
              strcmp(cgpiod_output_chip_label(NULL), "") == 0 && strcmp(cgpiod_output_line_name(NULL), "") == 0 &&
              cgpiod_output_line_offset(NULL) == 0,
          "empty");

    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

static cgpiod_output *open_from_args(const char *chip, const char *line, bool active_low, char *err, size_t len)
{
    const char *c = strcmp(chip, "-") == 0 ? NULL : chip;
    if (cgpiod_priv_is_uint(line))
        return cgpiod_output_open(c, atoi(line), NULL, active_low, CONSUMER, err, len);
    return cgpiod_output_open(c, -1, line, active_low, CONSUMER, err, len);
}

int main(int argc, char **argv)
{
    char err[512];
    cgpiod_output *out;

    if (argc == 1)
        return offline_checks();

    if (strcmp(argv[1], "version") == 0 && argc == 2) {
        printf("libgpiod %s (API v%d)\n", cgpiod_library_version(), cgpiod_api_major());
        return 0;
    }

    if (strcmp(argv[1], "try") == 0 && (argc == 4 || argc == 5)) {
        out = open_from_args(argv[2], argv[3], argc == 5 && strcmp(argv[4], "active-low") == 0, err, sizeof err);
        if (out == NULL) {
            printf("error: %s\n", err);
            return 1;
        }
        printf("ok: %s (chip %s, label %s, offset %u, line name %s)\n", cgpiod_output_description(out),
               cgpiod_output_chip_name(out), cgpiod_output_chip_label(out), cgpiod_output_line_offset(out),
               cgpiod_output_line_name(out));
        cgpiod_output_release(out);
        return 0;
    }

    if (strcmp(argv[1], "hold") == 0 && (argc == 6 || argc == 7)) {
        out = open_from_args(argv[2], argv[3], argc == 7 && strcmp(argv[6], "active-low") == 0, err, sizeof err);
        if (out == NULL) {
            printf("error: %s\n", err);
            return 1;
        }
        printf("held: %s\n", cgpiod_output_description(out));
        fflush(stdout);
        if (cgpiod_output_set(out, atoi(argv[4]), err, sizeof err) < 0) {
            printf("error: %s\n", err);
            cgpiod_output_release(out);
            return 1;
        }
        printf("set: %d\n", atoi(argv[4]) != 0);
        fflush(stdout);
        sleep((unsigned int)atoi(argv[5]));
        cgpiod_output_release(out);
        printf("released\n");
        return 0;
    }

    fprintf(stderr, "usage: %s [version | try CHIP LINE [active-low] | hold CHIP LINE VALUE SECONDS [active-low]]\n",
            argv[0]);
    return 2;
}
