// Umbrella header.
#pragma once

#include "helixmla/backend.hpp"
#include "helixmla/dtype.hpp"
#include "helixmla/environment.hpp"
#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"
#include "helixmla/perf_table.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/problem.hpp"
#include "helixmla/profile.hpp"
#include "helixmla/reference.hpp"
#include "helixmla/runtime.hpp"
#include "helixmla/selector.hpp"
#include "helixmla/validate.hpp"
