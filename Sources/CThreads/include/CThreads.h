#ifndef DASHCAM_CTHREADS_H
#define DASHCAM_CTHREADS_H
// pthread_setname_np needs _GNU_SOURCE, which Glibc's Swift module does not set.

/// Names the calling thread (the kernel keeps 15 bytes); returns 0 or an error number.
int dashcam_name_this_thread(const char *name);

#endif
