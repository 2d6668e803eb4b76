// target.h: the request target of a request line (RFC 9112 3.2), reduced to the path
// the rules match (canonical, see path.h) and the query; and the authority of a Host
// field or an absolute-form target.
#pragma once

#include <string>
#include <string_view>

namespace ratewin::server {

// Reads `target`, sent with `method`:
//   - origin form "/path?query": the path normalised (path.h), the query as sent;
//   - absolute form "http://host[:port]/path?query" (scheme http or https, any case): the
//     same for its path; the authority must be a valid one (valid_authority(), so no
//     userinfo) and the path must be there ("http://h" and "http://h?q" are refused);
//   - asterisk form "*", for OPTIONS only: path "*";
//   - authority form (CONNECT's) is refused: this server is no tunnel.
// A fragment ('#') is never part of a target. Returns "" and sets `path` and `query`, or
// returns the problem (the request gets 400).
std::string_view parse_target(std::string_view method, std::string_view target, std::string& path,
                              std::string& query);

// Whether `text` is host[":"port] as an http(s) URI's authority may be, and a Host field:
//   - host: an IPv6 address in brackets (no zone, no IPvFuture), an IPv4 address, or a
//     name of letters, digits, '-', '_' and '.' with no empty label (one trailing '.'
//     allowed). Stricter than RFC 3986's reg-name, which also allows sub-delims and
//     percent-encoding: no DNS name has them, and "a!b" must not pass;
//   - port, when there is a ':': 1 to 65535 in decimal.
// No userinfo ("user@host").
bool valid_authority(std::string_view text);

}  // namespace ratewin::server
