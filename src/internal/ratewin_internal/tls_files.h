// What ratewin's two TLS ends share, the Redis client's (src/redis/tls.h) and the server's
// listener (cmd/server/http/server_tls.h): the stamps that tell when a certificate file
// has changed (both read their files again then, without a restart), and OpenSSL's reason
// for a failure, in words. Header-only, so that the library itself can use it. Part of
// the internal target ratewin::internal: not installed, no stability promise.
#pragma once

#include <openssl/err.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace ratewin {
inline namespace v1 {
namespace internal {

// A file as last seen: one renewed in place, or another renamed over it, has another
// inode, time or size. A file that is missing (or unnamed) is `found` false.
struct FileStamp {
  bool found = false;
  ino_t inode = 0;
  std::int64_t modified_ns = 0;
  off_t size = 0;
  bool operator==(const FileStamp&) const = default;

  static FileStamp of(const std::string& path) {
    FileStamp s;
    struct stat st {};
    if (path.empty() || ::stat(path.c_str(), &st) != 0) return s;
    s.found = true;
    s.inode = st.st_ino;
    s.modified_ns = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    s.size = st.st_size;
    return s;
  }
};

// The reason of the oldest error OpenSSL queued on this thread (the root cause), and the
// queue emptied.
inline std::string openssl_reason() {
  std::string reason;
  while (const unsigned long e = ERR_get_error()) {
    if (!reason.empty()) continue;
    if (ERR_SYSTEM_ERROR(e)) {  // an errno: a file missing, unreadable
      reason = std::strerror(ERR_GET_REASON(e));
      continue;
    }
    const char* text = ERR_reason_error_string(e);
    reason = text != nullptr ? text : "error " + std::to_string(ERR_GET_REASON(e));
  }
  return reason.empty() ? std::string("unknown error") : reason;
}

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
