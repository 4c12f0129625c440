#include <libavformat/avformat.h>
#include <libavformat/avio.h>
#include <libavcodec/avcodec.h>
#include <libswscale/swscale.h>
#include <libavutil/avutil.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libavutil/sha.h>
#include <libavutil/mem.h>

/// The pixel formats `codec` takes, ending in AV_PIX_FMT_NONE; NULL when it does not say.
/// libavcodec 61.13 (FFmpeg 7.1) asks through avcodec_get_supported_config and deprecates
/// AVCodec.pix_fmts; older releases (Debian 12's FFmpeg 5.1) only have the field.
static inline const enum AVPixelFormat *cffmpeg_supported_pixel_formats(const AVCodec *codec) {
#if LIBAVCODEC_VERSION_INT >= AV_VERSION_INT(61, 13, 100)
    const void *formats = NULL;
    if (avcodec_get_supported_config(NULL, codec, AV_CODEC_CONFIG_PIX_FORMAT, 0, &formats, NULL) < 0) {
        return NULL;
    }
    return (const enum AVPixelFormat *)formats;
#else
    return codec->pix_fmts;
#endif
}

#include <libavutil/hwcontext.h>
