/* ratewin.h: the stable C ABI of ratewin, a distributed sliding-window rate limiter.
 *
 * Conventions
 * -----------
 * Handles.  ratewin_engine, ratewin_limit and ratewin_limiter are opaque. Each is made
 *   by one function and destroyed by its pair:
 *     ratewin_engine_open    / ratewin_engine_close
 *     ratewin_limit_new      / ratewin_limit_free
 *     ratewin_limiter_open   / ratewin_limiter_close
 *   Destroy functions accept NULL. A handle must not be used after it is destroyed, and
 *   must not be destroyed while another thread is using it.
 *
 * Errors.  Functions that can fail return 0 on success or a negative RATEWIN_E* code
 *   (ratewin_engine_try_acquire_all_async may also return RATEWIN_PENDING, a positive
 *   code that is not a failure); ratewin_strerror() and ratewin_err_name() turn a code
 *   into text. Those that take a
 *   final `char** errmsg` also describe the failure: when errmsg is not NULL, *errmsg is
 *   set to NULL on success and, on failure, to a message the caller frees with
 *   ratewin_free() (or to NULL if even that could not be allocated). NULL or invalid
 *   arguments give RATEWIN_EINVAL, never a crash; no C++ exception ever leaves the
 *   library. A function that fails has no other effect: its outputs are not written.
 *
 * Memory.  The caller owns every struct it passes. Strings passed in are copied (the
 *   caller may free them when the call returns). The library allocates only handles and
 *   the strings returned through `char**`, which the caller frees with ratewin_free().
 *
 * Growing structs.  Every struct that crosses the boundary starts with `size`, which
 *   the caller sets to sizeof the struct it was compiled with, most simply by calling
 *   the struct's *_init() function, which also sets every field to its default. Fields
 *   are only ever added at the end, so a program built against an older header keeps
 *   working: the library reads and writes only the bytes the caller's size covers, and
 *   fields beyond it take their defaults. A struct from a newer header, larger than the
 *   library knows, is accepted when the fields the library does not know are 0 (their
 *   default), and refused with RATEWIN_EINVAL otherwise; on output those fields are left
 *   as the caller set them. No struct has padding: every byte is a field.
 *   An array of such structs is walked with its first element's size as the stride
 *   (element i starts i * size bytes after the first): every element must carry that
 *   same size, as it does when each is set with the struct's *_init() function, or the
 *   call fails with RATEWIN_EINVAL.
 *
 * Threads.  A ratewin_engine may be used from any number of threads at once, and so may
 *   a ratewin_limiter and a ratewin_limit (which never changes once made). The clock
 *   callback given in ratewin_options is called by every thread making a decision and
 *   by the engine's own threads; the logger by the engine's threads and by the threads
 *   that open and close it. Both may run concurrently, must be thread-safe and must not
 *   call back into the engine. Their data pointers must stay valid until the engine and
 *   every limiter opened from it are closed. The completion callbacks of
 *   ratewin_engine_try_acquire_all_async have rules of their own, given there.
 *
 * Versions.  RATEWIN_VERSION_* give the version of this header, ratewin_version() that
 *   of the library loaded. The same major version means the same ABI: symbols and
 *   struct layouts never change meaning within a major version.
 */
#ifndef RATEWIN_CAPI_RATEWIN_H_
#define RATEWIN_CAPI_RATEWIN_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define RATEWIN_EXPORT __attribute__((visibility("default")))
#else
#define RATEWIN_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions ------------------------------------------------------------------- */

#define RATEWIN_VERSION_MAJOR 1
#define RATEWIN_VERSION_MINOR 9
#define RATEWIN_VERSION_PATCH 0
/* 0xMMmmpp: major, minor and patch in one number that grows with each release. */
#define RATEWIN_VERSION_HEX \
  ((RATEWIN_VERSION_MAJOR << 16) | (RATEWIN_VERSION_MINOR << 8) | RATEWIN_VERSION_PATCH)

/* The library's RATEWIN_VERSION_HEX. A program can compare it with the header's to
 * catch running against another library than the one it was built with. */
RATEWIN_EXPORT unsigned int ratewin_version(void);
/* The library's version as "major.minor.patch", a static string. */
RATEWIN_EXPORT const char* ratewin_version_string(void);

/* ---- Errors --------------------------------------------------------------------- */

#define RATEWIN_OK 0
#define RATEWIN_EINVAL (-1)    /* an argument is NULL, malformed or out of range */
#define RATEWIN_ENOMEM (-2)    /* memory or another resource could not be allocated */
#define RATEWIN_ERANGE (-3)    /* an index or count is beyond what exists or is allowed */
#define RATEWIN_ENOSPC (-4)    /* the caller's buffer is too small */
#define RATEWIN_ESYSTEM (-5)   /* the system refused (a thread, an event loop, ...) */
#define RATEWIN_EINTERNAL (-6) /* an unexpected failure inside the library (a bug) */
/* Since 1.2. */
#define RATEWIN_ECLOSED (-7) /* the engine is being closed (ratewin_engine_close) */
#define RATEWIN_EUNAVAILABLE (-8) /* the shared store cannot be used (require_store) */
#define RATEWIN_PENDING 1    /* not a failure: the outcome comes later, through a callback */

/* A static English description of an error code ("unknown error" for others). */
RATEWIN_EXPORT const char* ratewin_strerror(int code);
/* The code's name ("RATEWIN_EINVAL"), a static string ("RATEWIN_UNKNOWN" for others). */
RATEWIN_EXPORT const char* ratewin_err_name(int code);
/* Frees a string the library returned through a `char**`. NULL is accepted. */
RATEWIN_EXPORT void ratewin_free(void* pointer);

