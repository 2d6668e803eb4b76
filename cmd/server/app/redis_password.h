// The Redis password of --redis-password-file or RATEWIN_REDIS_PASSWORD, put into the
// --redis URL's credentials, so that no secret sits in the process list or a unit file.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/outcome.h"

namespace ratewin::server {

// The password in a file: its content, one trailing newline ("\n" or "\r\n") dropped;
// `invalid` when it cannot be read or holds nothing.
Result<std::string> read_password_file(const std::string& path);

// `text` with every byte but A-Z a-z 0-9 - . _ ~ written %XX, as a URL's credentials
// take it.
std::string percent_encode(std::string_view text);

// `url` (any form --redis takes) with `password` in its credentials, percent-encoded:
//   redis://host:6379            -> redis://:PASSWORD@host:6379
//   redis://alice@host:6379      -> redis://alice:PASSWORD@host:6379 (a lone token is the
//                                   ACL user name here, not a password)
//   redis://alice:@host          -> redis://alice:PASSWORD@host
//   unix:///run/redis.sock       -> unix://:PASSWORD@/run/redis.sock
//   rediss-sentinel://h1,h2/main -> rediss-sentinel://:PASSWORD@h1,h2/main (the primary's
//                                   password; the sentinels' stays ?sentinel_password=)
// `invalid` when the URL has no scheme, or already holds a password (the password must
// come from one place).
Result<std::string> with_redis_password(std::string_view url, std::string_view password);

}  // namespace ratewin::server
