// ratewin/ratewin.h: the whole C++ API.
#pragma once

#include "ratewin/async.h"
#include "ratewin/clock.h"
#include "ratewin/decision.h"
#include "ratewin/engine.h"
#include "ratewin/hash.h"
#include "ratewin/limit.h"
