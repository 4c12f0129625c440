#include "CRoadVision.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/objdetect.hpp>

struct road_people_detector {
    cv::HOGDescriptor hog;
};

road_people_detector *road_people_detector_new(void) {
    try {
        // One thread per call: the caller runs calls side by side on its own threads (one per
        // session's segment), and OpenCV's own pool on top would fight them for the cores.
        cv::setNumThreads(1);
        auto *detector = new road_people_detector();
        detector->hog.setSVMDetector(cv::HOGDescriptor::getDefaultPeopleDetector());
        return detector;
    } catch (...) {
        return nullptr;
    }
}

void road_people_detector_free(road_people_detector *detector) { delete detector; }

static int fail(char *error, int error_size, const char *what) {
    if (error && error_size > 0) std::snprintf(error, error_size, "%s", what);
    return -1;
}

int road_people_detect(const road_people_detector *detector, const uint8_t *gray, int width, int height, int stride,
                       int search_height, double scale_step, double min_weight, int *boxes, double *weights, int capacity,
                       char *error, int error_size) {
    if (!detector || !gray || width <= 0 || height <= 0 || stride < width) return fail(error, error_size, "no image");
    if (search_height < 0 || search_height > 4096) return fail(error, error_size, "search height out of range");
    if (!(scale_step >= 1.05 && scale_step <= 2)) return fail(error, error_size, "scale step out of range");
    if (capacity < 0 || (capacity > 0 && (!boxes || !weights))) return fail(error, error_size, "no room for results");
    try {
        // A view of the caller's pixels: nothing is copied unless it is scaled.
        cv::Mat image(height, width, CV_8UC1, const_cast<uint8_t *>(gray), static_cast<size_t>(stride));
        double factor = 1;
        cv::Mat searched = image;
        if (search_height > 0 && search_height != height) {
            factor = double(search_height) / height;
            int scaled_width = std::max(1, int(std::lround(width * factor)));
            cv::resize(image, searched, cv::Size(scaled_width, search_height), 0, 0,
                       factor > 1 ? cv::INTER_LINEAR : cv::INTER_AREA);
        }
        if (searched.cols < 64 || searched.rows < 128) return 0;
        std::vector<cv::Rect> found;
        std::vector<double> found_weights;
        detector->hog.detectMultiScale(searched, found, found_weights, 0, cv::Size(8, 8), cv::Size(16, 16), scale_step, 2,
                                       false);
        std::vector<size_t> order;
        for (size_t i = 0; i < found.size(); i++) {
            if (i < found_weights.size() && found_weights[i] >= min_weight) order.push_back(i);
        }
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return found_weights[a] > found_weights[b]; });
        int count = static_cast<int>(order.size());
        for (int i = 0; i < count && i < capacity; i++) {
            // Back in the caller's pixels, clipped to the picture.
            const cv::Rect &box = found[order[i]];
            int x = std::clamp(int(std::lround(box.x / factor)), 0, width);
            int y = std::clamp(int(std::lround(box.y / factor)), 0, height);
            int right = std::clamp(int(std::lround((box.x + box.width) / factor)), x, width);
            int bottom = std::clamp(int(std::lround((box.y + box.height) / factor)), y, height);
            boxes[4 * i] = x;
            boxes[4 * i + 1] = y;
            boxes[4 * i + 2] = right - x;
            boxes[4 * i + 3] = bottom - y;
            weights[i] = found_weights[order[i]];
        }
        return count;
    } catch (const std::exception &exception) {
        return fail(error, error_size, exception.what());
    }
}
