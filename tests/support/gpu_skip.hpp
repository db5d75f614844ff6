// The one way GPU tests leave a machine without the GPUs they need: a skip
// that says what was found, or a failure where HELIXMLA_REQUIRE_GPUS says
// the GPUs must be there (testing::cuda_devices_required).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "device_batch.hpp"

#define HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(needed)                                               \
  do {                                                                                           \
    const std::string helixmla_missing = ::helixmla::testing::missing_cuda_devices(needed);      \
    if (!helixmla_missing.empty()) {                                                             \
      if (::helixmla::testing::cuda_devices_required(needed)) {                                  \
        FAIL() << helixmla_missing << ", and HELIXMLA_REQUIRE_GPUS asks for them";               \
      }                                                                                          \
      GTEST_SKIP() << helixmla_missing;                                                          \
    }                                                                                            \
  } while (0)
