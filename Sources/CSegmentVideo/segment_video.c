#include "CSegmentVideo.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
#include <stdio.h>
#include <string.h>

static int fail(int status, const char *what, char *error, size_t error_size) {
    if (error && error_size > 0) {
        char text[128] = "";
        av_strerror(status, text, sizeof text);
        snprintf(error, error_size, "%s: %s", what, text);
    }
    return status < 0 ? status : AVERROR_UNKNOWN;
}

void segment_video_free(segment_video_buffer *buffer) {
    av_freep(&buffer->data);
    buffer->size = 0;
}

// MARK: - Reading

/// The segment's bytes, read by libavformat from memory: no file, no protocol, no URL.
typedef struct {
    const uint8_t *data;
    size_t size;
    size_t position;
} memory_input;

static int memory_read(void *opaque, uint8_t *buffer, int wanted) {
    memory_input *input = opaque;
    size_t left = input->size - input->position;
    if (left == 0) return AVERROR_EOF;
    size_t count = (size_t)wanted < left ? (size_t)wanted : left;
    memcpy(buffer, input->data + input->position, count);
    input->position += count;
    return (int)count;
}

static int64_t memory_seek(void *opaque, int64_t offset, int whence) {
    memory_input *input = opaque;
    if (whence & AVSEEK_SIZE) return (int64_t)input->size;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = (int64_t)input->position; break;
    case SEEK_END: base = (int64_t)input->size; break;
    default: return AVERROR(EINVAL);
    }
    // Both are within 0…size (size ≤ INT64_MAX): the sum cannot overflow unless offset is huge.
    if (offset > (int64_t)input->size || offset < -(int64_t)input->size) return AVERROR(EINVAL);
    int64_t target = base + offset;
    if (target < 0 || target > (int64_t)input->size) return AVERROR(EINVAL);
    input->position = (size_t)target;
    return target;
}

typedef struct {
    AVFormatContext *format;
    AVIOContext *io;
    memory_input input;
    AVCodecContext *decoder;
    AVPacket *packet;
    AVFrame *frame;
    AVRational time_base;
    AVRational frame_rate;
    int64_t frames; // the stream's own count, 0 when it has none
    int stream;
    int draining;
} reader;

static void reader_close(reader *r) {
    av_frame_free(&r->frame);
    av_packet_free(&r->packet);
    avcodec_free_context(&r->decoder);
    avformat_close_input(&r->format);
    if (r->io) av_freep(&r->io->buffer);
    avio_context_free(&r->io);
}

/// Opens `data` as MP4 and nothing else: the MP4 demuxer is named (no probing of other formats),
/// no protocol may be opened (a reference to another file or URL fails), and external data
/// references stay off.
static int demuxer_open(reader *r, const uint8_t *data, size_t size, char *error, size_t error_size) {
    memset(r, 0, sizeof *r);
    r->input = (memory_input){data, size, 0};
    const int buffer_size = 32768;
    uint8_t *buffer = av_malloc(buffer_size);
    if (!buffer) return fail(AVERROR(ENOMEM), "cannot read the segment", error, error_size);
    r->io = avio_alloc_context(buffer, buffer_size, 0, &r->input, memory_read, NULL, memory_seek);
    r->format = avformat_alloc_context();
    if (!r->io || !r->format) {
        if (!r->io) av_free(buffer);
        reader_close(r);
        return fail(AVERROR(ENOMEM), "cannot read the segment", error, error_size);
    }
    r->format->pb = r->io;
    r->format->flags |= AVFMT_FLAG_CUSTOM_IO;
    AVDictionary *options = NULL;
    av_dict_set(&options, "format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2", 0);
    av_dict_set(&options, "protocol_whitelist", "none", 0);
    av_dict_set(&options, "enable_drefs", "0", 0);
    int status = avformat_open_input(&r->format, NULL, av_find_input_format("mp4"), &options);
    av_dict_free(&options);
    if (status < 0) {
        // avformat_open_input freed the context on failure.
        reader_close(r);
        return fail(status, "not an MP4 segment", error, error_size);
    }
    return 0;
}