/* ---- Resources ------------------------------------------------------------------ */

/* The 64-bit resource id of a name: XXH3-64 of its `length` bytes with seed 0, the same
 * id the C++ and Python APIs and every other process compute for that name. `name` may
 * be NULL only when length is 0. Never fails. */
RATEWIN_EXPORT uint64_t ratewin_hash(const char* name, size_t length);

/* ---- Limits --------------------------------------------------------------------- */

/* What a limit does while the shared store is unreachable (decisions are then marked
 * degraded). */
#define RATEWIN_FAILURE_LOCAL 0  /* keep enforcing with this process's counts (default) */
#define RATEWIN_FAILURE_OPEN 1   /* allow every request */
#define RATEWIN_FAILURE_CLOSED 2 /* reject every request */
/* Since 1.4. Split the limit among the engines on the same key prefix: each admits
 * max x ratewin_options.partition_share / live engines (at least 1) with its own counts,
 * the live count being what it last read from the store (engines heartbeat with their
 * boundary reads; ratewin_stats.live_nodes). An outage then costs about the limit, not
 * engines x the limit. An engine that never read the count decides as
 * ratewin_options.partitioned_unknown says. */
#define RATEWIN_FAILURE_PARTITIONED 3

/* Since 1.8. How admissions reach the shared store (ratewin_options.write_mode). */
/* Each admitted request writes its cost and reads the shared window back, one round trip
 * it waits for (the default). */
#define RATEWIN_WRITE_SYNC 0
/* Requests are decided and counted in memory, without waiting on the network; the engine
 * flushes what it admitted every flush interval (one write per limiter, reading the
 * window back), and between flushes admits at most its budget, a share of what the
 * window had left (one request a round past it is written through, as in sync mode). A
 * limit may then be exceeded by a bounded amount (README, "Batched mode").
 * sliding_window and fixed_window limits only; the others keep to sync. */
#define RATEWIN_WRITE_BATCHED 1

/* Since 1.4. Whether a limit's refusals take effect (ratewin_limit_options.mode). A limit
 * in shadow decides and counts exactly as if it enforced (what it admits is counted, in
 * the store too), but never refuses: a request it would have refused is allowed,
 * uncounted, with ratewin_decision.would_reject set. A new or changed limit runs in
 * shadow first; switched to enforce (a limit made again with the same scope) it keeps
 * its counts: the mode is not part of a limit's own scope. */
#define RATEWIN_MODE_ENFORCE 0 /* refusals are refusals (the default) */
#define RATEWIN_MODE_SHADOW 1  /* refusals are allowed and reported */

/* Since 1.3. How a limit counts (ratewin_limit_options.algorithm). The first three keep
 * the same ring of interval_ms / resolution_ms subinterval counts and differ in how the
 * subinterval sliding out of the window counts; the token bucket keeps one time. */
/* The approximate sliding window (the default): the trailing subinterval counts in
 * proportion to its overlap with the window. May admit more than max in a sliding
 * window after a burst at a subinterval boundary. */
#define RATEWIN_ALGORITHM_SLIDING_WINDOW 0
/* The trailing subinterval counts in full until it leaves: never more than max in any
 * sliding window of interval_ms, at the price of refusing up to one subinterval's
 * worth too early. */
#define RATEWIN_ALGORITHM_STRICT_WINDOW 1
/* One counter per window of interval_ms, aligned to multiples of it on the shared clock
 * (resolution_ms is interval_ms): never more than max per fixed window, up to 2 x max
 * across a boundary. */
#define RATEWIN_ALGORITHM_FIXED_WINDOW 2
/* A token bucket, as GCRA: it refills at max per interval_ms, one unit every
 * interval_ms / max, and holds at most ratewin_limit_options.burst (max by default), so
 * in any span of time t it admits at most burst + t x max / interval_ms. resolution_ms is
 * not used (it is interval_ms). Its decisions (ratewin_decision) say: limit, its burst
 * (the most admitted at once, so X-RateLimit-Limit too); remaining, the units that would
 * pass now; reset_after_ns, the time until the bucket is full again; retry_after_ns, the
 * exact time until the same request would pass (RATEWIN_NEVER when its cost exceeds the
 * burst). */
#define RATEWIN_ALGORITHM_TOKEN_BUCKET 3
/* Exact: a log of when each unit admitted in the last interval_ms leaves it (in Redis, a
 * sorted set per resource). Never more than max in any sliding window of interval_ms, on
 * one node or across nodes, and nothing refused that an exact window would admit. max is
 * at most RATEWIN_LIMIT_MAX_LOG_COUNT (each unit is an entry: 8 bytes per limiter here,
 * one member of the shared set). resolution_ms is not used (it is interval_ms). */
#define RATEWIN_ALGORITHM_SLIDING_LOG 4

/* Largest max, largest interval / resolution, longest interval and resolution. */
#define RATEWIN_LIMIT_MAX_COUNT UINT64_C(4294967295)
/* Largest max of a RATEWIN_ALGORITHM_SLIDING_LOG limit. */
#define RATEWIN_LIMIT_MAX_LOG_COUNT UINT64_C(4096)
#define RATEWIN_LIMIT_MAX_SUBINTERVALS 65535u
#define RATEWIN_LIMIT_MAX_INTERVAL_MS UINT64_C(31622400000)
#define RATEWIN_LIMIT_MAX_RESOLUTION_MS UINT64_C(4294967295)

