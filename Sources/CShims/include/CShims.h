#ifndef DASHCAM_CSHIMS_H
#define DASHCAM_CSHIMS_H
// One tiny function or constant for each C macro or variadic function Swift cannot import.
// Nothing else belongs here.

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <linux/videodev2.h>
#include <libv4l2.h>
#include <libavutil/error.h>
#include <libavutil/avutil.h>

// FFmpeg
static inline int dashcam_averror(int posix_errno) { return AVERROR(posix_errno); }
static const int dashcam_averror_eof = AVERROR_EOF;
static const int64_t dashcam_av_nopts_value = AV_NOPTS_VALUE;

// libv4l2: variadic open/ioctl
static inline int dashcam_v4l2_open(const char *path, int flags) { return v4l2_open(path, flags); }
static inline int dashcam_v4l2_ioctl(int fd, unsigned long request, void *arg) {
    return v4l2_ioctl(fd, request, arg);
}

// The kernel's clock discipline, read-only (adjtimex with no modes): 1 synchronised, 0 not,
// -1 unknown (errno says why). TIME_ERROR and STA_UNSYNC are macros.
#include <sys/timex.h>
static inline int dashcam_clock_synchronised(void) {
    struct timex t = {0};
    int state = adjtimex(&t);
    if (state < 0) return -1;
    return (state == TIME_ERROR || (t.status & STA_UNSYNC)) ? 0 : 1;
}

// The kernel's own ioctl, to look at a device before libv4l2 does (libv4l2 prints to stderr).
#include <sys/ioctl.h>
static inline int dashcam_ioctl(int fd, unsigned long request, void *arg) { return ioctl(fd, request, arg); }

// V4L2 ioctl requests
static const unsigned long dashcam_VIDIOC_QUERYCAP = VIDIOC_QUERYCAP;
static const unsigned long dashcam_VIDIOC_ENUM_FMT = VIDIOC_ENUM_FMT;
static const unsigned long dashcam_VIDIOC_ENUM_FRAMESIZES = VIDIOC_ENUM_FRAMESIZES;
static const unsigned long dashcam_VIDIOC_ENUM_FRAMEINTERVALS = VIDIOC_ENUM_FRAMEINTERVALS;
static const unsigned long dashcam_VIDIOC_G_FMT = VIDIOC_G_FMT;
static const unsigned long dashcam_VIDIOC_S_FMT = VIDIOC_S_FMT;
static const unsigned long dashcam_VIDIOC_G_PARM = VIDIOC_G_PARM;
static const unsigned long dashcam_VIDIOC_S_PARM = VIDIOC_S_PARM;
static const unsigned long dashcam_VIDIOC_REQBUFS = VIDIOC_REQBUFS;
static const unsigned long dashcam_VIDIOC_QUERYBUF = VIDIOC_QUERYBUF;
static const unsigned long dashcam_VIDIOC_QBUF = VIDIOC_QBUF;
static const unsigned long dashcam_VIDIOC_DQBUF = VIDIOC_DQBUF;
static const unsigned long dashcam_VIDIOC_STREAMON = VIDIOC_STREAMON;
static const unsigned long dashcam_VIDIOC_STREAMOFF = VIDIOC_STREAMOFF;

// V4L2 pixel formats (fourcc macros)
static const uint32_t dashcam_V4L2_PIX_FMT_YUYV = V4L2_PIX_FMT_YUYV;
static const uint32_t dashcam_V4L2_PIX_FMT_NV12 = V4L2_PIX_FMT_NV12;
static const uint32_t dashcam_V4L2_PIX_FMT_YUV420 = V4L2_PIX_FMT_YUV420;
static const uint32_t dashcam_V4L2_PIX_FMT_MJPEG = V4L2_PIX_FMT_MJPEG;
static const uint32_t dashcam_V4L2_PIX_FMT_JPEG = V4L2_PIX_FMT_JPEG;
// What a memory-to-memory encoder makes (its capture queue), for finding one.
static const uint32_t dashcam_V4L2_PIX_FMT_H264 = V4L2_PIX_FMT_H264;
static const uint32_t dashcam_V4L2_PIX_FMT_HEVC = V4L2_PIX_FMT_HEVC;

// rtnetlink: the alignment macros of <linux/netlink.h> and <linux/rtnetlink.h>. The structs
// (nlmsghdr, rtattr, rtmsg, ifaddrmsg, ifinfomsg, rtnexthop, sockaddr_nl) and the constants
// (RTM_*, RTMGRP_*, IFA_*, IFLA_*, RTA_*, NLM_F_*) import as they are; offsets are added in Swift.
// <sys/eventfd.h> is here for eventfd(), which Glibc's module leaves out.
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/eventfd.h>
static inline uint32_t dashcam_nlmsg_align(uint32_t len) { return NLMSG_ALIGN(len); }
static const uint32_t dashcam_NLMSG_HDRLEN = NLMSG_HDRLEN;
static inline uint32_t dashcam_rta_align(uint32_t len) { return RTA_ALIGN(len); }
static const uint32_t dashcam_RTA_HDRLEN = RTA_LENGTH(0);
static inline uint32_t dashcam_rtnh_align(uint32_t len) { return RTNH_ALIGN(len); }

// glibc's heap: M_MMAP_THRESHOLD is a macro.
#include <malloc.h>
static inline int dashcam_set_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }

#endif
