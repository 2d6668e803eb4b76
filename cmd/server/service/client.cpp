#include "service/client.h"

#include <algorithm>

#include "common/text.h"

namespace ratewin::server {

namespace {

// The entries of a comma-separated header value, right to left.
template <class Visit>
bool each_entry_backwards(std::string_view value, Visit visit) {
  while (true) {
    const std::size_t comma = value.rfind(',');
    const std::string_view entry =
        trim_ows(comma == std::string_view::npos ? value : value.substr(comma + 1));
    if (!entry.empty() && !visit(entry)) return false;  // empty list elements are allowed
    if (comma == std::string_view::npos) return true;
    value = value.substr(0, comma);
  }
}

// "ip:<the address masked to `prefix` bits>/<prefix>" (an IPv6 address's counted key).
void assign_prefix_key(std::string& out, const IpAddress& address, unsigned prefix) {
  out = "ip:";
  address.masked(prefix).append_to(out);
  out += '/';
  out += std::to_string(prefix);
}

}  // namespace

Status ambiguous_client_headers(const Request& request,
                                std::span<const std::string> key_headers) {
  // (Names are in lower case.) What this server reads of every request: the standard
  // key's, the proxies', a forward-auth check's and the method overrides.
  static constexpr std::string_view kRead[] = {
      "x-api-key",          "authorization",     "x-forwarded-for", "x-real-ip",
      "x-original-method",  "x-original-uri",    "x-forwarded-method",
      "x-forwarded-uri",    "x-http-method-override", "x-http-method", "x-method-override"};
  const auto read = [&](std::string_view name) {
    return std::find(std::begin(kRead), std::end(kRead), name) != std::end(kRead) ||
           std::find(key_headers.begin(), key_headers.end(), name) != key_headers.end();
  };
  int authorizations = 0;
  for (std::size_t i = 0; i < request.headers.size(); ++i) {
    const std::string& name = request.headers[i].first;
    authorizations += name == "authorization" ? 1 : 0;
    if (name.find('_') != std::string::npos) {
      std::string dashed = name;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      if (read(dashed))
        return invalid("header " + name + ": '_' for '-' in a header this server reads is refused");
    }
    // A client key's header twice: which one counts is a guess (a proxy may read the
    // other).
    const bool key = name == "x-api-key" ||
                     std::find(key_headers.begin(), key_headers.end(), name) != key_headers.end();
    if (!key) continue;
    for (std::size_t j = i + 1; j < request.headers.size(); ++j)
      if (request.headers[j].first == name)
        return invalid("more than one " + name + " header (a client key's)");
  }
  if (authorizations > 1) return invalid("more than one Authorization header");
  return {};
}

Status method_override_problem(const Request& request, std::string_view method) {
  for (const auto& [name, value] : request.headers) {
    if (name != "x-http-method-override" && name != "x-http-method" &&
        name != "x-method-override")
      continue;
    if (!iequals(trim_ows(value), method))
      return invalid("header " + name + ": a method override (to another method than " +
                     std::string(method) + ") is refused: backends disagree on it");
  }
  return {};
}

std::string_view bearer(const Request& request) {
  const std::string_view auth = trim_ows(request.header("authorization"));
  if (auth.size() < 7 || !iequals(auth.substr(0, 6), "bearer") || auth[6] != ' ') return {};
  return trim_ows(auth.substr(7));
}

std::optional<std::string> basic_password(const Request& request) {
  const std::string_view auth = trim_ows(request.header("authorization"));
  if (auth.size() < 6 || !iequals(auth.substr(0, 5), "basic") || auth[5] != ' ') return std::nullopt;
  std::optional<std::string> decoded = base64_decode(trim_ows(auth.substr(6)));
  if (!decoded) return std::nullopt;
  const std::size_t colon = decoded->find(':');
  if (colon == std::string::npos) return std::nullopt;
  return decoded->substr(colon + 1);
}

const ClientIdentifier::Peer& ClientIdentifier::peer(std::string_view text) {
  // A connection's requests all come from one peer: parsed once.
  if (has_peer_ && text == peer_text_) return peer_;
  has_peer_ = true;
  peer_text_.assign(text);
  peer_.address = IpAddress::parse(text).value_or(IpAddress());
  peer_.trusted = trusted_proxies_.contains(peer_.address);
  return peer_;
}

ClientIdentifier::Address ClientIdentifier::address(const Request& request, const Peer& peer,
                                                    bool required) const {
  if (!peer.trusted) return {!required, peer.address};
  // X-Forwarded-For, over all its lines (one list, RFC 9110 5.3), from the right: each
  // trusted proxy vouches for the entry to its left.
  std::optional<IpAddress> reached;  // the left-most address vouched for so far
  bool usable = true;                // false: the right-most entry (our proxy's) is not an address
  for (auto line = request.headers.rbegin(); line != request.headers.rend(); ++line) {
    if (line->first != "x-forwarded-for") continue;
    const bool more = each_entry_backwards(line->second, [&](std::string_view entry) {
      const std::optional<IpAddress> a = IpAddress::parse(entry);
      if (!a) {
        usable = reached.has_value();
        return false;
      }
      reached = a;
      return trusted_proxies_.contains(*a);
    });
    if (!more) break;
  }
  if (usable && reached) return {true, *reached};
  const std::string_view real_ip = trim_ows(request.last_header("x-real-ip"));
  if (const std::optional<IpAddress> a = IpAddress::parse(real_ip)) return {true, *a};
  return {!required, peer.address};
}

namespace {

// The value of cookie `name` in a Cookie header ("a=1; b=2"), empty if it has none.
std::string_view cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const std::size_t end = header.find(';');
    const std::string_view pair = trim_ows(header.substr(0, end));
    const std::size_t eq = pair.find('=');
    if (eq != std::string_view::npos && trim_ows(pair.substr(0, eq)) == name) {
      std::string_view value = trim_ows(pair.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
        value = value.substr(1, value.size() - 2);
      return value;
    }
    if (end == std::string_view::npos) break;
    header.remove_prefix(end + 1);
  }
  return {};
}

// The value of parameter `name` in a query ("a=1&b=2"), as sent; empty if it has none.
std::string_view query_value(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const std::size_t end = query.find('&');
    const std::string_view pair = query.substr(0, end);
    const std::size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
    if (end == std::string_view::npos) break;
    query.remove_prefix(end + 1);
  }
  return {};
}

}  // namespace