/* At most `max` units in any sliding `interval_ms`, tracked in subintervals of
 * `resolution_ms` (interval_ms / resolution_ms of them), counted in a scope by an
 * algorithm. */
typedef struct ratewin_limit_options {
  size_t size;            /* sizeof(ratewin_limit_options) */
  uint64_t max;           /* 1 to RATEWIN_LIMIT_MAX_COUNT; no default (0) */
  uint64_t interval_ms;   /* 1 to RATEWIN_LIMIT_MAX_INTERVAL_MS; no default (0) */
  uint64_t resolution_ms; /* must divide interval_ms; default 0: interval_ms / 10 when
                             whole, else interval_ms / d for the largest d < 10 that
                             divides it */
  int32_t failure_policy; /* RATEWIN_FAILURE_*; default RATEWIN_FAILURE_LOCAL */
  int32_t reserved;       /* must be 0: keeps the struct free of padding, so a field
                             added later is never mistaken for padding */
  /* Since 1.2. Which limits share counts on a resource. Default 0: the limit's own
   * scope, which follows from its max (and its algorithm), so limits with different
   * maxes never share counts (a login limit of 3 and an API limit of 100 per minute on
   * one client are counted apart). Otherwise a scope id, most simply ratewin_hash() of
   * the scope's name: limits with the same scope, interval and resolution share their
   * counts (an override that raises max keeps what was counted). */
  uint64_t scope;
  /* Since 1.3. How the limit counts: RATEWIN_ALGORITHM_*; default
   * RATEWIN_ALGORITHM_SLIDING_WINDOW. RATEWIN_ALGORITHM_FIXED_WINDOW counts in one
   * subinterval, the whole interval: resolution_ms must then be 0 or interval_ms, and
   * interval_ms at most RATEWIN_LIMIT_MAX_RESOLUTION_MS. RATEWIN_ALGORITHM_TOKEN_BUCKET
   * and RATEWIN_ALGORITHM_SLIDING_LOG likewise take resolution_ms 0 or interval_ms, and its bucket must refill within
   * RATEWIN_LIMIT_MAX_RESOLUTION_MS (see burst). Window limits of one scope, interval
   * and resolution share their counts whatever their algorithms (each decides from them
   * its own way); token buckets of one scope share their one time whatever their max,
   * interval and burst, and never share with a window. A limit's own scope (scope 0)
   * follows from its max and algorithm (and a token bucket's burst). */
  int32_t algorithm;
  int32_t reserved2; /* must be 0: keeps the struct free of padding */
  /* Since 1.3. A token bucket's room for requests at once: a full bucket passes up to
   * burst units together, then refills at max per interval_ms. Default 0: max. At most
   * RATEWIN_LIMIT_MAX_COUNT, and the bucket's refill, burst x interval_ms / max, at most
   * RATEWIN_LIMIT_MAX_RESOLUTION_MS ms; that of max must fit too, so a token bucket's
   * interval_ms is at most about RATEWIN_LIMIT_MAX_RESOLUTION_MS whatever its burst.
   * Must be 0 for the other algorithms. */
  uint64_t burst;
  /* Since 1.4. RATEWIN_MODE_*; default RATEWIN_MODE_ENFORCE. */
  int32_t mode;
  int32_t reserved3; /* must be 0: keeps the struct free of padding */
} ratewin_limit_options;

/* Sets options->size and every field to its default. NULL is ignored. */
RATEWIN_EXPORT void ratewin_limit_options_init(ratewin_limit_options* options);

typedef struct ratewin_limit ratewin_limit;

/* Validates `options` and makes a limit in *out. Fails with RATEWIN_EINVAL, *out
 * untouched, when max is 0 or too large, interval_ms is 0 or too long, resolution_ms
 * does not divide interval_ms, there would be more than RATEWIN_LIMIT_MAX_SUBINTERVALS
 * subintervals, the failure policy or the algorithm is unknown, a fixed window's
 * resolution_ms is neither 0 nor interval_ms or its interval_ms is longer than
 * RATEWIN_LIMIT_MAX_RESOLUTION_MS, a token bucket's resolution_ms is neither 0 nor
 * interval_ms, its burst is too large or it would take longer than
 * RATEWIN_LIMIT_MAX_RESOLUTION_MS to refill, or burst is set for another algorithm;
 * errmsg names the problem. */
RATEWIN_EXPORT int ratewin_limit_new(const ratewin_limit_options* options, ratewin_limit** out,
                                     char** errmsg);
/* Since 1.7. Makes the limit written as `text`, a NUL-terminated string in the grammar the
 * C++ API and Python read ("10/second", "100 per 5 minutes", "5/Minute"): COUNT ("/" |
 * "per") [AMOUNT] UNIT, COUNT and AMOUNT whole numbers (AMOUNT 1 when left out), UNIT
 * second, minute, hour, day, month (30 days) or year (365 days), singular or plural, in
 * any case. The text gives max and interval_ms; `options` (NULL: the defaults) gives the
 * other settings, and its max and interval_ms must be 0. Fails with RATEWIN_EINVAL, *out
 * untouched, when the text is not one limit or `options` is refused as by
 * ratewin_limit_new; errmsg then says why, in the words Python's ratewin.parse uses after
 * "ratewin_limit_parse: ". */
RATEWIN_EXPORT int ratewin_limit_parse(const char* text, const ratewin_limit_options* options,
                                       ratewin_limit** out, char** errmsg);
