// Deadline tests on a busy machine ("no call blocks longer than its deadline"), in the
// Redis suites. Their deadlines (connect and command timeouts) are kDeadline, long
// against the scheduling delays of a sanitizer build beside a CPU hog, and a call may take
// the deadlines that can apply to it plus kSlack, which is less than one more deadline: a
// call that waited out one deadline more than it may, or until Redis came back, fails the
// test; a thread that a busy machine left waiting for its turn (well under kSlack) does
// not. (With 100 ms deadlines and an 80 ms margin, ThreadSanitizer builds on a busy
// machine failed such tests.)
#pragma once

#include <chrono>

namespace ratewin::test {

inline constexpr std::chrono::milliseconds kDeadline{1000};
inline constexpr std::chrono::milliseconds kSlack{900};

// The longest a call that may wait out `deadlines` deadlines (0: none) may take.
constexpr std::chrono::milliseconds within_deadlines(int deadlines) {
  return deadlines * kDeadline + kSlack;
}

}  // namespace ratewin::test