bool ClientIdentifier::append_source(const Request& request, std::string_view query,
                                     const IpAddress& address, const ClientKeySource& source,
                                     std::string& out) const {
  std::string_view value;
  switch (source.kind) {
    case ClientKeySource::Kind::header: value = trim_ows(request.header(source.name)); break;
    case ClientKeySource::Kind::cookie:
      value = cookie_value(request.header("cookie"), source.name);
      break;
    case ClientKeySource::Kind::query: value = query_value(query, source.name); break;
    case ClientKeySource::Kind::bearer: value = bearer(request); break;
    case ClientKeySource::Kind::address:
      append_counted_address(address, out);
      return true;
  }
  if (value.empty()) return false;
  out += value;
  return true;
}

bool ClientIdentifier::key_of(const Request& request, std::string_view query,
                              const IpAddress& address, const ClientKeySpec& spec,
                              std::string& out) const {
  for (const auto& alternative : spec.alternatives) {
    if (alternative.size() == 1 && alternative[0].kind == ClientKeySource::Kind::address)
      return false;
    out.clear();
    bool all = true;
    for (std::size_t i = 0; all && i < alternative.size(); ++i) {
      if (i != 0) out += '|';
      all = append_source(request, query, address, alternative[i], out);
    }
    if (all) return true;
  }
  return false;
}

Client ClientIdentifier::identify(const Request& request, std::string_view query,
                                  const IpAddress& address, const ClientKeySpec& spec) {
  Client client;
  client.address = address;
  if (&spec == &ClientKeySpec::standard()) {  // (the usual case, without the general walk)
    client.key = trim_ows(request.header("x-api-key"));
    if (client.key.empty()) client.key = bearer(request);
  } else if (key_of(request, query, address, spec, spec_key_)) {
    client.key = spec_key_;
  }
  if (!client.key.empty()) {
    client.kind = Client::Kind::api_key;
    client.counted = client.key;
    return client;
  }
  client.kind = Client::Kind::address;
  address_key_ = "ip:";
  address.append_to(address_key_);
  client.key = address_key_;
  client.counted = address_key_;
  if (!address.is_v4() && ipv6_prefix_ < 128) {
    assign_prefix_key(counted_key_, address, ipv6_prefix_);
    client.counted = counted_key_;
  }
  return client;
}

void ClientIdentifier::tagged_key(const Request& request, std::string_view query,
                                  const IpAddress& address, const ClientKeySpec& spec,
                                  std::string& out) {
  std::string key;
  if (key_of(request, query, address, spec, key)) {
    out.assign(1, static_cast<char>(Client::Kind::api_key));
    out += key;
    return;
  }
  out.assign(1, static_cast<char>(Client::Kind::address));
  append_counted_address(address, out);
}

void ClientIdentifier::append_counted_address(const IpAddress& address, std::string& out) const {
  if (!address.is_v4() && ipv6_prefix_ < 128) {
    std::string key;
    assign_prefix_key(key, address, ipv6_prefix_);
    out += key;
  } else {
    out += "ip:";
    address.append_to(out);
  }
}

std::string counted_key(std::string_view key, unsigned ipv6_prefix) {
  if (!key.starts_with("ip:") || ipv6_prefix >= 128) return std::string(key);
  const std::optional<IpAddress> address = IpAddress::parse(key.substr(3));
  if (!address || address->is_v4()) return std::string(key);
  std::string out;
  assign_prefix_key(out, *address, ipv6_prefix);
  return out;
}

}  // namespace ratewin::server