/* Since 1.7. The limits written as `text`, one or several separated by ';', ',' or '|'
 * ("10/second; 1000/day"), each as ratewin_limit_parse makes it: *count is set to how many
 * the text names, and out[0 .. *count) to new limits (each freed with ratewin_limit_free).
 * Fails with RATEWIN_ENOSPC when *count exceeds `capacity` (nothing made; call again with
 * room for *count), and with RATEWIN_EINVAL when the text names none or a part is wrong
 * (errmsg says which, in the words of Python's ratewin.parse_many); out is then untouched.
 * `out` may be NULL when capacity is 0. */
RATEWIN_EXPORT int ratewin_limits_parse(const char* text, const ratewin_limit_options* options,
                                        ratewin_limit** out, size_t capacity, size_t* count,
                                        char** errmsg);
/* Destroys a limit. Limiters opened with it keep their own copy. NULL is accepted. */
RATEWIN_EXPORT void ratewin_limit_free(ratewin_limit* limit);
/* Fills `out` (whose size the caller sets) with the limit's settings, resolution_ms as
 * chosen (interval_ms for a fixed window and a token bucket), scope 0 unless one was
 * given, and (since 1.3) the algorithm and the burst: a token bucket's burst in effect
 * (max when it was given as 0), 0 for the other algorithms. What it fills in makes the
 * same limit again. */
RATEWIN_EXPORT int ratewin_limit_get(const ratewin_limit* limit, ratewin_limit_options* out);

/* ---- Decisions ------------------------------------------------------------------ */

/* retry_after_ns of a request that can never pass (its cost exceeds the limit's max, a
 * token bucket's burst). */
#define RATEWIN_NEVER INT64_MAX

/* The outcome of a try-acquire. Durations are in nanoseconds from the engine's clock
 * reading used for the decision. A token bucket's decisions read as given at
 * RATEWIN_ALGORITHM_TOKEN_BUCKET. */
typedef struct ratewin_decision {
  size_t size;            /* sizeof(ratewin_decision) */
  int32_t allowed;        /* 1: admitted and counted; 0: turned away (in a request that
                             ratewin_engine_try_acquire_all refused, 1: this item would
                             have admitted it, nothing counted) */
  int32_t degraded;       /* 1: the store was unreachable; the failure policy decided */
  uint64_t limit;         /* the limit's max (a token bucket's burst) */
  uint64_t remaining;     /* units that could still be admitted now */
  int64_t reset_after_ns; /* until the window holds nothing of the counts made so far
                             (a token bucket: until it is full) */
  int64_t retry_after_ns; /* 0 when allowed; else until the same request would pass if
                             nothing else arrived; RATEWIN_NEVER if it never can */
  /* Since 1.4. 1: a limit in shadow (RATEWIN_MODE_SHADOW) would have refused: allowed is
   * 1 and nothing was counted, and remaining and retry_after_ns are the refusal's. */
  int32_t would_reject;
  int32_t reserved; /* 0 */
} ratewin_decision;

/* Sets decision->size and zeroes the rest. NULL is ignored. */
RATEWIN_EXPORT void ratewin_decision_init(ratewin_decision* decision);

/* Enough bytes for any header value, with its terminating NUL. */
#define RATEWIN_HEADER_VALUE_SIZE 24

/* The response headers of a decision, one per index from 0: X-RateLimit-Limit,
 * X-RateLimit-Remaining, X-RateLimit-Reset (seconds until the window is empty, rounded
 * up), and when the request was rejected and retrying can help, Retry-After (seconds,
 * rounded up, at least 1). Sets *name to a static string and copies the NUL-terminated
 * decimal value into `value`. Returns RATEWIN_ERANGE when the decision has no header at
 * `index` (so a loop stops there), RATEWIN_ENOSPC when value_size is too small. */
RATEWIN_EXPORT int ratewin_decision_header(const ratewin_decision* decision, size_t index,
                                           const char** name, char* value, size_t value_size);

/* ---- Engines -------------------------------------------------------------------- */

#define RATEWIN_LOG_DEBUG 0
#define RATEWIN_LOG_INFO 1
#define RATEWIN_LOG_WARNING 2
#define RATEWIN_LOG_ERROR 3

/* Since 1.6. How a Redis server's TLS certificate is checked (ratewin_tls_options.verify). */
#define RATEWIN_TLS_VERIFY_FULL 0 /* its chain up to a trusted CA, and the host name (or
                                     address) it is for (the default) */
#define RATEWIN_TLS_VERIFY_CA 1   /* its chain only: a certificate for any name passes */
#define RATEWIN_TLS_VERIFY_NONE 2 /* nothing: encrypted, but any server (or a man in the
                                     middle) is accepted; the engine logs a warning once */

/* Since 1.6. TLS to Redis (ratewin_options.tls), used by rediss://, rediss-cluster:// and
 * rediss-sentinel:// addresses for every connection: to the server, to each Cluster node,
 * to the sentinels and the primary they name. Such a URL may also give each setting as a
 * parameter (?tls_ca_file=...&tls_ca_dir=...&tls_cert_file=...&tls_key_file=...
 * &tls_server_name=...&tls_verify=full|ca|none&tls_min_version=1.2|1.3), which wins over
 * the field here. Files are PEM; they are read when the engine opens (one that cannot be
 * used fails ratewin_engine_open with RATEWIN_EINVAL, errmsg saying which and why), and
 * again on a later connection after they change, so rotated certificates take effect
 * without reopening the engine. Every string may be NULL (the default), as "". */
