#ifndef CROADVISION_H
#define CROADVISION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// OpenCV's HOG people detector (the Dalal-Triggs linear SVM that `HOGDescriptor::
/// getDefaultPeopleDetector` returns), behind a C interface with plain C types only, so that a
/// caller may also reach it through `dlopen` (the agent loads it as libRoadVision.so only when
/// it first looks; the guidance server links it).
typedef struct road_people_detector road_people_detector;

/// NULL if OpenCV cannot make one.
road_people_detector *road_people_detector_new(void);
void road_people_detector_free(road_people_detector *detector);

/// People in an 8-bit gray image `width` x `height`, rows `stride` bytes apart.
///
/// The image is searched at `search_height` rows (scaled up or down to that height, its width in
/// proportion; 0 searches it as it is), over a pyramid whose levels are `scale_step` apart
/// (1.05 to 2). The detector's window is 64x128, so a person is found once they are 128 rows tall
/// at some level: searching a 360-row picture at 576 rows finds people down to 80 rows.
///
/// Writes at most `capacity` people, surest first, with a confidence (the SVM's margin) of at
/// least `min_weight`: `boxes` gets x, y, width, height in the caller's pixels (4 ints a person),
/// `weights` the confidences. Returns how many were found (which may exceed `capacity`), or -1 if
/// the arguments are wrong or OpenCV failed (`error` says why). Safe to call from several threads
/// on one detector.
int road_people_detect(const road_people_detector *detector, const uint8_t *gray, int width, int height, int stride,
                       int search_height, double scale_step, double min_weight, int *boxes, double *weights, int capacity,
                       char *error, int error_size);

#ifdef __cplusplus
}
#endif

#endif
