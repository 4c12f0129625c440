#ifndef CROADVISION_H
#define CROADVISION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// OpenCV's HOG people detector (the Dalal-Triggs linear SVM that `HOGDescriptor::
/// getDefaultPeopleDetector` returns), behind a C interface for Swift.
typedef struct road_people_detector road_people_detector;

/// A person found: the box in image pixels and the SVM's confidence (higher is surer).
typedef struct {
    int x, y, width, height;
    double weight;
} road_person;

/// NULL if OpenCV cannot make one.
road_people_detector *road_people_detector_new(void);
void road_people_detector_free(road_people_detector *detector);

/// People in an 8-bit gray image `width` x `height`, rows `stride` bytes apart. Writes at most
/// `capacity` boxes, surest first, with weight at least `min_weight`; returns how many were found
/// (which may exceed `capacity`), or -1 if OpenCV failed (`error` says why). Images smaller than
/// the detector's 64x128 window find nobody. Safe to call from several threads on one detector.
int road_people_detect(const road_people_detector *detector, const uint8_t *gray, int width, int height, int stride,
                       double min_weight, road_person *people, int capacity, char *error, int error_size);

#ifdef __cplusplus
}
#endif

#endif
