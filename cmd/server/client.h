// Who sent a request: the key its limits are counted under.
#pragma once

#include <string_view>

#include "http.h"

namespace ratewin::server {

// The token of "Authorization: Bearer <token>", empty if there is none.
std::string_view bearer(const Request& request);

struct Client {
  // API keys and addresses are counted apart (an API key "ip:..." is not that address).
  enum class Kind : char { api_key = 'k', address = 'a' };
  Kind kind = Kind::address;
  // X-API-Key, else the bearer token, else "ip:<address>".
  std::string_view key;
};

}  // namespace ratewin::server
