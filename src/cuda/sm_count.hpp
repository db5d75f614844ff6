// Streaming-multiprocessor count of a CUDA device, queried once per device
// and cached: split-KV planners size their grids by it on every prepare, and
// an attribute query per call would be wasted host time.
#pragma once

namespace helixmla::cuda {

// SM count of `device`, or `fallback` when the device cannot be queried (no
// driver or no such device); a failed query is not cached.
int device_sm_count(int device, int fallback = 132);

}  // namespace helixmla::cuda
