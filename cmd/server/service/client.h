// Who sent a request: the client's address (the connection's, or the one a trusted proxy
// reports) and the key its limits are counted under.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/address.h"
#include "common/outcome.h"
#include "http/http.h"
#include "rules/rules.h"

namespace ratewin::server {

// The token of "Authorization: Bearer <token>", empty if there is none.
std::string_view bearer(const Request& request);
// The password of "Authorization: Basic <base64 of user:password>" (any user), nullopt
// if there is none.
std::optional<std::string> basic_password(const Request& request);

// Ok, or `invalid` saying why the headers that say who the client is cannot be read one
// way only: a client key's header (X-API-Key, Authorization, and `key_headers`, those the
// rules' client keys name: Rules::key_headers) twice (this server reads the first;
// another reader may take the last), or any header it reads spelt with '_' for '-'
// (X_API_Key, X_HTTP_Method_Override: CGI and WSGI backends read them as the dashed
// names, which this server would not have seen).
Status ambiguous_client_headers(const Request& request,
                                std::span<const std::string> key_headers);

// Ok, or `invalid` saying why the request's method is in doubt: a method-override header
// (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) naming another method than
// `method`. A backend that honours it serves another method than the one the rules
// matched, and one that does not serves `method`: counting it as either would let it
// dodge the other's limits.
Status method_override_problem(const Request& request, std::string_view method);

struct Client {
  // API keys and addresses are counted apart (an API key "ip:..." is not that address).
  enum class Kind : char { api_key = 'k', address = 'a' };
  Kind kind = Kind::address;
  // X-API-Key, else the bearer token, else "ip:<the address, canonical>": what the rules
  // match (keys, allow, deny) and overrides name. Points into the request or into the
  // ClientIdentifier; valid until either changes.
  std::string_view key;
  // What its limits count under: `key`, but for an IPv6 address "ip:<its prefix>/<bits>"
  // (--ipv6-prefix, 64 by default: one host has a whole /64 to pick addresses from).
  std::string_view counted;
  IpAddress address;  // the client's address, whatever the key
};

// What an address key's limits count under: for "ip:<IPv6 address>" (not IPv4-mapped),
// "ip:<the address masked to `ipv6_prefix` bits>/<bits>" when ipv6_prefix < 128; else
// `key` itself.
std::string counted_key(std::string_view key, unsigned ipv6_prefix);

// One per thread: it keeps the last connection's parsed address and the key's text.
class ClientIdentifier {
 public:
  // The connection's peer as the transport wrote it, parsed (once per distinct text).
  // A text that does not parse (no peer address known) is the unspecified address "::".
  struct Peer {
    IpAddress address;
    bool trusted = false;  // inside --trust-proxy
  };

  explicit ClientIdentifier(const AddressRanges& trusted_proxies, unsigned ipv6_prefix = 64)
      : trusted_proxies_(trusted_proxies), ipv6_prefix_(ipv6_prefix) {}

  const Peer& peer(std::string_view text);

  struct Address {
    bool ok = true;  // false: `required`, and no address was named
    IpAddress address;
  };
  // The client's address. From a peer that is not a trusted proxy: the peer's (its
  // headers are ignored). From a trusted proxy: the right-most X-Forwarded-For entry
  // that is not itself a trusted proxy (each proxy appends the address it saw connect;
  // entries further left were written by whoever connected to it, and are believed only
  // as far as trusted proxies vouch for them); the left-most one if all are; the last
  // trusted one if the next to its left is not an address. If X-Forwarded-For names
  // none (absent, or its right-most entry is not an address), X-Real-IP; else the peer's,
  // or, when `required` (a forward-auth check, where the peer is the proxy), not ok.
  // Values that are not addresses (a zone ID, a port, junk) are never taken.
  Address address(const Request& request, const Peer& peer, bool required) const;

  // The client: its key and address. Its key is what `spec` (the rules'
  // defaults.client_key) finds first in the request: a header, a cookie, a parameter of
  // `query` (the request's, or the checked request's), the bearer token, or parts of
  // these joined with '|' (an API key, Kind::api_key); else the address (Kind::address).
  // Header and cookie values are trimmed of spaces; a query parameter's is taken as sent.
  // An empty value is no value.
  Client identify(const Request& request, std::string_view query, const IpAddress& address,
                  const ClientKeySpec& spec = ClientKeySpec::standard());
  Client identify(const Request& request, const IpAddress& address) {
    return identify(request, {}, address);
  }
  // The key a limit's own client key (LimitRule::client_key) gives the request, as
  // LimitStep names counters: its kind's tag, then its counted form.
  void tagged_key(const Request& request, std::string_view query, const IpAddress& address,
                  const ClientKeySpec& spec, std::string& out);

 private:
  const AddressRanges& trusted_proxies_;
  const unsigned ipv6_prefix_;
  std::string peer_text_;
  Peer peer_;
  bool has_peer_ = false;
  // What an address client's limits count under (counted_key()'s form), appended.
  void append_counted_address(const IpAddress& address, std::string& out) const;
  // The value of `source` in the request, appended to `out`; false when it has none.
  bool append_source(const Request& request, std::string_view query, const IpAddress& address,
                     const ClientKeySource& source, std::string& out) const;
  // The first alternative of `spec` the request has every part of, into `out`; false
  // when none (or the first it has is the address alone: Kind::address).
  bool key_of(const Request& request, std::string_view query, const IpAddress& address,
              const ClientKeySpec& spec, std::string& out) const;

  std::string address_key_;
  std::string counted_key_;
  std::string spec_key_;
};

}  // namespace ratewin::server