static int reader_open(reader *r, const uint8_t *data, size_t size, char *error, size_t error_size) {
    int status = demuxer_open(r, data, size, error, error_size);
    if (status < 0) return status;
    const AVCodec *codec = NULL;
    r->stream = av_find_best_stream(r->format, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (r->stream < 0 || !codec) {
        reader_close(r);
        return fail(r->stream < 0 ? r->stream : AVERROR_DECODER_NOT_FOUND, "no video stream FFmpeg can decode", error, error_size);
    }
    AVStream *stream = r->format->streams[r->stream];
    if (stream->codecpar->width <= 0 || stream->codecpar->height <= 0 || stream->codecpar->width > SEGMENT_VIDEO_MAX_WIDTH ||
        stream->codecpar->height > SEGMENT_VIDEO_MAX_HEIGHT) {
        reader_close(r);
        return fail(AVERROR_INVALIDDATA, "the video's size is not within 1…" SEGMENT_VIDEO_MAX_SIZE_TEXT, error, error_size);
    }
    r->time_base = stream->time_base;
    r->frame_rate = stream->avg_frame_rate;
    r->frames = stream->nb_frames;
    r->decoder = avcodec_alloc_context3(codec);
    r->packet = av_packet_alloc();
    r->frame = av_frame_alloc();
    if (!r->decoder || !r->packet || !r->frame) {
        reader_close(r);
        return fail(AVERROR(ENOMEM), "cannot decode", error, error_size);
    }
    // One thread: the server decodes several segments at once on its own pool.
    r->decoder->thread_count = 1;
    // The sample entry's size (checked above) need not be the one the bitstream's parameter sets
    // declare: the decoder allocates no picture of more pixels than the limit's area, and
    // reader_next refuses a frame that is wider or taller than the limit.
    r->decoder->max_pixels = (int64_t)SEGMENT_VIDEO_MAX_WIDTH * SEGMENT_VIDEO_MAX_HEIGHT;
    if ((status = avcodec_parameters_to_context(r->decoder, stream->codecpar)) < 0 ||
        (status = avcodec_open2(r->decoder, codec, NULL)) < 0) {
        reader_close(r);
        return fail(status, "cannot open the decoder", error, error_size);
    }
    return 0;
}

/// The next decoded frame in r->frame: 1, 0 at the end, or a negative AVERROR.
static int reader_next(reader *r) {
    for (;;) {
        int status = avcodec_receive_frame(r->decoder, r->frame);
        if (status >= 0) {
            if (r->frame->width > SEGMENT_VIDEO_MAX_WIDTH || r->frame->height > SEGMENT_VIDEO_MAX_HEIGHT) {
                av_frame_unref(r->frame);
                return AVERROR_INVALIDDATA;
            }
            return 1;
        }
        if (status == AVERROR_EOF) return 0;
        if (status != AVERROR(EAGAIN)) return status;
        if (r->draining) return 0;
        status = av_read_frame(r->format, r->packet);
        if (status < 0) {
            r->draining = 1;
            avcodec_send_packet(r->decoder, NULL);
            continue;
        }
        if (r->packet->stream_index == r->stream) {
            status = avcodec_send_packet(r->decoder, r->packet);
            av_packet_unref(r->packet);
            if (status < 0 && status != AVERROR(EAGAIN)) return status;
        } else {
            av_packet_unref(r->packet);
        }
    }
}

/// A scaler from the decoder's frames to `format` at `width` x `height` (made again if the
/// frames change size), and the frame it writes into.
typedef struct {
    struct SwsContext *context;
    AVFrame *frame;
} converter;

static int convert(converter *c, const AVFrame *source, enum AVPixelFormat format, int width, int height) {
    c->context = sws_getCachedContext(c->context, source->width, source->height, source->format, width, height, format,
                                      SWS_BILINEAR, NULL, NULL, NULL);
    if (!c->context) return AVERROR(EINVAL);
    if (!c->frame || c->frame->width != width || c->frame->height != height || c->frame->format != format) {
        av_frame_free(&c->frame);
        c->frame = av_frame_alloc();
        if (!c->frame) return AVERROR(ENOMEM);
        c->frame->width = width;
        c->frame->height = height;
        c->frame->format = format;
        int status = av_frame_get_buffer(c->frame, 0);
        if (status < 0) return status;
    }
    int status = av_frame_make_writable(c->frame);
    if (status < 0) return status;
    sws_scale(c->context, (const uint8_t *const *)source->data, source->linesize, 0, source->height, c->frame->data,
              c->frame->linesize);
    c->frame->pts = source->best_effort_timestamp;
    return 0;
}

static void converter_free(converter *c) {
    sws_freeContext(c->context);
    av_frame_free(&c->frame);
}

/// `width` x `height` scaled to at most `max_width` wide (0: as it is), both even.
static void fit(int width, int height, int max_width, int *out_width, int *out_height) {
    if (max_width > 0 && width > max_width) {
        height = (int)((int64_t)height * max_width / width);
        width = max_width;
    }
    *out_width = width & ~1;
    *out_height = height & ~1;
    if (*out_width < 2) *out_width = 2;
    if (*out_height < 2) *out_height = 2;
}

// MARK: - JPEG keyframes

static int count_frames(const uint8_t *data, size_t size, char *error, size_t error_size) {
    reader r;
    int status = reader_open(&r, data, size, error, error_size);
    if (status < 0) return status;
    int frames = 0;
    while ((status = reader_next(&r)) > 0) frames += 1;
    reader_close(&r);
    return status < 0 ? fail(status, "cannot decode the segment", error, error_size) : frames;
}

int segment_video_keyframe_jpegs(const uint8_t *data, size_t size, int count, int max_width, segment_video_buffer *out, char *error,
                                 size_t error_size) {
    if (count < 1 || count > 8) return fail(AVERROR(EINVAL), "keyframes: count must be 1…8", error, error_size);
    reader r;
    int status = reader_open(&r, data, size, error, error_size);
    if (status < 0) return status;
    int total = r.frames > 0 && r.frames < 100000 ? (int)r.frames : 0;
    if (total == 0) {
        reader_close(&r);
        if ((total = count_frames(data, size, error, error_size)) < 0) return total;
        if ((status = reader_open(&r, data, size, error, error_size)) < 0) return status;
    }
    if (total == 0) {
        reader_close(&r);
        return fail(AVERROR_INVALIDDATA, "the segment has no frames", error, error_size);
    }
    if (count > total) count = total;

    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_MJPEG);
    AVCodecContext *encoder = codec ? avcodec_alloc_context3(codec) : NULL;
    AVPacket *packet = av_packet_alloc();
    converter scaled = {0};
    int made = 0, index = 0, width = 0, height = 0;
    if (!encoder || !packet) {
        status = fail(codec ? AVERROR(ENOMEM) : AVERROR_ENCODER_NOT_FOUND, "no JPEG encoder", error, error_size);
        goto done;
    }
    while (made < count && (status = reader_next(&r)) > 0) {
        int wanted = count == 1 ? 0 : (int)(((int64_t)made * (total - 1) + (count - 1) / 2) / (count - 1));
        if (index++ != wanted) continue;
        if (!avcodec_is_open(encoder)) {
            fit(r.frame->width, r.frame->height, max_width, &width, &height);
            encoder->width = width;
            encoder->height = height;
            // Full-range 4:2:0, which every FFmpeg's JPEG encoder takes (YUVJ420P is its name for it).
            encoder->pix_fmt = AV_PIX_FMT_YUVJ420P;
            encoder->color_range = AVCOL_RANGE_JPEG;
            encoder->time_base = (AVRational){1, 25};
            encoder->flags |= AV_CODEC_FLAG_QSCALE;
            encoder->global_quality = FF_QP2LAMBDA * 4;
            if ((status = avcodec_open2(encoder, codec, NULL)) < 0) {
                status = fail(status, "cannot open the JPEG encoder", error, error_size);
                goto done;
            }
        }
        if ((status = convert(&scaled, r.frame, AV_PIX_FMT_YUVJ420P, width, height)) < 0) {
            status = fail(status, "cannot scale a frame", error, error_size);
            goto done;
        }
        scaled.frame->quality = encoder->global_quality;
        scaled.frame->pts = made;
        if ((status = avcodec_send_frame(encoder, scaled.frame)) < 0 || (status = avcodec_receive_packet(encoder, packet)) < 0) {
            status = fail(status, "cannot encode a JPEG", error, error_size);
            goto done;
        }
        out[made].data = av_malloc(packet->size);
        if (!out[made].data) {
            av_packet_unref(packet);
            status = fail(AVERROR(ENOMEM), "cannot keep a JPEG", error, error_size);
            goto done;
        }
        memcpy(out[made].data, packet->data, packet->size);
        out[made].size = packet->size;
        av_packet_unref(packet);
        made += 1;
    }
    if (status < 0) status = fail(status, "cannot decode the segment", error, error_size);
    else if (made == 0) status = fail(AVERROR_INVALIDDATA, "no frame decoded", error, error_size);
    else status = made;
done:
    if (status < 0) {
        for (int i = 0; i < made; i++) segment_video_free(&out[i]);
    }
    converter_free(&scaled);
    av_packet_free(&packet);
    avcodec_free_context(&encoder);
    reader_close(&r);
    return status;
}

