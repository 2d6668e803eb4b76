// The commands in RESP bytes (arrays of bulk strings, as a RespWriter writes them), back as
// lists of arguments: for tests that compare what the store sends with what they expect.
#pragma once

#include <charconv>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ratewin::test {

inline std::vector<std::vector<std::string>> commands_of(std::string_view resp) {
  std::vector<std::vector<std::string>> out;
  std::size_t at = 0;
  const auto number = [&](char mark) {
    if (at >= resp.size() || resp[at] != mark) throw std::runtime_error("not RESP");
    const std::size_t end = resp.find("\r\n", at);
    std::size_t n = 0;
    std::from_chars(resp.data() + at + 1, resp.data() + end, n);
    at = end + 2;
    return n;
  };
  while (at < resp.size()) {
    const std::size_t args = number('*');
    std::vector<std::string>& command = out.emplace_back();
    for (std::size_t i = 0; i < args; ++i) {
      const std::size_t length = number('$');
      command.emplace_back(resp.substr(at, length));
      at += length + 2;
    }
  }
  return out;
}

}  // namespace ratewin::test