typedef struct ratewin_tls_options {
  size_t size;             /* sizeof(ratewin_tls_options) */
  const char* ca_file;     /* trusted CAs; with ca_dir NULL too, the system's store */
  const char* ca_dir;      /* a folder of trusted CAs named by hash (`openssl rehash`) */
  const char* cert_file;   /* this client's certificate (chain), for mutual TLS */
  const char* key_file;    /* its private key; NULL: the key is in cert_file */
  const char* server_name; /* sent (SNI) and verified; NULL: each server's own host */
  const char* min_version; /* the oldest TLS version accepted, "1.2" or "1.3"; NULL: "1.2" */
  int32_t verify;          /* RATEWIN_TLS_VERIFY_*; default RATEWIN_TLS_VERIFY_FULL */
  int32_t reserved;        /* must be 0: keeps the struct free of padding */
} ratewin_tls_options;

/* Since 1.6. Sets options->size and every field to its default. NULL is ignored. */
RATEWIN_EXPORT void ratewin_tls_options_init(ratewin_tls_options* options);

/* Nanoseconds since the Unix epoch, from 0 to 2^62 (the year 2116); readings outside
 * that range are taken as its nearest end. Must be thread-safe and cheap: every
 * decision reads it. */
typedef int64_t (*ratewin_clock_fn)(void* data);
/* A message from the engine (RATEWIN_LOG_* level), NUL-terminated, `length` bytes. */
typedef void (*ratewin_log_fn)(void* data, int level, const char* message, size_t length);

typedef struct ratewin_options {
  size_t size; /* sizeof(ratewin_options) */
  /* Most limiters held in memory (one per resource and window geometry); at least 1
   * and at most SIZE_MAX. Default 1000000. See max_memory for what happens at the
   * bounds. */
  uint64_t max_limiters;
  /* The shared store: NULL or "" for local mode (the default), else
   * "redis://[user[:password]@]host[:port][/db]",
   * "unix://[user[:password]@]/path/to/socket[?db=N]",
   * "redis-cluster://[user[:password]@]host:port[,host:port...]" (a Redis Cluster's seed
   * nodes) or "redis-sentinel://[user[:password]@]host:port[,...]/master-name
   * [?sentinel_password=...]" (a primary behind Redis Sentinel); with TLS (since 1.6),
   * "rediss://...", "rediss-cluster://..." and "rediss-sentinel://..." (see tls). The
   * engine opens whether or not Redis is up, and connects when it can. */
  const char* redis;
  /* Prefix of every Redis key, without '{' or '}'. NULL: "ratewin". */
  const char* key_prefix;
  /* Deadlines for connecting (and logging in) and for any round trip, 1 ms to 24 h.
   * Defaults 500 and 100. */
  uint32_t connect_timeout_ms;
  uint32_t command_timeout_ms;
  /* Most connections used at once for allowed requests' writes, at least 1.
   * Default 64. */
  uint32_t max_connections;
  /* Delay after a subinterval boundary before the shared counts are read. Default 10. */
  uint32_t sync_settle_ms;
  /* 1: align epochs to the Redis server's clock (the default); 0: use the local clock. */
  int32_t sync_clock;
  /* How often the server's clock is measured again; 0: only on connecting. Default
   * 10000. */
  uint32_t clock_sync_interval_ms;
  /* Source of time; NULL: the system's real-time clock (the default). */
  ratewin_clock_fn clock;
  void* clock_data;
  /* Where the engine reports its connection's ups and downs; NULL: warnings and errors
   * to stderr (the default). Called from the engine's threads. */
  ratewin_log_fn logger;
  void* logger_data;
  /* Since 1.1. Most bytes the limiters take in memory (records and table; a limiter
   * takes 48 bytes plus 4 per subinterval); at least 16384. Default 268435456 (256 MiB).
   * A limiter whose window still holds counts is never dropped to make room; while both
   * bounds are full of them, new resources share the overflow limiter of their window
   * geometry (ratewin_stats.overflowed counts those decisions). */
  uint64_t max_memory;
  /* Since 1.2. 1: fail fast: ratewin_engine_open fails with RATEWIN_EUNAVAILABLE (errmsg
   * says why) when the store cannot be used at start (no answer within
   * connect_timeout_ms, a password missing or refused), instead of opening degraded.
   * Default 0. */
  int32_t require_store;
  int32_t reserved; /* must be 0: keeps the struct free of padding */
  /* Since 1.4. RATEWIN_FAILURE_PARTITIONED's share: each engine admits max x
   * partition_share / live engines while the store is unreachable. 0.01 to 1000; default
   * 1.0 (0 also means 1.0). 2.0 lets each engine take twice its even share. */
  double partition_share;
  /* Since 1.4. What RATEWIN_FAILURE_PARTITIONED does before the engine has read the live
   * count (the store was unreachable from the start): RATEWIN_FAILURE_LOCAL (the default)
   * or RATEWIN_FAILURE_CLOSED. */
  int32_t partitioned_unknown;
  int32_t reserved2; /* must be 0 */
  /* Since 1.6. TLS settings for a rediss address, read (and copied) by ratewin_engine_open;
   * NULL: the defaults. Settings other than the defaults with an address that is not
   * rediss fail with RATEWIN_EINVAL: TLS is asked for by the URL's scheme. */
  const ratewin_tls_options* tls;
  /* Since 1.8. RATEWIN_WRITE_SYNC (the default) or RATEWIN_WRITE_BATCHED; no effect in
   * local mode. */
  int32_t write_mode;
  /* Since 1.8. Batched mode's flush interval: 0 (the default) chooses one per window
   * geometry (a 40th of the interval, 10 to 50 ms where the resolution allows, at least
   * 1 ms), else 1 to 1000. Engines sharing a key prefix should use the same. The engine's
   * thread flushes in real time (on multiples of the interval by the engine's clock), and
   * ratewin_engine_flush at once. */
  uint32_t flush_interval_ms;
} ratewin_options;