// MARK: - H.264

static int write_packets(AVCodecContext *encoder, AVFormatContext *output, AVPacket *packet) {
    int status;
    while ((status = avcodec_receive_packet(encoder, packet)) >= 0) {
        // Without a duration the muxer's edit list would end before the last frame is shown.
        if (packet->duration <= 0 && encoder->framerate.num > 0 && encoder->framerate.den > 0) {
            packet->duration = av_rescale_q(1, av_inv_q(encoder->framerate), encoder->time_base);
        }
        av_packet_rescale_ts(packet, encoder->time_base, output->streams[0]->time_base);
        packet->stream_index = 0;
        if ((status = av_interleaved_write_frame(output, packet)) < 0) return status;
    }
    return status == AVERROR(EAGAIN) || status == AVERROR_EOF ? 0 : status;
}

int segment_video_transcode_h264(const uint8_t *data, size_t size, const char *output_path, char *error, size_t error_size) {
    reader r;
    int status = reader_open(&r, data, size, error, error_size);
    if (status < 0) return status;
    const AVCodec *codec = avcodec_find_encoder_by_name("libx264");
    if (!codec) codec = avcodec_find_encoder(AV_CODEC_ID_H264);
    AVCodecContext *encoder = codec ? avcodec_alloc_context3(codec) : NULL;
    AVFormatContext *output = NULL;
    AVPacket *packet = av_packet_alloc();
    converter scaled = {0};
    int frames = 0, header = 0;
    if (!encoder || !packet) {
        status = fail(codec ? AVERROR(ENOMEM) : AVERROR_ENCODER_NOT_FOUND, "no H.264 encoder", error, error_size);
        goto done;
    }
    if ((status = avformat_alloc_output_context2(&output, NULL, "mp4", output_path)) < 0) {
        status = fail(status, "cannot make an MP4", error, error_size);
        goto done;
    }
    while ((status = reader_next(&r)) > 0) {
        if (!avcodec_is_open(encoder)) {
            encoder->width = r.frame->width & ~1;
            encoder->height = r.frame->height & ~1;
            encoder->pix_fmt = AV_PIX_FMT_YUV420P;
            encoder->time_base = r.time_base;
            encoder->framerate = r.frame_rate;
            encoder->gop_size = 250;
            encoder->max_b_frames = 0;
            if (output->oformat->flags & AVFMT_GLOBALHEADER) encoder->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
            av_opt_set(encoder->priv_data, "preset", "veryfast", 0);
            av_opt_set(encoder->priv_data, "crf", "26", 0);
            if ((status = avcodec_open2(encoder, codec, NULL)) < 0) {
                status = fail(status, "cannot open the H.264 encoder", error, error_size);
                goto done;
            }
            AVStream *stream = avformat_new_stream(output, NULL);
            if (!stream) {
                status = fail(AVERROR(ENOMEM), "cannot add the video stream", error, error_size);
                goto done;
            }
            stream->time_base = encoder->time_base;
            if ((status = avcodec_parameters_from_context(stream->codecpar, encoder)) < 0 ||
                (status = avio_open(&output->pb, output_path, AVIO_FLAG_WRITE)) < 0 ||
                (status = avformat_write_header(output, NULL)) < 0) {
                status = fail(status, "cannot start the MP4", error, error_size);
                goto done;
            }
            header = 1;
        }
        if ((status = convert(&scaled, r.frame, AV_PIX_FMT_YUV420P, encoder->width, encoder->height)) < 0) {
            status = fail(status, "cannot convert a frame", error, error_size);
            goto done;
        }
        if ((status = avcodec_send_frame(encoder, scaled.frame)) < 0 || (status = write_packets(encoder, output, packet)) < 0) {
            status = fail(status, "cannot encode H.264", error, error_size);
            goto done;
        }
        frames += 1;
    }
    if (status < 0) {
        status = fail(status, "cannot decode the segment", error, error_size);
        goto done;
    }
    if (!header) {
        status = fail(AVERROR_INVALIDDATA, "no frame decoded", error, error_size);
        goto done;
    }
    if ((status = avcodec_send_frame(encoder, NULL)) < 0 || (status = write_packets(encoder, output, packet)) < 0 ||
        (status = av_write_trailer(output)) < 0) {
        status = fail(status, "cannot finish the MP4", error, error_size);
        goto done;
    }
    status = frames;
done:
    if (output) {
        if (output->pb) avio_closep(&output->pb);
        avformat_free_context(output);
    }
    converter_free(&scaled);
    av_packet_free(&packet);
    avcodec_free_context(&encoder);
    reader_close(&r);
    return status;
}

