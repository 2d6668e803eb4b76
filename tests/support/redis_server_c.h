/* The test kit's private server (redis_server.h) and certificates (certificates.h) for
 * tests written in C: the C ABI suite. The same RedisServer as the C++ suites', so the
 * same server (RATEWIN_TEST_REDIS: redis-server, or valkey-server with "valkey"), the same
 * free loopback ports, Unix socket and TLS, and the same stop by PID.
 *
 * Conventions: a server is an opaque handle from ratewin_test_redis_start, freed (stopped
 * and its directory removed) by ratewin_test_redis_free. Strings it returns live as long
 * as the handle. Nothing here throws: a failure is NULL or 0 and a line on stderr that
 * says why. Not thread-safe: one thread starts, uses and frees a server. */
#ifndef RATEWIN_TEST_REDIS_SERVER_C_H
#define RATEWIN_TEST_REDIS_SERVER_C_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ratewin_test_redis ratewin_test_redis;

/* Flags of ratewin_test_redis_start. */
enum {
  /* Also serve TLS on a second port, with the kit's certificates: server.crt, signed by
   * ca.crt (ratewin_test_certificate), client certificates not required. */
  RATEWIN_TEST_REDIS_TLS = 1
};

/* Starts a private server: a free loopback port, a Unix socket in a private directory
 * and, with RATEWIN_TEST_REDIS_TLS, a TLS port; returns once it answers PING. NULL if it
 * cannot start (the reason on stderr). */
ratewin_test_redis* ratewin_test_redis_start(int flags);
/* Stops the server (SIGTERM, then waits for it) and frees the handle; NULL is ignored. */
void ratewin_test_redis_free(ratewin_test_redis* server);

/* unix://<socket path>, and rediss://127.0.0.1:<TLS port> (NULL without TLS). */
const char* ratewin_test_redis_unix_url(const ratewin_test_redis* server);
const char* ratewin_test_redis_tls_url(const ratewin_test_redis* server);
/* The plain port, and the TLS one (0 without TLS). */
int ratewin_test_redis_port(const ratewin_test_redis* server);
int ratewin_test_redis_tls_port(const ratewin_test_redis* server);

/* SIGSTOP (a server that accepts connections and answers nothing) and SIGCONT; 1, or 0
 * if the signal could not be sent. */
int ratewin_test_redis_pause(ratewin_test_redis* server);
int ratewin_test_redis_resume(ratewin_test_redis* server);

/* INFO commandstats' count of calls to `command` (lowercase: "ping", "bitfield"), 0 if it
 * was never called; -1 if INFO could not be read (the reason on stderr). */
long long ratewin_test_redis_calls(const ratewin_test_redis* server, const char* command);

/* Writes the path of the kit's certificate file `name` ("ca.crt", "other-ca.crt",
 * "client.crt", ... as tests/support/make_certs.sh names them; made on first use, removed
 * at exit) into `path` of `size` bytes; 1, or 0 if they cannot be made or the path does
 * not fit (the reason on stderr). */
int ratewin_test_certificate(const char* name, char* path, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* RATEWIN_TEST_REDIS_SERVER_C_H */
