// ratewin-server's parts started from its settings (settings.h): the engine, the
// overrides, the service, the gRPC listener, an HTTP loop per thread, then the control
// loop (control.h) until a stop signal and the drain; or, with --check, the rules file
// checked and printed.
#pragma once

#include "app/settings.h"

namespace ratewin::server {

// The process's exit code: 0 after a drain (or a valid --check), 1 when the server
// cannot start (or --check's rules are rejected), with the reason logged.
int wire(const ServerSettings& settings);

}  // namespace ratewin::server
