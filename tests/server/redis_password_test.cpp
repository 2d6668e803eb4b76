// The Redis password from a file or the environment, put into the --redis URL.
#include "app/redis_password.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ratewin::server {
namespace {

std::string spliced(std::string_view url, std::string_view password) {
  const Result<std::string> out = with_redis_password(url, password);
  REQUIRE_MESSAGE(out.ok(), url, ": ", out.message());
  return *out;
}

std::string splice_refused(std::string_view url, std::string_view password = "pw") {
  const Result<std::string> out = with_redis_password(url, password);
  CHECK_MESSAGE(!out.ok(), url, " gave ", out.ok() ? *out : std::string());
  CHECK(out.status().code() == Status::Code::invalid);
  return out.message();
}

// What a password file holds (read must succeed).
std::string read_ok(const std::string& path) {
  const Result<std::string> read = read_password_file(path);
  REQUIRE_MESSAGE(read.ok(), path, ": ", read.message());
  return *read;
}

// A file in a private temporary directory, removed with it.
class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ratewin-password-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    std::ofstream(path(), std::ios::binary) << content;
  }
  ~TempFile() { std::filesystem::remove_all(dir_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path() const { return (dir_ / "password").string(); }

 private:
  std::filesystem::path dir_;
};

TEST_CASE("a password goes into every form of URL, where the library reads it") {
  CHECK(spliced("redis://127.0.0.1:6379", "pw") == "redis://:pw@127.0.0.1:6379");
  CHECK(spliced("rediss://redis.internal:6380/2?tls_ca_file=/etc/ca.pem", "pw") ==
        "rediss://:pw@redis.internal:6380/2?tls_ca_file=/etc/ca.pem");
  CHECK(spliced("redis://[::1]:6379", "pw") == "redis://:pw@[::1]:6379");
  CHECK(spliced("unix:///run/redis.sock?db=3", "pw") == "unix://:pw@/run/redis.sock?db=3");
  CHECK(spliced("redis-cluster://a:7000,b:7001", "pw") == "redis-cluster://:pw@a:7000,b:7001");
  CHECK(spliced("rediss-cluster://a:7000,b:7001", "pw") ==
        "rediss-cluster://:pw@a:7000,b:7001");
  // Sentinel: the primary's password; the sentinels' own stays in the query.
  CHECK(spliced("redis-sentinel://s1:26379,s2/main?sentinel_password=x", "pw") ==
        "redis-sentinel://:pw@s1:26379,s2/main?sentinel_password=x");
  CHECK(spliced("rediss-sentinel://s1/main", "pw") == "rediss-sentinel://:pw@s1/main");
}

TEST_CASE("a lone token in the URL is the ACL user name") {
  CHECK(spliced("redis://alice@127.0.0.1:6379", "pw") == "redis://alice:pw@127.0.0.1:6379");
  CHECK(spliced("unix://alice@/run/redis.sock", "pw") == "unix://alice:pw@/run/redis.sock");
  CHECK(spliced("redis-sentinel://alice@s1,s2/main", "pw") ==
        "redis-sentinel://alice:pw@s1,s2/main");
  // An empty password in the URL is no password: the user is kept.
  CHECK(spliced("redis://alice:@host", "pw") == "redis://alice:pw@host");
  CHECK(spliced("redis://:@host", "pw") == "redis://:pw@host");
}

TEST_CASE("the password is percent-encoded") {
  CHECK(percent_encode("aZ09-._~") == "aZ09-._~");
  CHECK(percent_encode("p@ss:w/rd?#%&= ") == "p%40ss%3Aw%2Frd%3F%23%25%26%3D%20");
  CHECK(percent_encode("\xC3\xA9\n") == "%C3%A9%0A");
  CHECK(spliced("redis://alice@host", "p@ss:w/rd") == "redis://alice:p%40ss%3Aw%2Frd@host");
  // A Sentinel URL whose password holds '/' and '@': still before the master name.
  CHECK(spliced("redis-sentinel://s1/main", "a/b@c") == "redis-sentinel://:a%2Fb%40c@s1/main");
}

TEST_CASE("a URL that already holds a password, or is not a URL, is refused") {
  CHECK(splice_refused("redis://:secret@host").find("already holds a password") != std::string::npos);
  CHECK(splice_refused("redis://alice:secret@host").find("already holds a password") !=
        std::string::npos);
  CHECK(splice_refused("redis-sentinel://alice:secret@s1/main").find("already holds") !=
        std::string::npos);
  CHECK(splice_refused("127.0.0.1:6379").find("no scheme") != std::string::npos);
  CHECK(splice_refused("://host").find("no scheme") != std::string::npos);
  // The refusal never repeats the password it was given.
  CHECK(splice_refused("redis://:secret@host", "hunter2").find("hunter2") == std::string::npos);
}

TEST_CASE("a password file: its content, one trailing newline dropped") {
  {
    const TempFile file("s3cret\n");
    CHECK(read_ok(file.path()) == "s3cret");
  }
  {
    const TempFile file("s3cret\r\n");
    CHECK(read_ok(file.path()) == "s3cret");
  }
  {
    const TempFile file("two words \n\n");  // only the last newline goes
    CHECK(read_ok(file.path()) == "two words \n");
  }
  {
    const TempFile file("no newline");
    CHECK(read_ok(file.path()) == "no newline");
  }
  {
    const TempFile file("\n");
    const Result<std::string> empty = read_password_file(file.path());
    CHECK(!empty.ok());
    CHECK(empty.status().code() == Status::Code::invalid);
    CHECK(empty.message().find("holds no password") != std::string::npos);
  }
  const Result<std::string> missing = read_password_file("/nonexistent/ratewin-password");
  CHECK(!missing.ok());
  CHECK(missing.message().find("cannot read /nonexistent/ratewin-password") != std::string::npos);
  CHECK(missing.message().find("No such file") != std::string::npos);
}

}  // namespace
}  // namespace ratewin::server
