#include "redis/reporter.h"

namespace ratewin::inline v1::detail {

std::string credentials_problem(const std::string& where, const std::string& error) {
  if (error.find("NOAUTH") != std::string::npos) {
    return "Redis at " + where +
           " requires a password and none was given: put it in the URL "
           "(redis://[user:]password@host:port) (" + error + ")";
  }
  if (error.find("WRONGPASS") != std::string::npos ||
      error.find("invalid password") != std::string::npos ||
      error.find("invalid username-password") != std::string::npos) {
    return "Redis at " + where + " refused the user or password in the URL (" + error + ")";
  }
  return {};
}

}  // namespace ratewin::inline v1::detail