// MARK: - Gray frames

int segment_video_gray_frames(const uint8_t *data, size_t size, int every, int width, segment_video_gray_callback callback,
                              void *context, char *error, size_t error_size) {
    if (every < 1) every = 1;
    reader r;
    int status = reader_open(&r, data, size, error, error_size);
    if (status < 0) return status;
    converter gray = {0};
    int index = 0;
    while ((status = reader_next(&r)) > 0) {
        if (index % every == 0) {
            int w, h;
            fit(r.frame->width, r.frame->height, width, &w, &h);
            if ((status = convert(&gray, r.frame, AV_PIX_FMT_GRAY8, w, h)) < 0) break;
            if (callback(context, gray.frame->data[0], w, h, gray.frame->linesize[0], index)) {
                index += 1;
                status = 0;
                break;
            }
        }
        index += 1;
    }
    converter_free(&gray);
    reader_close(&r);
    return status < 0 ? fail(status, "cannot decode the segment", error, error_size) : index;
}

// MARK: - Inspection

int segment_video_inspect(const uint8_t *data, size_t size, segment_video_info *info, char *error, size_t error_size) {
    memset(info, 0, sizeof *info);
    reader r;
    int status = demuxer_open(&r, data, size, error, error_size);
    if (status < 0) return status;
    info->streams = (int)r.format->nb_streams;
    int video = -1;
    for (unsigned i = 0; i < r.format->nb_streams; i++) {
        if (r.format->streams[i]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO) continue;
        info->video_streams += 1;
        if (video < 0) video = (int)i;
    }
    if (video >= 0) {
        AVStream *stream = r.format->streams[video];
        const char *name = avcodec_get_name(stream->codecpar->codec_id);
        snprintf(info->codec, sizeof info->codec, "%s", name ? name : "");
        info->width = stream->codecpar->width;
        info->height = stream->codecpar->height;
        info->frames = stream->nb_frames > 0 ? stream->nb_frames : 0;
        // The track's own duration in its time base; av_rescale_q saturates rather than overflows.
        if (stream->duration > 0 && stream->time_base.num > 0 && stream->time_base.den > 0) {
            info->duration_ms = av_rescale_q(stream->duration, stream->time_base, (AVRational){1, 1000});
        }
    }
    reader_close(&r);
    return 0;
}