/* Sets options->size and every field to its default. NULL is ignored. */
RATEWIN_EXPORT void ratewin_options_init(ratewin_options* options);

typedef struct ratewin_engine ratewin_engine;

/* Opens an engine; `options` NULL means every default (local mode). Fails with
 * RATEWIN_EINVAL on an option out of range, a malformed Redis URL or TLS settings that
 * cannot be used (a certificate or key file missing or unreadable; errmsg says which),
 * RATEWIN_ENOMEM or RATEWIN_ESYSTEM when resources run out. With Redis, it waits at most
 * connect_timeout_ms for a first connection, and succeeds even if there is none
 * (decisions are then degraded until Redis answers); with require_store it fails with
 * RATEWIN_EUNAVAILABLE instead, errmsg saying why (a TLS handshake that failed too:
 * "certificate verify failed: ...", "host name mismatch: ..."). */
RATEWIN_EXPORT int ratewin_engine_open(const ratewin_options* options, ratewin_engine** out,
                                       char** errmsg);
/* Closes an engine. Its threads and connections stop (calls in flight to the store
 * finish or time out first) once the engine and every limiter opened from it are
 * closed: limiters stay usable after their engine is closed. Its pending
 * ratewin_engine_try_acquire_all_async calls are completed, their callbacks run, before
 * it returns (see there). NULL is accepted. */
RATEWIN_EXPORT void ratewin_engine_close(ratewin_engine* engine);

/* Decides whether `cost` units of `resource` fit in `limit` now and counts them if they
 * do; fills `decision` (whose size the caller sets). cost 0 asks without counting. A
 * rejection never waits on the network; an admission with Redis makes one round trip
 * bounded by command_timeout_ms. A request over the limit is not an error: the call
 * succeeds with decision->allowed == 0. */
RATEWIN_EXPORT int ratewin_engine_try_acquire(ratewin_engine* engine, uint64_t resource,
                                              const ratewin_limit* limit, uint64_t cost,
                                              ratewin_decision* decision, char** errmsg);
/* As ratewin_engine_try_acquire for the resource ratewin_hash(name, length). */
RATEWIN_EXPORT int ratewin_engine_try_acquire_name(ratewin_engine* engine, const char* name,
                                                   size_t length, const ratewin_limit* limit,
                                                   uint64_t cost, ratewin_decision* decision,
                                                   char** errmsg);

/* Since 1.2. One of the limits a request counts against (ratewin_engine_try_acquire_all). */
typedef struct ratewin_acquisition {
  size_t size;                /* sizeof(ratewin_acquisition) */
  uint64_t resource;          /* default 0 */
  const ratewin_limit* limit; /* no default (NULL): must be set */
  uint64_t cost;              /* default 1; 0 asks without counting */
} ratewin_acquisition;

/* Since 1.2. Sets acquisition->size and every field to its default. NULL is ignored. */
RATEWIN_EXPORT void ratewin_acquisition_init(ratewin_acquisition* acquisition);

/* Since 1.2. All or nothing, for a request that counts against several limits (per key
 * and per endpoint, per second and per hour): admitted only if every item admits it,
 * and a refused request counts against none of them. `items` and `decisions` are arrays
 * of `count` structs (see Growing structs for their stride); decisions[i] is items[i]'s
 * decision. *refused is set to the index of the item that refused, or to `count` when
 * all admitted. Every decision is written, and holds its item's own answer: when the
 * request is refused, nothing of it counted, an item that refused too has its refusal,
 * and one that would have admitted it has allowed == 1, retry_after_ns 0, its
 * `remaining` before the request and the reset_after_ns of the counts it holds (since
 * 1.9; before, the items after the refusing one, and all but it when it refused on the
 * engine's own counts, were zeroed as by ratewin_decision_init). Items the call did not
 * decide are described from the engine's own counts, without any write or round trip,
 * and are not counted in the stats. Items that refuse on this engine's own counts refuse without any write, and the one
 * reported is the one whose retry_after_ns is longest. One that refuses only after the
 * items before it were counted (a concurrent request, or the shared counts in Redis)
 * has their counts given back, in the store and locally: their decisions keep
 * allowed == 1 and their `remaining` includes what was given back. The stats count each
 * item's decision, admissions given back included. count 0 is a request against no
 * limit: admitted, *refused = 0, and items and decisions may then be NULL. Fails with
 * RATEWIN_EINVAL when engine, refused, items, decisions or an item's limit is NULL, or
 * an element's size is not its array's stride (or too small, or not a multiple of the
 * struct's alignment); RATEWIN_ERANGE when count elements of that size exceed the
 * address space. */
RATEWIN_EXPORT int ratewin_engine_try_acquire_all(ratewin_engine* engine,
                                                  const ratewin_acquisition* items, size_t count,
                                                  ratewin_decision* decisions, size_t* refused,
                                                  char** errmsg);

/* Since 1.2. The completion of a ratewin_engine_try_acquire_all_async call that returned
 * RATEWIN_PENDING: `data` as given to it, `decisions` the array given to it, of `count`
 * elements (its stride still the first element's size), every one written as
 * ratewin_engine_try_acquire_all writes it, and `refused` the index of the item that
 * refused or `count` when all admitted. `status` is RATEWIN_OK, or RATEWIN_ECLOSED when
 * ratewin_engine_close has begun: the decisions are made all the same (degraded ones
 * when closing cut the writes short), but the engine must no longer be called. */
typedef void (*ratewin_acquire_fn)(void* data, int status, size_t refused,
                                   ratewin_decision* decisions, size_t count);

