#include "CRoadVision.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include <opencv2/core.hpp>
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

int road_people_detect(const road_people_detector *detector, const uint8_t *gray, int width, int height, int stride,
                       double min_weight, road_person *people, int capacity, char *error, int error_size) {
    if (!detector || !gray || width <= 0 || height <= 0 || stride < width) {
        if (error && error_size > 0) std::snprintf(error, error_size, "no image");
        return -1;
    }
    if (width < 64 || height < 128) return 0;
    try {
        // A view of the caller's pixels: nothing is copied.
        cv::Mat image(height, width, CV_8UC1, const_cast<uint8_t *>(gray), static_cast<size_t>(stride));
        std::vector<cv::Rect> found;
        std::vector<double> weights;
        detector->hog.detectMultiScale(image, found, weights, 0, cv::Size(8, 8), cv::Size(16, 16), 1.05, 2, false);
        std::vector<size_t> order;
        for (size_t i = 0; i < found.size(); i++) {
            if (i < weights.size() && weights[i] >= min_weight) order.push_back(i);
        }
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weights[a] > weights[b]; });
        int count = static_cast<int>(order.size());
        for (int i = 0; i < count && i < capacity; i++) {
            const cv::Rect &box = found[order[i]];
            people[i] = road_person{box.x, box.y, box.width, box.height, weights[order[i]]};
        }
        return count;
    } catch (const std::exception &exception) {
        if (error && error_size > 0) std::snprintf(error, error_size, "%s", exception.what());
        return -1;
    }
}
