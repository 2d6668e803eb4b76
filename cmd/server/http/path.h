// path.h: request paths as the rules see them, and the globs that match paths and keys.
//
// A path is matched in one canonical form, so that no spelling of it can dodge an
// endpoint's limit: the backends behind a gateway (nginx with merge_slashes, Express,
// Go's net/http) decode percent-encoding, merge slashes and resolve dot segments before
// they route, and so does normalise_path(). Where backends disagree on what a path
// means, the request is refused (400) rather than guessed at:
//   - "%2F" and "%5C" (an encoded '/' or '\'), and a raw '\': one backend splits the
//     segment there, another does not;
//   - ';' and "%3B": "/a;x/b" carries a path parameter to Tomcat and Spring (which drop
//     it, routing to "/a/b") but is a plain byte to nginx and Go; stripping it would
//     guess one way, so it is refused;
//   - encoded NUL and other control bytes, and decoded bytes that are not UTF-8 (an
//     overlong "%C0%AF" is '/' to a lax decoder);
//   - invalid percent-encoding ("%zz", "%4").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ratewin::server {

// The canonical form of a request's path (from its target, without "?query"): every
// percent-encoded byte decoded, except those a path cannot hold as they are (space,
// '%', '#', '?' and bytes above 0x7e), which are encoded again with upper-case hex
// digits; repeated '/' merged; "." and ".." segments, plain or encoded ("%2e%2E",
// ".%2e"), resolved, never above the root; a trailing '/' kept, as RFC 3986 does
// ("/a/b/.." is "/a/"). So "/%61pi/x", "//api/./x" and "/b/../api/x" are all "/api/x";
// "%252e" is "%252E", the three characters "%2e", never decoded twice; and the form is
// a fixed point (normalising it again changes nothing). The result starts with '/'.
// False, with `problem` saying why (for a 400), for a path refused (see above), one that
// does not start with '/', or one with bytes a request target cannot hold (space,
// controls, '#', non-ASCII). `out` is overwritten either way.
bool normalise_path(std::string_view path, std::string& out, std::string_view& problem);

// The form of a canonical path (normalise_path's output) that a case-insensitive backend
// that also ignores dots and spaces at the end of a segment (IIS and Windows file
// systems; case-insensitive routers) sees as the same: ASCII letters lower-cased, each
// segment's trailing '.' and "%20" removed, and a segment left empty by that dropped
// ("/API./x%20/" is "/api/x/"). Applied to a glob, it leaves '*' and '?' as they are.
// `out` is overwritten.
void loose_path(std::string_view path, std::string& out);

}  // namespace ratewin::server
