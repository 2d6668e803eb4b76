// path.h: request paths as the rules see them (normalised) and the globs that match
// paths and keys.
#pragma once

#include <string>
#include <string_view>

namespace ratewin::server {

// The path of a request target, as endpoints are matched: drops "?query" and "#fragment",
// collapses repeated '/', resolves "." and ".." segments (never above the root) and
// ensures a leading '/'. A trailing '/' is kept, as RFC 3986 does ("/a/b/.." is "/a/").
// Percent-encoding is left alone.
std::string normalise_path(std::string_view target);

// Whether `text` matches `pattern` as a whole: '*' matches any run of bytes (including
// '/'), '?' exactly one byte, everything else itself; there is no escape. Iterative,
// O(pattern * text) at worst.
bool glob_match(std::string_view pattern, std::string_view text);

// Collapses repeated '/' and resolves "." and ".." in a path without query or fragment
// (never above the root), keeping a trailing '/'.
std::string remove_dot_segments(std::string_view path);

}  // namespace ratewin::server
