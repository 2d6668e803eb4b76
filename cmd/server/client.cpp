#include "client.h"

#include "text.h"

namespace ratewin::server {

std::string_view bearer(const Request& request) {
  const std::string_view auth = trim_ows(request.header("authorization"));
  if (auth.size() < 7 || !iequals(auth.substr(0, 6), "bearer") || auth[6] != ' ') return {};
  return trim_ows(auth.substr(7));
}

}  // namespace ratewin::server
