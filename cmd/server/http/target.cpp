#include "http/target.h"

#include <arpa/inet.h>

#include "common/text.h"
#include "http/path.h"

namespace ratewin::server {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool host_label_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' || c == '_';
}

bool valid_name(std::string_view host) {
  if (host.ends_with('.')) host.remove_suffix(1);  // a fully qualified name
  if (host.empty() || host.size() > 253) return false;
  std::size_t label = 0;
  for (const char c : host) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
    } else if (!host_label_char(c) || ++label > 63) {
      return false;
    }
  }
  return label != 0;
}

bool valid_ipv6(std::string_view address) {
  char text[64];
  if (address.empty() || address.size() >= sizeof text) return false;
  address.copy(text, address.size());
  text[address.size()] = '\0';
  unsigned char binary[16];
  return inet_pton(AF_INET6, text, binary) == 1;
}

bool valid_port(std::string_view port) {
  if (port.empty() || port.size() > 5) return false;
  unsigned value = 0;
  for (const char c : port) {
    if (!is_digit(c)) return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  return value >= 1 && value <= 65535;
}

// Splits an origin-form target (or an absolute one's path and query) and normalises the
// path.
std::string_view origin_form(std::string_view target, std::string& path, std::string& query) {
  if (target.find('#') != std::string_view::npos) return "a fragment ('#') in the request target";
  const std::size_t mark = target.find('?');
  std::string_view problem;
  if (!normalise_path(target.substr(0, mark), path, problem)) return problem;
  query.assign(mark == std::string_view::npos ? std::string_view() : target.substr(mark + 1));
  return {};
}

}  // namespace

bool valid_authority(std::string_view text) {
  std::string_view host = text;
  std::string_view port;
  bool has_port = false;
  if (text.starts_with('[')) {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return false;
    if (!valid_ipv6(text.substr(1, close - 1))) return false;
    const std::string_view after = text.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return false;
      has_port = true;
      port = after.substr(1);
    }
    return !has_port || valid_port(port);
  }
  if (const std::size_t colon = text.find(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    has_port = true;
  }
  // An IPv4 address is a name of digits and dots as far as the syntax goes.
  return valid_name(host) && (!has_port || valid_port(port));
}

std::string_view parse_target(std::string_view method, std::string_view target, std::string& path,
                              std::string& query) {
  path.clear();
  query.clear();
  if (method == "CONNECT") return "CONNECT is not supported (this server is no tunnel)";
  if (target == "*") {
    if (method != "OPTIONS") return "the target '*' is for OPTIONS only";
    path = "*";
    return {};
  }
  if (target.starts_with('/')) return origin_form(target, path, query);
  // Absolute form.
  const std::size_t colon = target.find(':');
  const std::string_view scheme = target.substr(0, colon);
  if (colon == std::string_view::npos || !(iequals(scheme, "http") || iequals(scheme, "https")))
    return "the request target is neither a path nor an http(s) URI";
  std::string_view rest = target.substr(colon + 1);
  if (!rest.starts_with("//")) return "an http(s) URI without an authority";
  rest.remove_prefix(2);
  const std::size_t end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos) return "userinfo in the request target";
  if (!valid_authority(authority)) return "an invalid host or port in the request target";
  if (end == std::string_view::npos || rest[end] != '/')
    return "an http(s) URI without a path in the request target";
  return origin_form(rest.substr(end), path, query);
}

}  // namespace ratewin::server
