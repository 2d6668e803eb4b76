// ratewin-server: its command line read and checked (settings.h), then its parts started
// (wire.h). HTTP/1.1 on libuv, one loop per thread on SO_REUSEPORT sockets (http_loops.h),
// each request limited by the rules (service.h); the main thread handles signals and
// watches the rules file (control.h).
#include <cstdio>
#include <variant>

#include "app/settings.h"
#include "app/wire.h"

int main(int argc, char** argv) {
  using namespace ratewin::server;
  std::variant<ServerSettings, Exit> parsed = parse(argc, argv);
  if (const Exit* exit = std::get_if<Exit>(&parsed)) {
    std::fputs(exit->message.c_str(), exit->code == 0 ? stdout : stderr);
    return exit->code;
  }
  return wire(std::get<ServerSettings>(parsed));
}
