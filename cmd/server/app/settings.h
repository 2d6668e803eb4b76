// ratewin-server's command line, read and checked in one place: parse() turns the flags
// into ServerSettings (what each part of the server is given), or into what ends the
// process at once (--help, --version, a flag that is wrong). wire.h starts the server.
#pragma once

#include <string>
#include <variant>

#include "common/log_event.h"    // LogFormat
#include "http/http_loops.h"  // Config
#include "ratewin/engine.h"   // Options, LogLevel
#include "rls/rls_service.h"  // rls::ServiceOptions
#include "service/service.h"  // ServiceOptions

namespace ratewin::server {

struct ServerSettings {
  Config http;              // --listen, --threads, the connections' bounds and timeouts
  ServiceOptions service;   // --rules, --admin-token, --trust-proxy, --mode, ...
  rls::ServiceOptions rls;  // --rls-*
  Options engine;           // --redis, --redis-tls-*, --max-memory, --write-mode, ...
  std::string grpc_listen;  // empty: no gRPC listener
  std::string grpc_host;    // --grpc-listen's host and port
  int grpc_port = 0;
  std::string grpc_unix_path;  // --grpc-listen unix:PATH (then no host and port)
  ServerTlsOptions grpc_tls;   // --grpc-tls-*: TLS when its cert_file is set
  bool serve_http = true;   // false: --listen none
  bool reuse_port = false;
  // --check (or `ratewin-server check RULES`): check the rules file, print it and exit.
  bool check = false;
  LogLevel log_level = LogLevel::info;
  LogFormat log_format = LogFormat::text;
};

// The process ends before serving: `message` (newline included) goes to stdout with code
// 0 (--help, --version) and to stderr with code 2 (a flag that is wrong, or flags that do
// not go together).
struct Exit {
  int code = 0;
  std::string message;
};

// The command line read: every flag applied to the settings and checked (a value out of
// range, a flag that needs another), in a fixed order, the first problem said. With
// --check, nothing that only serving needs is read or checked.
std::variant<ServerSettings, Exit> parse(int argc, char** argv);

}  // namespace ratewin::server