/* Since 1.2. ratewin_engine_try_acquire_all without waiting on the network, for callers
 * that must not block (an event loop, a server with more requests in flight than
 * threads). The arguments, their rules and the errors are those of
 * ratewin_engine_try_acquire_all, and `done` must not be NULL. Then:
 *  - When the decision needs no round trip (local mode, count 0, a refusal on this
 *    engine's own counts, a refusal by RATEWIN_FAILURE_CLOSED while the store is
 *    unreachable), it is made now: the call returns RATEWIN_OK with *refused and the
 *    decisions written as ratewin_engine_try_acquire_all writes them, and `done` is not
 *    called.
 *  - Otherwise (an admission with a store, even one known to be unreachable: its `done`
 *    then comes without delay, degraded) the writes go out on the engine's I/O thread,
 *    pipelined with other such calls, and the call returns RATEWIN_PENDING without
 *    writing *refused or any decision. `done` is then called exactly once, on that
 *    thread, once the writes have their replies or failed (within command_timeout_ms; a
 *    failed write is decided by its limit's failure policy, degraded), possibly before
 *    this call has returned, never from within it.
 *  - On any error nothing is counted or written, and `done` is never called.
 * `items` (and the limits they point to) need not outlive the call. `decisions` must:
 *   after RATEWIN_PENDING the library writes it, and the caller must neither free, read
 *   nor write it until `done` has been called; the library does not touch it after
 *   `done` returns.
 * `done` runs on the engine's I/O thread, which every pending call and the engine's
 *   background reads share, so it must be short and must not block: it must not call
 *   what may wait on the network (ratewin_engine_try_acquire, _try_acquire_name,
 *   _try_acquire_all, _reset, _refund, ratewin_limiter_try_acquire), nor close the
 *   engine (that would never return). It may call ratewin_engine_try_acquire_all_async
 *   on the same engine (the new call's `done` runs later, after this one has returned)
 *   and the functions that never wait (ratewin_engine_stats, _last_error, _capacity, the
 *   limit, decision and hashing functions). What a refusal gives back of the other
 *   items' counts is sent to the store without waiting for its reply: other engines may
 *   see it shortly after `done`.
 * Closing.  Once ratewin_engine_close has begun, ratewin_engine_try_acquire_all_async
 *   called from a callback fails with RATEWIN_ECLOSED (no other thread may call an
 *   engine being closed), and a `done` called with RATEWIN_ECLOSED must not call the
 *   engine otherwise. ratewin_engine_close completes the calls pending on the engine
 *   before it returns: the writes still waiting for replies fail at once (each limit's
 *   failure policy decides, degraded) and their `done` runs, with RATEWIN_ECLOSED, on
 *   the engine's thread while ratewin_engine_close waits. (A write that thread is making
 *   synchronously, as it does while its own connection to Redis is being established,
 *   ends first, within command_timeout_ms. If limiters opened from the engine are still
 *   open, its store keeps running and ratewin_engine_close waits for the writes'
 *   replies instead.) A `done` that began before ratewin_engine_close (status
 *   RATEWIN_OK) may use the engine until it returns: ratewin_engine_close waits for it.
 *   Once ratewin_engine_close has returned no `done` runs any more, so `data` may be
 *   freed. */
RATEWIN_EXPORT int ratewin_engine_try_acquire_all_async(ratewin_engine* engine,
                                                        const ratewin_acquisition* items,
                                                        size_t count, ratewin_decision* decisions,
                                                        size_t* refused, ratewin_acquire_fn done,
                                                        void* data, char** errmsg);

/* Since 1.2. Forgets what `resource` counted under `limit` (under every limit of its
 * scope, interval and resolution): the shared counts in the store and this engine's own,
 * so the next request starts a fresh window (a login counter cleared after a successful
 * login). *shared_cleared, when not NULL, is set to 1 when the store's counts were
 * deleted or there is no store, to 0 when the store could not be reached (known to be
 * down, or no answer within command_timeout_ms) or refused (ratewin_engine_last_error
 * says why): this engine's counts are gone all the same, the shared ones then stay until
 * they leave the window.
 * Other engines keep what they had already read of the shared counts until it leaves
 * their window: reset on the engine that uses the counter. */
RATEWIN_EXPORT int ratewin_engine_reset(ratewin_engine* engine, uint64_t resource,
                                        const ratewin_limit* limit, int32_t* shared_cleared,
                                        char** errmsg);
/* Since 1.2. Gives back up to `cost` units counted for `resource` under `limit` (work
 * that turned out not to count, a request that failed before it did anything), newest
 * subinterval first, in the store and in this engine; never below 0. *refunded, when not
 * NULL, is set to the units given back: at most what this engine's window holds (its own
 * counts and the shared ones it has read). A failed store write is not an error: it is
 * noted for ratewin_engine_last_error, and the shared counts then err high until they
 * leave the window. */
RATEWIN_EXPORT int ratewin_engine_refund(ratewin_engine* engine, uint64_t resource,
                                         const ratewin_limit* limit, uint64_t cost,
                                         uint64_t* refunded, char** errmsg);

/* Counters since the engine was opened, and gauges of its state now. Durations in
 * nanoseconds. The store fields are all 0 in local mode. */
