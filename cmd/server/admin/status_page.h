// The status page (/status), behind the admin token (admin.h), and its figures
// (/status.json).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "http/http.h"

namespace ratewin::server {

class Service;

inline constexpr std::string_view kStatusPath = "/status";
inline constexpr std::string_view kStatusJsonPath = "/status.json";
inline bool is_status_path(std::string_view path) noexcept {
  return path == kStatusPath || path == kStatusJsonPath;
}

// The figures (status.cpp): the server, its rules and each limit's counts and rates (from
// the service's request tally, RequestTally::sample_rates), the store, the overrides in
// force and the most refused keys. One JSON object and a newline.
std::string status_json(const Service& service, std::chrono::steady_clock::time_point now);

// The page (status_page.cpp): one self-contained HTML document (no external assets; a
// Content-Security-Policy allows none) that renders `figures` (status_json()), embedded in
// it, then refreshes them from kStatusJsonPath every 2 s. Client keys and rule names are
// set as text, never as markup.
void status_page(std::string_view figures, Response& response);

}  // namespace ratewin::server
