#include "redis/slot.h"

#include <array>

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
constexpr std::array<std::uint16_t, 256> make_table() {
  std::array<std::uint16_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = static_cast<std::uint16_t>(crc);
  }
  return table;
}
constexpr std::array<std::uint16_t, 256> kTable = make_table();

std::uint16_t crc16(std::string_view bytes) noexcept {
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    crc = static_cast<std::uint16_t>((crc << 8) ^
                                     kTable[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]);
  }
  return crc;
}

}  // namespace

std::uint16_t key_slot(std::string_view key) noexcept {
  const std::size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<std::uint16_t>(crc16(key) % kClusterSlots);
}

std::uint16_t resource_slot(std::uint64_t resource) noexcept {
  constexpr char kDigits[] = "0123456789abcdef";
  char digits[16];
  for (int i = 15; i >= 0; --i, resource >>= 4) digits[i] = kDigits[resource & 15];
  return static_cast<std::uint16_t>(crc16(std::string_view(digits, 16)) % kClusterSlots);
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