typedef struct ratewin_stats {
  size_t size;               /* sizeof(ratewin_stats) */
  uint64_t allowed;          /* decisions that admitted the request */
  uint64_t rejected;         /* decisions that turned it away */
  uint64_t degraded;         /* decisions made while the store was unreachable */
  uint64_t limiters;         /* limiters held now */
  uint64_t max_limiters;     /* the configured bound */
  uint64_t pinned;           /* limiters held by open ratewin_limiter handles */
  uint64_t evictions;        /* limiters with empty windows dropped to make room */
  uint64_t evictions_active; /* limiters that still counted, dropped under a flood of new
                                keys (always 0 in 1.5; counted again since 1.6) */
  int32_t store;             /* 1: a store is configured */
  int32_t store_available;   /* 1: writes and reads go through */
  uint64_t circuit_opens;    /* times the store was found unreachable */
  uint64_t connections;      /* times the background connection (re)connected */
  uint64_t writes_ok;        /* allowed requests counted in the store */
  uint64_t writes_failed;    /* writes that failed or timed out */
  uint64_t writes_skipped;   /* writes not attempted: the store was unreachable */
  int64_t write_p50_ns;      /* write round-trip latency quantiles */
  int64_t write_p90_ns;
  int64_t write_p99_ns;
  int64_t write_max_ns;
  uint64_t warm_starts; /* limiters loaded from the store before deciding */
  uint64_t warm_start_failures;
  uint64_t sync_rounds;    /* boundary reads completed */
  uint64_t sync_failures;  /* boundary reads that failed */
  uint64_t sync_last_keys; /* windows read by the last boundary read */
  int64_t sync_last_duration_ns;
  int64_t sync_max_duration_ns;
  uint64_t active_limiters; /* limiters kept in step by boundary reads */
  int64_t clock_offset_ns;  /* the store's clock minus the engine's */
  int64_t clock_rtt_ns;     /* round trip of the measurement used */
  /* Since 1.1. */
  uint64_t overflowed;             /* decisions on new resources made by an overflow limiter */
  uint64_t memory;                 /* bytes held by limiters now */
  uint64_t max_memory;             /* the configured bound */
  uint64_t sync_last_change_sets;  /* change sets read by the last boundary read */
  /* Since 1.4. */
  uint64_t would_reject; /* decisions of limits in shadow that would have refused (they
                            are counted in allowed) */
  uint64_t live_nodes;   /* engines on this key prefix at the last heartbeat's reply, this
                            one included (0: not read yet) */
  /* Since 1.8. Batched write mode (ratewin_options.write_mode). */
  uint64_t flushes;        /* flushes that wrote admitted counts to the store */
  uint64_t flush_failures; /* flushes with a write that failed (its counts are kept for
                              the next flush while in the window) */
  uint64_t flushed_units;  /* units admitted here and written by flushes */
} ratewin_stats;

/* Sets stats->size and zeroes the rest. NULL is ignored. */
RATEWIN_EXPORT void ratewin_stats_init(ratewin_stats* stats);
/* Fills `stats` (whose size the caller sets). */
RATEWIN_EXPORT int ratewin_engine_stats(const ratewin_engine* engine, ratewin_stats* stats);
/* The latest store failure in *out, "" if none; the caller frees it with ratewin_free(). */
RATEWIN_EXPORT int ratewin_engine_last_error(const ratewin_engine* engine, char** out);
/* Since 1.1. How many limiters of `limit`'s window geometry the engine's bounds
 * (max_limiters, max_memory) hold, were they all of it, in *out: 0 when not even one fits
 * (its window is larger than a shard's share of max_memory). */
RATEWIN_EXPORT int ratewin_engine_capacity(const ratewin_engine* engine, const ratewin_limit* limit,
                                           uint64_t* out);
/* Since 1.8. Batched write mode: writes what the engine admitted and has not yet written,
 * reads those limiters' shared windows back and renews their budgets, now rather than at
 * the next flush interval (ratewin_engine_close flushes too). RATEWIN_EUNAVAILABLE when a
 * write failed: its counts are kept for a later flush, while they are in the window.
 * RATEWIN_OK at once in sync or local mode. Blocks for up to command_timeout_ms. */
RATEWIN_EXPORT int ratewin_engine_flush(ratewin_engine* engine, char** errmsg);
/* Since 1.5. The key in the shared store (Redis) that holds `resource`'s counts under
 * `limit` in *out, "" in local mode (resources are hashed into keys: this finds a name's
 * key for redis-cli); the caller frees it with ratewin_free(). */
RATEWIN_EXPORT int ratewin_engine_store_key(const ratewin_engine* engine, uint64_t resource,
                                            const ratewin_limit* limit, char** out);

/* ---- Limiters ------------------------------------------------------------------- */

/* A limiter handle: one resource under one limit, without the lookup on every call, and
 * never evicted while open. */
typedef struct ratewin_limiter ratewin_limiter;

/* Opens a handle on the limiter of (resource, limit) in *out. It holds at most 65535
 * handles per limiter (RATEWIN_ERANGE beyond). */
RATEWIN_EXPORT int ratewin_limiter_open(ratewin_engine* engine, uint64_t resource,
                                        const ratewin_limit* limit, ratewin_limiter** out,
                                        char** errmsg);
/* Closes a handle. NULL is accepted. */
RATEWIN_EXPORT void ratewin_limiter_close(ratewin_limiter* limiter);
/* As ratewin_engine_try_acquire for the handle's resource and limit. */
RATEWIN_EXPORT int ratewin_limiter_try_acquire(ratewin_limiter* limiter, uint64_t cost,
                                               ratewin_decision* decision, char** errmsg);
/* The handle's resource id. Returns 0 for NULL. */
RATEWIN_EXPORT uint64_t ratewin_limiter_resource(const ratewin_limiter* limiter);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RATEWIN_CAPI_RATEWIN_H_ */
