#include "redis/reporter.h"

namespace ratewin::inline v1::detail {

std::string credentials_problem(const std::string& where, bool given, const Status& failure) {
  if (failure.code() != Status::Code::auth) return failure.message();
  if (!given) {
    return "Redis at " + where +
           " requires a password and none was given: put it in the URL "
           "(redis://[user:]password@host:port) (" + failure.message() + ")";
  }
  return "Redis at " + where + " refused the user or password in the URL (" + failure.message() +
         ")";
}

}  // namespace ratewin::inline v1::detail
