/* The C ABI's own test, in plain C11, linked against libratewin.so: every function and
 * every error path. The Redis part reaches a private server of the test kit's
 * (tests/support/redis_server_c.h: redis-server, or valkey-server with
 * RATEWIN_TEST_REDIS=valkey) on its Unix socket; the TLS part another on free loopback
 * ports, with the kit's certificates. */
#define _POSIX_C_SOURCE 200809L

#include <ratewin.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_server_c.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    ++checks;                                                         \
    if (!(cond)) {                                                    \
      ++failures;                                                     \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
    }                                                                 \
  } while (0)

/* Checks that `call` returned `code` and, when a message is expected, that it names
 * `word`; frees the message. */
#define CHECK_ERROR(call, code, message, word)                               \
  do {                                                                       \
    int rc_ = (call);                                                        \
    CHECK(rc_ == (code));                                                    \
    if (rc_ != (code)) fprintf(stderr, "  got %s\n", ratewin_err_name(rc_)); \
    if ((word) != NULL) {                                                    \
      CHECK((message) != NULL && strstr((message), (word)) != NULL);         \
      if ((message) != NULL && strstr((message), (word)) == NULL)            \
        fprintf(stderr, "  message: %s\n", (message));                      \
    }                                                                        \
    ratewin_free(message);                                                   \
    (message) = NULL;                                                        \
  } while (0)

static const int64_t kSecond = 1000000000;

/* ---- A manual clock and a recording logger, through the callbacks ---------------- */

static int64_t manual_now(void* data) { return atomic_load((_Atomic int64_t*)data); }

struct log_record {
  pthread_mutex_t mutex;
  int warnings;
  int unreachable; /* messages saying Redis cannot be reached */
  int malformed;   /* messages whose length disagrees with their NUL */
};

static void record_log(void* data, int level, const char* message, size_t length) {
  struct log_record* log = data;
  pthread_mutex_lock(&log->mutex);
  if (level >= RATEWIN_LOG_WARNING) {
    ++log->warnings;
    /* Shown, so that a failed check on a degraded decision says what the engine saw. */
    fprintf(stderr, "  engine warning: %.*s\n", (int)length, message);
  }
  if (strstr(message, "reachable") != NULL) ++log->unreachable;
  if (strlen(message) != length) ++log->malformed;
  pthread_mutex_unlock(&log->mutex);
}

static ratewin_limit* make_limit(uint64_t max, uint64_t interval_ms, uint64_t resolution_ms,
                                 int32_t policy) {
  ratewin_limit_options o;
  ratewin_limit_options_init(&o);
  o.max = max;
  o.interval_ms = interval_ms;
  o.resolution_ms = resolution_ms;
  o.failure_policy = policy;
  ratewin_limit* limit = NULL;
  char* message = (char*)&o; /* stale: success must set it to NULL */
  int rc = ratewin_limit_new(&o, &limit, &message);
  CHECK(rc == 0 && limit != NULL && message == NULL);
  return limit;
}

/* ---- Versions, errors, hashing -------------------------------------------------- */

static void test_versions_and_errors(void) {
  char expected[32];
  CHECK(ratewin_version() == RATEWIN_VERSION_HEX);
  snprintf(expected, sizeof expected, "%d.%d.%d", RATEWIN_VERSION_MAJOR, RATEWIN_VERSION_MINOR,
           RATEWIN_VERSION_PATCH);
  CHECK(strcmp(ratewin_version_string(), expected) == 0);

  const int codes[] = {RATEWIN_OK,        RATEWIN_EINVAL,  RATEWIN_ENOMEM,
                       RATEWIN_ERANGE,    RATEWIN_ENOSPC,  RATEWIN_ESYSTEM,
                       RATEWIN_EINTERNAL, RATEWIN_ECLOSED, RATEWIN_PENDING,
                       RATEWIN_EUNAVAILABLE};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; ++i) {
    CHECK(strcmp(ratewin_strerror(codes[i]), "unknown error") != 0);
    CHECK(strncmp(ratewin_err_name(codes[i]), "RATEWIN_", 8) == 0);
    CHECK(strcmp(ratewin_err_name(codes[i]), "RATEWIN_UNKNOWN") != 0);
  }
  CHECK(strcmp(ratewin_err_name(RATEWIN_EINVAL), "RATEWIN_EINVAL") == 0);
  CHECK(strcmp(ratewin_err_name(RATEWIN_PENDING), "RATEWIN_PENDING") == 0);
  CHECK(strcmp(ratewin_err_name(RATEWIN_ECLOSED), "RATEWIN_ECLOSED") == 0);
  CHECK(strcmp(ratewin_err_name(RATEWIN_EUNAVAILABLE), "RATEWIN_EUNAVAILABLE") == 0);
  CHECK(RATEWIN_PENDING > 0 && RATEWIN_ECLOSED < 0); /* not a failure; a failure */
  CHECK(strcmp(ratewin_strerror(-1000), "unknown error") == 0);
  CHECK(strcmp(ratewin_err_name(42), "RATEWIN_UNKNOWN") == 0);
  ratewin_free(NULL);

  /* XXH3-64, seed 0: the specification's value for the empty input. */
  CHECK(ratewin_hash("", 0) == UINT64_C(0x2D06800538D394C2));
  CHECK(ratewin_hash(NULL, 0) == UINT64_C(0x2D06800538D394C2));
  CHECK(ratewin_hash("tenant-42", 9) == ratewin_hash("tenant-42:/v1", 9));
  CHECK(ratewin_hash("a", 1) != ratewin_hash("b", 1));
}

/* ---- Limits ---------------------------------------------------------------------- */

static void test_limits(void) {
  ratewin_limit_options o;
  ratewin_limit_options_init(&o);
  CHECK(o.size == sizeof o);
  CHECK(o.max == 0 && o.interval_ms == 0 && o.resolution_ms == 0);
  CHECK(o.failure_policy == RATEWIN_FAILURE_LOCAL && o.scope == 0);
  CHECK(o.algorithm == RATEWIN_ALGORITHM_SLIDING_WINDOW && o.reserved2 == 0 && o.burst == 0);
  ratewin_limit_options_init(NULL);

  /* The resolution is chosen when 0, and read back. */
  ratewin_limit* limit = make_limit(100, 60000, 0, RATEWIN_FAILURE_CLOSED);
  ratewin_limit_options got;
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(limit, &got) == 0);
  CHECK(got.max == 100 && got.interval_ms == 60000 && got.resolution_ms == 6000);
  CHECK(got.failure_policy == RATEWIN_FAILURE_CLOSED);
  CHECK(ratewin_limit_get(NULL, &got) == RATEWIN_EINVAL);
  CHECK(ratewin_limit_get(limit, NULL) == RATEWIN_EINVAL);
  got.size = 4;
  CHECK(ratewin_limit_get(limit, &got) == RATEWIN_EINVAL);
  ratewin_limit_free(limit);
  ratewin_limit_free(NULL);

  /* Every way a limit can be wrong: an error code, a message naming the problem, and
   * *out left alone. */
  ratewin_limit* out = (ratewin_limit*)&o; /* a sentinel that must not change */
  ratewin_limit* const sentinel = out;
  char* message = NULL;
  struct {
    uint64_t max, interval_ms, resolution_ms;
    int32_t policy;
    const char* word;
  } bad[] = {
      {0, 1000, 0, 0, "max"},
      {RATEWIN_LIMIT_MAX_COUNT + 1, 1000, 0, 0, "max"},
      {10, 0, 0, 0, "interval"},
      {10, RATEWIN_LIMIT_MAX_INTERVAL_MS + 1, 0, 0, "interval"},
      {10, UINT64_MAX, 0, 0, "interval"}, /* must not wrap to a negative duration */
      {10, 1000, 300, 0, "divide"},
      {10, 100000, 1, 0, "subintervals"},
      {10, 1000, UINT64_MAX, 0, "resolution"},
      {10, 1000, 0, 7, "failure_policy"},
      {10, 1000, 0, -1, "failure_policy"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ratewin_limit_options b;
    ratewin_limit_options_init(&b);
    b.max = bad[i].max;
    b.interval_ms = bad[i].interval_ms;
    b.resolution_ms = bad[i].resolution_ms;
    b.failure_policy = bad[i].policy;
    CHECK_ERROR(ratewin_limit_new(&b, &out, &message), RATEWIN_EINVAL, message, bad[i].word);
    CHECK(out == sentinel);
    /* Without a message pointer the code is the same. */
    CHECK(ratewin_limit_new(&b, &out, NULL) == RATEWIN_EINVAL);
  }
  CHECK_ERROR(ratewin_limit_new(NULL, &out, &message), RATEWIN_EINVAL, message, "NULL");
  o.max = 10;
  o.interval_ms = 1000;
  CHECK_ERROR(ratewin_limit_new(&o, NULL, &message), RATEWIN_EINVAL, message, "out");
  o.size = 0; /* never initialised */
  CHECK_ERROR(ratewin_limit_new(&o, &out, &message), RATEWIN_EINVAL, message, "size");
  CHECK(out == sentinel);

  /* A caller built against a newer header passes a larger struct: accepted while the
   * fields this library does not know hold their default (0), refused otherwise. */
  struct {
    ratewin_limit_options known;
    uint64_t newer[2];
  } newer;
  memset(&newer, 0, sizeof newer);
  ratewin_limit_options_init(&newer.known);
  newer.known.size = sizeof newer;
  newer.known.max = 5;
  newer.known.interval_ms = 1000;
  ratewin_limit* grown = NULL;
  CHECK(ratewin_limit_new(&newer.known, &grown, &message) == 0 && grown != NULL);
  CHECK(message == NULL);
  ratewin_limit_free(grown);
  newer.newer[1] = 1;
  CHECK_ERROR(ratewin_limit_new(&newer.known, &out, &message), RATEWIN_EINVAL, message,
              "does not know");

  /* No padding: the field that ended 1.0's struct is reserved and must be 0, so that a
   * field a newer header adds there is never taken for padding. */
  CHECK(offsetof(ratewin_limit_options, scope) ==
        offsetof(ratewin_limit_options, reserved) + sizeof(int32_t));
  ratewin_limit_options r;
  ratewin_limit_options_init(&r);
  CHECK(r.reserved == 0);
  r.max = 5;
  r.interval_ms = 1000;
  r.reserved = 7;
  CHECK_ERROR(ratewin_limit_new(&r, &out, &message), RATEWIN_EINVAL, message, "reserved");
  CHECK(out == sentinel);

  /* ratewin_limit_get writes only what the caller's size covers, and refuses sizes below
   * the first release's struct. */
  ratewin_limit* five = make_limit(5, 1000, 100, RATEWIN_FAILURE_OPEN);
  ratewin_limit_options back;
  memset(&back, 0x5A, sizeof back);
  back.size = sizeof back;
  CHECK(ratewin_limit_get(five, &back) == 0);
  CHECK(back.max == 5 && back.interval_ms == 1000 && back.resolution_ms == 100);
  CHECK(back.failure_policy == RATEWIN_FAILURE_OPEN && back.reserved == 0 && back.scope == 0);
  CHECK(back.algorithm == RATEWIN_ALGORITHM_SLIDING_WINDOW && back.reserved2 == 0);
  CHECK(back.burst == 0);
  back.size = offsetof(ratewin_limit_options, reserved);
  CHECK(ratewin_limit_get(five, &back) == RATEWIN_EINVAL);
  ratewin_limit_free(five);
}

/* Every struct is free of padding: each ends where its last field ends. */
_Static_assert(sizeof(ratewin_limit_options) ==
                   offsetof(ratewin_limit_options, reserved3) + sizeof(int32_t),
               "ratewin_limit_options has trailing padding");
_Static_assert(offsetof(ratewin_limit_options, mode) ==
                   offsetof(ratewin_limit_options, burst) + sizeof(uint64_t),
               "ratewin_limit_options has padding before mode");
_Static_assert(offsetof(ratewin_limit_options, burst) ==
                   offsetof(ratewin_limit_options, reserved2) + sizeof(int32_t),
               "ratewin_limit_options has padding before burst");
_Static_assert(offsetof(ratewin_limit_options, algorithm) ==
                   offsetof(ratewin_limit_options, scope) + sizeof(uint64_t),
               "ratewin_limit_options has padding before algorithm");
_Static_assert(sizeof(ratewin_acquisition) ==
                   offsetof(ratewin_acquisition, cost) + sizeof(uint64_t),
               "ratewin_acquisition has trailing padding");
_Static_assert(sizeof(ratewin_options) ==
                   offsetof(ratewin_options, flush_interval_ms) + sizeof(uint32_t),
               "ratewin_options has trailing padding");
_Static_assert(offsetof(ratewin_options, write_mode) ==
                   offsetof(ratewin_options, tls) + sizeof(void*),
               "ratewin_options has padding before write_mode");
_Static_assert(offsetof(ratewin_options, tls) ==
                   offsetof(ratewin_options, reserved2) + sizeof(int32_t),
               "ratewin_options has padding before tls");
_Static_assert(sizeof(ratewin_tls_options) ==
                   offsetof(ratewin_tls_options, reserved) + sizeof(int32_t),
               "ratewin_tls_options has trailing padding");
_Static_assert(offsetof(ratewin_tls_options, verify) ==
                   offsetof(ratewin_tls_options, min_version) + sizeof(const char*),
               "ratewin_tls_options has padding before verify");
_Static_assert(offsetof(ratewin_options, partition_share) ==
                   offsetof(ratewin_options, reserved) + sizeof(int32_t),
               "ratewin_options has padding before partition_share");
_Static_assert(sizeof(ratewin_decision) ==
                   offsetof(ratewin_decision, reserved) + sizeof(int32_t),
               "ratewin_decision has trailing padding");
_Static_assert(offsetof(ratewin_decision, would_reject) ==
                   offsetof(ratewin_decision, retry_after_ns) + sizeof(int64_t),
               "ratewin_decision has padding before would_reject");
_Static_assert(sizeof(ratewin_stats) ==
                   offsetof(ratewin_stats, flushed_units) + sizeof(uint64_t),
               "ratewin_stats has trailing padding");

/* ---- A local engine on a manual clock -------------------------------------------- */

static _Atomic int64_t manual_clock = 1700000000 * INT64_C(1000000000);

static ratewin_engine* open_manual_engine(uint64_t max_limiters) {
  ratewin_options o;
  ratewin_options_init(&o);
  o.clock = manual_now;
  o.clock_data = (void*)&manual_clock;
  o.max_limiters = max_limiters;
  ratewin_engine* engine = NULL;
  char* message = (char*)&o; /* stale: success must set it to NULL */
  CHECK(ratewin_engine_open(&o, &engine, &message) == 0 && engine != NULL && message == NULL);
  return engine;
}

/* Since 1.7: limits from text, in the grammar and words of Python's ratewin.parse. */
static void test_limit_parse(void) {
  char* message = NULL;
  ratewin_limit* limit = NULL;
  ratewin_limit_options got;
  CHECK(ratewin_limit_parse("100 per 5 Minutes", NULL, &limit, &message) == RATEWIN_OK);
  CHECK(message == NULL && limit != NULL);
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(limit, &got) == RATEWIN_OK);
  CHECK(got.max == 100 && got.interval_ms == 300000 && got.resolution_ms == 30000);
  ratewin_limit_free(limit);

  /* The other settings come from the options. */
  ratewin_limit_options o;
  ratewin_limit_options_init(&o);
  o.algorithm = RATEWIN_ALGORITHM_TOKEN_BUCKET;
  o.burst = 3;
  o.failure_policy = RATEWIN_FAILURE_CLOSED;
  limit = NULL;
  CHECK(ratewin_limit_parse("10/second", &o, &limit, &message) == RATEWIN_OK);
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(limit, &got) == RATEWIN_OK);
  CHECK(got.max == 10 && got.interval_ms == 1000 && got.burst == 3 &&
        got.algorithm == RATEWIN_ALGORITHM_TOKEN_BUCKET &&
        got.failure_policy == RATEWIN_FAILURE_CLOSED);
  ratewin_limit_free(limit);

  ratewin_limit* const sentinel = (ratewin_limit*)&o;
  ratewin_limit* out = sentinel;
  struct {
    const char* text;
    const char* words;
  } bad[] = {
      {"", "ratewin_limit_parse: cannot read '' as a limit"},
      {"ten/second", "cannot read 'ten/second' as a limit; write COUNT/UNIT"},
      {"10/fortnight", "unknown unit 'fortnight' in '10/fortnight'"},
      {"0/second", "'0/second' allows nothing"},
      {"1/0 seconds", "window of 0"},
      {"99999999999/second", "count must be from 1 to 4294967295, got 99999999999"},
      {"1/400 days", "366 days"},
      {"10per second", "cannot read"},
      {"1/second; 2/day", "cannot read '1/second; 2/day' as a limit"}, /* one only */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    CHECK_ERROR(ratewin_limit_parse(bad[i].text, NULL, &out, &message), RATEWIN_EINVAL, message,
                bad[i].words);
    CHECK(out == sentinel);
  }
  /* The options' checks, and theirs in the text's terms. */
  o.burst = 0;
  o.algorithm = RATEWIN_ALGORITHM_SLIDING_LOG;
  CHECK_ERROR(ratewin_limit_parse("5000/second", &o, &out, &message), RATEWIN_EINVAL, message,
              "'5000/second': count 5000 is more than 4096");
  ratewin_limit_options_init(&o);
  o.max = 3;
  CHECK_ERROR(ratewin_limit_parse("1/second", &o, &out, &message), RATEWIN_EINVAL, message,
              "max and interval_ms must be 0");
  o.max = 0;
  o.reserved = 1;
  CHECK_ERROR(ratewin_limit_parse("1/second", &o, &out, &message), RATEWIN_EINVAL, message,
              "reserved");
  CHECK_ERROR(ratewin_limit_parse(NULL, NULL, &out, &message), RATEWIN_EINVAL, message,
              "text is NULL");
  CHECK_ERROR(ratewin_limit_parse("1/second", NULL, NULL, &message), RATEWIN_EINVAL, message,
              "out is NULL");
  CHECK(out == sentinel);

  /* Several. */
  ratewin_limit* many[3] = {sentinel, sentinel, sentinel};
  size_t count = 0;
  CHECK(ratewin_limits_parse("1/second, 2/minute | 3/hour", NULL, many, 3, &count, &message) ==
        RATEWIN_OK);
  CHECK(count == 3);
  const uint64_t want[3][2] = {{1, 1000}, {2, 60000}, {3, 3600000}};
  for (size_t i = 0; i < 3; ++i) {
    ratewin_limit_options_init(&got);
    CHECK(ratewin_limit_get(many[i], &got) == RATEWIN_OK);
    CHECK(got.max == want[i][0] && got.interval_ms == want[i][1]);
    ratewin_limit_free(many[i]);
    many[i] = sentinel;
  }
  /* Too little room: how many, and nothing made. */
  CHECK_ERROR(ratewin_limits_parse("1/second; 2/day", NULL, many, 1, &count, &message),
              RATEWIN_ENOSPC, message, "room for 1");
  CHECK(count == 2 && many[0] == sentinel);
  CHECK(ratewin_limits_parse("1/second; 2/day", NULL, NULL, 0, &count, NULL) == RATEWIN_ENOSPC);
  CHECK(count == 2);
  CHECK_ERROR(ratewin_limits_parse(" ; ", NULL, many, 3, &count, &message), RATEWIN_EINVAL,
              message, "no limit in ' ; '");
  CHECK_ERROR(ratewin_limits_parse("1/second;;2/day", NULL, many, 3, &count, &message),
              RATEWIN_EINVAL, message, "an empty limit in '1/second;;2/day'");
  CHECK_ERROR(ratewin_limits_parse("1/second; 2/fortnight", NULL, many, 3, &count, &message),
              RATEWIN_EINVAL, message, "ratewin_limits_parse: unknown unit 'fortnight'");
  CHECK_ERROR(ratewin_limits_parse("1/second", NULL, many, 3, NULL, &message), RATEWIN_EINVAL,
              message, "count is NULL");
  CHECK(many[0] == sentinel && many[1] == sentinel);
}

static void test_options(void) {
  ratewin_options o;
  ratewin_options_init(&o);
  CHECK(o.size == sizeof o);
  CHECK(o.max_limiters == 1000000 && o.redis == NULL && o.key_prefix == NULL);
  CHECK(o.connect_timeout_ms == 500 && o.command_timeout_ms == 100);
  CHECK(o.max_connections == 64 && o.sync_settle_ms == 10 && o.sync_clock == 1);
  CHECK(o.clock_sync_interval_ms == 10000);
  CHECK(o.clock == NULL && o.logger == NULL);
  CHECK(o.max_memory == 268435456);
  CHECK(o.require_store == 0 && o.reserved == 0);
  CHECK(o.partition_share == 1.0 && o.partitioned_unknown == RATEWIN_FAILURE_LOCAL);
  CHECK(o.reserved2 == 0);
  CHECK(o.write_mode == RATEWIN_WRITE_SYNC && o.flush_interval_ms == 0);
  ratewin_options_init(NULL);

  /* A caller built against 1.0 passes the options as they were then: max_memory keeps
   * its default. */
  {
    ratewin_options old;
    ratewin_options_init(&old);
    old.size = offsetof(ratewin_options, max_memory);
    old.max_memory = 1; /* beyond the size it gave: not read */
    ratewin_engine* e = NULL;
    CHECK(ratewin_engine_open(&old, &e, NULL) == 0 && e != NULL);
    ratewin_stats st;
    ratewin_stats_init(&st);
    CHECK(ratewin_engine_stats(e, &st) == 0 && st.max_memory == 268435456);
    ratewin_engine_close(e);
  }

  /* Every default: a local engine. */
  ratewin_engine* engine = NULL;
  char* message = NULL;
  CHECK(ratewin_engine_open(NULL, &engine, &message) == 0 && engine != NULL);
  ratewin_engine_close(engine);
  ratewin_engine_close(NULL);

  ratewin_engine* const sentinel = (ratewin_engine*)&o;
  ratewin_engine* out = sentinel;
  CHECK_ERROR(ratewin_engine_open(&o, NULL, &message), RATEWIN_EINVAL, message, "out");
  struct {
    const char* field;
    ratewin_options options;
  } bad[16];
  for (size_t i = 0; i < 16; ++i) ratewin_options_init(&bad[i].options);
  bad[0].field = "max_limiters";
  bad[0].options.max_limiters = 0;
  bad[1].field = "command_timeout";
  bad[1].options.command_timeout_ms = 0;
  bad[2].field = "connect_timeout";
  bad[2].options.connect_timeout_ms = 86400001;
  bad[3].field = "max_connections";
  bad[3].options.max_connections = 0;
  bad[4].field = "key_prefix";
  bad[4].options.key_prefix = "a{b}";
  bad[5].field = "Redis URL";
  bad[5].options.redis = "http://localhost";
  bad[6].field = "size";
  bad[6].options.size = 8;
  bad[7].field = "max_memory";
  bad[7].options.max_memory = 16383;
  bad[8].field = "require_store";
  bad[8].options.require_store = 2;
  bad[9].field = "reserved";
  bad[9].options.reserved = 1;
  bad[10].field = "partition_share";
  bad[10].options.partition_share = 1001;
  bad[11].field = "partition_share";
  bad[11].options.partition_share = -1;
  bad[12].field = "partitioned_unknown";
  bad[12].options.partitioned_unknown = RATEWIN_FAILURE_OPEN;
  bad[13].field = "reserved2";
  bad[13].options.reserved2 = 1;
  bad[14].field = "write_mode";
  bad[14].options.write_mode = 2;
  bad[15].field = "flush_interval";
  bad[15].options.flush_interval_ms = 1001;
  for (size_t i = 0; i < 16; ++i) {
    CHECK_ERROR(ratewin_engine_open(&bad[i].options, &out, &message), RATEWIN_EINVAL, message,
                bad[i].field);
    CHECK(out == sentinel);
  }

  /* Options from a newer header: accepted while the unknown fields are 0. */
  struct {
    ratewin_options known;
    uint64_t newer[2];
  } newer;
  memset(&newer, 0, sizeof newer);
  ratewin_options_init(&newer.known);
  newer.known.size = sizeof newer;
  message = (char*)&o; /* stale: success must set it to NULL */
  CHECK(ratewin_engine_open(&newer.known, &engine, &message) == 0 && message == NULL);
  ratewin_engine_close(engine);
  newer.newer[0] = 1;
  CHECK_ERROR(ratewin_engine_open(&newer.known, &out, &message), RATEWIN_EINVAL, message,
              "does not know");
  CHECK(out == sentinel);
}

static void test_local_engine(void) {
  ratewin_engine* engine = open_manual_engine(1000);
  ratewin_limit* limit = make_limit(3, 10000, 1000, RATEWIN_FAILURE_LOCAL);
  ratewin_decision d;
  ratewin_decision_init(&d);
  CHECK(d.size == sizeof d && d.allowed == 0 && d.limit == 0);
  ratewin_decision_init(NULL);
  char* message = (char*)"not cleared";

  const uint64_t resource = ratewin_hash("user-1", 6);
  for (uint64_t i = 0; i < 3; ++i) {
    CHECK(ratewin_engine_try_acquire(engine, resource, limit, 1, &d, &message) == 0);
    CHECK(message == NULL); /* set to NULL on success */
    CHECK(d.allowed == 1 && d.degraded == 0 && d.limit == 3 && d.remaining == 2 - i);
    CHECK(d.retry_after_ns == 0 && d.reset_after_ns == 11 * kSecond);
  }
  /* By name: the same resource. */
  CHECK(ratewin_engine_try_acquire_name(engine, "user-1", 6, limit, 1, &d, NULL) == 0);
  CHECK(d.allowed == 0 && d.remaining == 0);
  /* All three counts sit in the first subinterval. A trailing count is discounted by at
   * most max / 4, nothing for a max of 3: one more fits once that subinterval has left
   * the window, 11 s on. */
  CHECK(d.retry_after_ns == 11 * kSecond);
  CHECK(d.reset_after_ns == 11 * kSecond);

  /* Its headers, one index at a time. */
  const char* expected[4][2] = {{"X-RateLimit-Limit", "3"},
                                {"X-RateLimit-Remaining", "0"},
                                {"X-RateLimit-Reset", "11"},
                                {"Retry-After", "11"}};
  size_t count = 0;
  const char* name = NULL;
  char value[RATEWIN_HEADER_VALUE_SIZE];
  int rc;
  while ((rc = ratewin_decision_header(&d, count, &name, value, sizeof value)) == 0) {
    CHECK(count < 4);
    if (count < 4) {
      CHECK(strcmp(name, expected[count][0]) == 0);
      CHECK(strcmp(value, expected[count][1]) == 0);
    }
    ++count;
  }
  CHECK(rc == RATEWIN_ERANGE && count == 4);
  CHECK(ratewin_decision_header(&d, 0, &name, value, 1) == RATEWIN_ENOSPC);
  CHECK(ratewin_decision_header(&d, 0, &name, value, 2) == 0 && strcmp(value, "3") == 0);
  CHECK(ratewin_decision_header(NULL, 0, &name, value, sizeof value) == RATEWIN_EINVAL);
  CHECK(ratewin_decision_header(&d, 0, NULL, value, sizeof value) == RATEWIN_EINVAL);
  CHECK(ratewin_decision_header(&d, 0, &name, NULL, sizeof value) == RATEWIN_EINVAL);

  /* Cost 0 asks without counting; a cost above max can never pass. */
  CHECK(ratewin_engine_try_acquire(engine, 7, limit, 0, &d, NULL) == 0 && d.allowed == 1);
  CHECK(d.remaining == 3);
  CHECK(ratewin_engine_try_acquire(engine, 7, limit, 4, &d, NULL) == 0 && d.allowed == 0);
  CHECK(d.retry_after_ns == RATEWIN_NEVER);
  CHECK(ratewin_decision_header(&d, 3, &name, value, sizeof value) == RATEWIN_ERANGE);

  /* Time passes: the window slides. */
  atomic_fetch_add(&manual_clock, 11 * kSecond);
  CHECK(ratewin_engine_try_acquire(engine, resource, limit, 1, &d, NULL) == 0);
  CHECK(d.allowed == 1);

  /* Argument errors. */
  message = NULL;
  CHECK_ERROR(ratewin_engine_try_acquire(NULL, 1, limit, 1, &d, &message), RATEWIN_EINVAL,
              message, "engine");
  CHECK_ERROR(ratewin_engine_try_acquire(engine, 1, NULL, 1, &d, &message), RATEWIN_EINVAL,
              message, "limit");
  CHECK_ERROR(ratewin_engine_try_acquire(engine, 1, limit, 1, NULL, &message), RATEWIN_EINVAL,
              message, "decision");
  CHECK_ERROR(ratewin_engine_try_acquire_name(engine, NULL, 3, limit, 1, &d, &message),
              RATEWIN_EINVAL, message, "name");
  CHECK(ratewin_engine_try_acquire_name(engine, NULL, 0, limit, 1, &d, NULL) == 0);
  ratewin_decision small;
  ratewin_decision_init(&small);
  small.size = 8;
  CHECK_ERROR(ratewin_engine_try_acquire(engine, 1, limit, 1, &small, &message), RATEWIN_EINVAL,
              message, "size");
  {
    const char* name = NULL;
    char value[RATEWIN_HEADER_VALUE_SIZE];
    CHECK(ratewin_decision_header(&small, 0, &name, value, sizeof value) == RATEWIN_EINVAL);
    CHECK(name == NULL);
  }

  /* A larger decision (a newer caller): the library writes only what it knows. */
  struct {
    ratewin_decision known;
    unsigned char canary[16];
  } grown;
  ratewin_decision_init(&grown.known);
  grown.known.size = sizeof grown;
  memset(grown.canary, 0xAB, sizeof grown.canary);
  CHECK(ratewin_engine_try_acquire(engine, 99, limit, 1, &grown.known, NULL) == 0);
  CHECK(grown.known.size == sizeof grown && grown.known.allowed == 1 && grown.known.limit == 3);
  for (size_t i = 0; i < sizeof grown.canary; ++i) CHECK(grown.canary[i] == 0xAB);

  /* Stats. */
  ratewin_stats s;
  ratewin_stats_init(&s);
  CHECK(s.size == sizeof s && s.allowed == 0);
  ratewin_stats_init(NULL);
  CHECK(ratewin_engine_stats(engine, &s) == 0);
  CHECK(s.allowed == 7 && s.rejected == 2 && s.degraded == 0);
  CHECK(s.limiters == 4 && s.max_limiters == 1000 && s.pinned == 0);
  CHECK(s.store == 0 && s.store_available == 0 && s.writes_ok == 0);
  CHECK(ratewin_engine_stats(NULL, &s) == RATEWIN_EINVAL);
  CHECK(ratewin_engine_stats(engine, NULL) == RATEWIN_EINVAL);
  s.size = 0;
  CHECK(ratewin_engine_stats(engine, &s) == RATEWIN_EINVAL);
  CHECK(s.max_memory == 268435456 && s.memory > 0 && s.memory < s.max_memory);
  CHECK(s.overflowed == 0);
  /* A caller built against 1.0 passes the struct as it was then: only those fields. */
  ratewin_stats old;
  memset(&old, 0xAB, sizeof old);
  old.size = offsetof(ratewin_stats, overflowed);
  CHECK(ratewin_engine_stats(engine, &old) == 0 && old.allowed == 7 && old.max_memory == UINT64_C(0xABABABABABABABAB));
  uint64_t fit = 0;
  CHECK(ratewin_engine_capacity(engine, limit, &fit) == 0 && fit == 1000);
  CHECK(ratewin_engine_capacity(NULL, limit, &fit) == RATEWIN_EINVAL);
  CHECK(ratewin_engine_capacity(engine, NULL, &fit) == RATEWIN_EINVAL);
  CHECK(ratewin_engine_capacity(engine, limit, NULL) == RATEWIN_EINVAL);
  /* 1.5: no store, no key. */
  char* key = NULL;
  CHECK(ratewin_engine_store_key(engine, 1, limit, &key) == 0 && key != NULL && key[0] == '\0');
  ratewin_free(key);
  CHECK(ratewin_engine_store_key(NULL, 1, limit, &key) == RATEWIN_EINVAL);
  CHECK(ratewin_engine_store_key(engine, 1, NULL, &key) == RATEWIN_EINVAL);
  CHECK(ratewin_engine_store_key(engine, 1, limit, NULL) == RATEWIN_EINVAL);
  char* last = NULL;
  CHECK(ratewin_engine_last_error(engine, &last) == 0 && last != NULL && last[0] == '\0');
  ratewin_free(last);
  CHECK(ratewin_engine_last_error(NULL, &last) == RATEWIN_EINVAL);
  CHECK(ratewin_engine_last_error(engine, NULL) == RATEWIN_EINVAL);

  /* Limiter handles: pinned, shared with the engine's counts, alive after the engine
   * is closed. */
  ratewin_limiter* limiter = NULL;
  CHECK(ratewin_limiter_open(engine, resource, limit, &limiter, &message) == 0);
  CHECK(limiter != NULL && message == NULL);
  CHECK(ratewin_limiter_resource(limiter) == resource);
  CHECK(ratewin_limiter_resource(NULL) == 0);
  CHECK(ratewin_limiter_try_acquire(limiter, 1, &d, &message) == 0 && message == NULL);
  CHECK(d.allowed == 1 && d.remaining == 1);
  CHECK(ratewin_engine_stats(engine, &(ratewin_stats){.size = sizeof(ratewin_stats)}) == 0);
  ratewin_stats_init(&s);
  CHECK(ratewin_engine_stats(engine, &s) == 0 && s.pinned == 1);
  CHECK_ERROR(ratewin_limiter_open(NULL, 1, limit, &limiter, &message), RATEWIN_EINVAL, message,
              "engine");
  CHECK_ERROR(ratewin_limiter_open(engine, 1, NULL, &limiter, &message), RATEWIN_EINVAL, message,
              "limit");
  CHECK_ERROR(ratewin_limiter_open(engine, 1, limit, NULL, &message), RATEWIN_EINVAL, message,
              "out");
  CHECK_ERROR(ratewin_limiter_try_acquire(NULL, 1, &d, &message), RATEWIN_EINVAL, message,
              "limiter");
  CHECK_ERROR(ratewin_limiter_try_acquire(limiter, 1, NULL, &message), RATEWIN_EINVAL, message,
              "decision");

  ratewin_limit_free(limit); /* the limiter keeps its own copy */
  ratewin_engine_close(engine);
  CHECK(ratewin_limiter_try_acquire(limiter, 1, &d, NULL) == 0);
  CHECK(d.allowed == 1 && d.remaining == 0);
  CHECK(ratewin_limiter_try_acquire(limiter, 1, &d, NULL) == 0 && d.allowed == 0);
  ratewin_limiter_close(limiter);
  ratewin_limiter_close(NULL);
}

/* More than 65535 handles on one limiter is refused with RATEWIN_ERANGE. */
static void test_handle_limit(void) {
  ratewin_engine* engine = open_manual_engine(10);
  ratewin_limit* limit = make_limit(1, 1000, 0, RATEWIN_FAILURE_LOCAL);
  enum { kHandles = 65535 };
  ratewin_limiter** handles = calloc(kHandles, sizeof *handles);
  CHECK(handles != NULL);
  if (handles == NULL) return;
  int opened = 0;
  for (int i = 0; i < kHandles; ++i) {
    if (ratewin_limiter_open(engine, 5, limit, &handles[i], NULL) == 0) ++opened;
  }
  CHECK(opened == kHandles);
  ratewin_limiter* one_more = NULL;
  char* message = NULL;
  CHECK_ERROR(ratewin_limiter_open(engine, 5, limit, &one_more, &message), RATEWIN_ERANGE,
              message, "65535");
  CHECK(one_more == NULL);
  for (int i = 0; i < opened; ++i) ratewin_limiter_close(handles[i]);
  free(handles);
  ratewin_limit_free(limit);
  ratewin_engine_close(engine);
}

/* ---- Scopes, reset, refund, several limits at once (1.2) ------------------------- */

static ratewin_limit* make_scoped_limit(uint64_t max, uint64_t interval_ms, uint64_t scope) {
  ratewin_limit_options o;
  ratewin_limit_options_init(&o);
  o.max = max;
  o.interval_ms = interval_ms;
  o.scope = scope;
  ratewin_limit* limit = NULL;
  CHECK(ratewin_limit_new(&o, &limit, NULL) == 0 && limit != NULL);
  return limit;
}

/* What `resource` could still take under `limit` now, asked with cost 0. */
static uint64_t remaining_of(ratewin_engine* engine, uint64_t resource,
                             const ratewin_limit* limit) {
  ratewin_decision d;
  ratewin_decision_init(&d);
  CHECK(ratewin_engine_try_acquire(engine, resource, limit, 0, &d, NULL) == 0);
  return d.remaining;
}

static void test_scopes(void) {
  ratewin_engine* engine = open_manual_engine(1000);
  ratewin_decision d;
  ratewin_decision_init(&d);

  /* By default two limits of one window count apart on a resource; the same limit made
   * twice is one counter. */
  ratewin_limit* login = make_scoped_limit(3, 60000, 0);
  ratewin_limit* api = make_scoped_limit(100, 60000, 0);
  ratewin_limit* login_again = make_scoped_limit(3, 60000, 0);
  for (int i = 0; i < 3; ++i) {
    CHECK(ratewin_engine_try_acquire(engine, 1, login, 1, &d, NULL) == 0 && d.allowed == 1);
  }
  CHECK(remaining_of(engine, 1, login) == 0);
  CHECK(remaining_of(engine, 1, api) == 100);
  CHECK(remaining_of(engine, 1, login_again) == 0);

  /* A named scope: limits with the same scope and window share counts, whatever their
   * max; another window, or a limit's own scope, counts apart. */
  const uint64_t tenant = ratewin_hash("tenant", 6);
  ratewin_limit* small = make_scoped_limit(5, 60000, tenant);
  ratewin_limit* large = make_scoped_limit(50, 60000, tenant);
  ratewin_limit* other_window = make_scoped_limit(50, 30000, tenant);
  CHECK(ratewin_engine_try_acquire(engine, 1, small, 4, &d, NULL) == 0 && d.allowed == 1);
  CHECK(remaining_of(engine, 1, large) == 46);
  CHECK(remaining_of(engine, 1, small) == 1);
  CHECK(remaining_of(engine, 1, other_window) == 50);
  CHECK(remaining_of(engine, 1, api) == 100);
  CHECK(remaining_of(engine, 2, large) == 50); /* another resource */

  /* ratewin_limit_get gives the scope back (0: the limit's own), and what it gives makes
   * a limit that counts with the original. */
  ratewin_limit_options got;
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(large, &got) == 0 && got.scope == tenant && got.max == 50);
  ratewin_limit* remade = NULL;
  CHECK(ratewin_limit_new(&got, &remade, NULL) == 0 && remade != NULL);
  CHECK(remaining_of(engine, 1, remade) == 46);
  ratewin_limit_free(remade);
  CHECK(ratewin_limit_get(api, &got) == 0 && got.scope == 0 && got.max == 100);
  got.scope = 0;
  CHECK(ratewin_limit_new(&got, &remade, NULL) == 0 && remade != NULL);
  CHECK(remaining_of(engine, 1, remade) == 100);
  ratewin_limit_free(remade);

  /* A caller built against 1.1 passes the options without scope: the limit has its own
   * (the same as login's), and ratewin_limit_get writes nothing beyond its size. */
  ratewin_limit_options old;
  ratewin_limit_options_init(&old);
  old.size = offsetof(ratewin_limit_options, scope);
  old.max = 3;
  old.interval_ms = 60000;
  old.scope = tenant; /* beyond the size it gave: not read */
  ratewin_limit* old_login = NULL;
  CHECK(ratewin_limit_new(&old, &old_login, NULL) == 0 && old_login != NULL);
  CHECK(remaining_of(engine, 1, old_login) == 0);
  memset(&got, 0x5A, sizeof got);
  got.size = offsetof(ratewin_limit_options, scope);
  CHECK(ratewin_limit_get(old_login, &got) == 0 && got.max == 3 && got.interval_ms == 60000);
  CHECK(got.size == offsetof(ratewin_limit_options, scope));
  CHECK(got.scope == UINT64_C(0x5A5A5A5A5A5A5A5A));
  got.size = sizeof got;
  CHECK(ratewin_limit_get(old_login, &got) == 0 && got.scope == 0);

  ratewin_limit_free(old_login);
  ratewin_limit_free(other_window);
  ratewin_limit_free(large);
  ratewin_limit_free(small);
  ratewin_limit_free(login_again);
  ratewin_limit_free(api);
  ratewin_limit_free(login);
  ratewin_engine_close(engine);
}

static void test_reset_and_refund(void) {
  ratewin_engine* engine = open_manual_engine(1000);
  ratewin_limit* limit = make_limit(3, 10000, 1000, RATEWIN_FAILURE_LOCAL);
  const uint64_t user = ratewin_hash("login:alice", 11);
  ratewin_decision d;
  ratewin_decision_init(&d);
  for (int i = 0; i < 3; ++i) {
    CHECK(ratewin_engine_try_acquire(engine, user, limit, 1, &d, NULL) == 0 && d.allowed == 1);
  }
  CHECK(remaining_of(engine, user, limit) == 0);

  /* Refund: units given back, never more than were counted. */
  uint64_t refunded = 99;
  char* message = (char*)"not cleared";
  CHECK(ratewin_engine_refund(engine, user, limit, 2, &refunded, &message) == 0);
  CHECK(message == NULL && refunded == 2);
  CHECK(remaining_of(engine, user, limit) == 2);
  CHECK(ratewin_engine_refund(engine, user, limit, 5, &refunded, NULL) == 0 && refunded == 1);
  CHECK(remaining_of(engine, user, limit) == 3);
  CHECK(ratewin_engine_refund(engine, user, limit, 1, NULL, NULL) == 0);
  CHECK(ratewin_engine_refund(engine, 12345, limit, 1, &refunded, NULL) == 0 && refunded == 0);

  /* Newest subinterval first: a count a second ago stays, so the window empties 10 s
   * from now instead of 11. */
  CHECK(ratewin_engine_try_acquire(engine, user, limit, 1, &d, NULL) == 0 && d.allowed == 1);
  atomic_fetch_add(&manual_clock, kSecond);
  CHECK(ratewin_engine_try_acquire(engine, user, limit, 1, &d, NULL) == 0 && d.allowed == 1);
  CHECK(d.reset_after_ns == 11 * kSecond && d.remaining == 1);
  CHECK(ratewin_engine_refund(engine, user, limit, 1, &refunded, NULL) == 0 && refunded == 1);
  CHECK(ratewin_engine_try_acquire(engine, user, limit, 0, &d, NULL) == 0);
  CHECK(d.remaining == 2 && d.reset_after_ns == 10 * kSecond);

  /* Reset: a fresh window. Without a store the shared counts are cleared by definition. */
  CHECK(ratewin_engine_try_acquire(engine, user, limit, 2, &d, NULL) == 0 && d.allowed == 1);
  CHECK(remaining_of(engine, user, limit) == 0);
  int32_t cleared = -1;
  message = (char*)"not cleared";
  CHECK(ratewin_engine_reset(engine, user, limit, &cleared, &message) == 0);
  CHECK(message == NULL && cleared == 1);
  CHECK(remaining_of(engine, user, limit) == 3);
  CHECK(ratewin_engine_try_acquire(engine, user, limit, 1, &d, NULL) == 0 && d.allowed == 1);
  CHECK(ratewin_engine_reset(engine, user, limit, NULL, NULL) == 0);
  CHECK(remaining_of(engine, user, limit) == 3);
  CHECK(ratewin_engine_reset(engine, 12345, limit, &cleared, NULL) == 0 && cleared == 1);

  /* Both reach every limit of the scope and window. */
  const uint64_t scope = ratewin_hash("logins", 6);
  ratewin_limit* strict = make_scoped_limit(2, 60000, scope);
  ratewin_limit* lenient = make_scoped_limit(20, 60000, scope);
  CHECK(ratewin_engine_try_acquire(engine, user, strict, 2, &d, NULL) == 0 && d.allowed == 1);
  CHECK(remaining_of(engine, user, lenient) == 18);
  CHECK(ratewin_engine_refund(engine, user, lenient, 1, &refunded, NULL) == 0 && refunded == 1);
  CHECK(remaining_of(engine, user, strict) == 1);
  CHECK(ratewin_engine_reset(engine, user, lenient, &cleared, NULL) == 0 && cleared == 1);
  CHECK(remaining_of(engine, user, strict) == 2);

  /* Argument errors: a code, a message, the outputs untouched. */
  cleared = -1;
  refunded = 99;
  CHECK_ERROR(ratewin_engine_reset(NULL, user, limit, &cleared, &message), RATEWIN_EINVAL,
              message, "engine");
  CHECK_ERROR(ratewin_engine_reset(engine, user, NULL, &cleared, &message), RATEWIN_EINVAL,
              message, "limit");
  CHECK(ratewin_engine_reset(NULL, user, NULL, NULL, NULL) == RATEWIN_EINVAL);
  CHECK(cleared == -1);
  CHECK_ERROR(ratewin_engine_refund(NULL, user, limit, 1, &refunded, &message), RATEWIN_EINVAL,
              message, "engine");
  CHECK_ERROR(ratewin_engine_refund(engine, user, NULL, 1, &refunded, &message), RATEWIN_EINVAL,
              message, "limit");
  CHECK(ratewin_engine_refund(NULL, user, NULL, 1, NULL, NULL) == RATEWIN_EINVAL);
  CHECK(refunded == 99);

  ratewin_limit_free(lenient);
  ratewin_limit_free(strict);
  ratewin_limit_free(limit);
  ratewin_engine_close(engine);
}

static void test_try_acquire_all(void) {
  ratewin_engine* engine = open_manual_engine(1000);
  ratewin_limit* per_second = make_limit(2, 1000, 0, RATEWIN_FAILURE_LOCAL);
  ratewin_limit* per_minute = make_limit(3, 60000, 0, RATEWIN_FAILURE_LOCAL);
  const uint64_t key = ratewin_hash("key:7", 5);

  ratewin_acquisition items[2];
  ratewin_decision decisions[2];
  for (size_t i = 0; i < 2; ++i) {
    ratewin_acquisition_init(&items[i]);
    ratewin_decision_init(&decisions[i]);
  }
  CHECK(items[0].size == sizeof items[0] && items[0].resource == 0);
  CHECK(items[0].limit == NULL && items[0].cost == 1);
  ratewin_acquisition_init(NULL);
  items[0].resource = key;
  items[0].limit = per_second;
  items[1].resource = key;
  items[1].limit = per_minute;

  /* Admitted by both, twice. */
  size_t refused = 99;
  char* message = (char*)"not cleared";
  CHECK(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, &message) == 0);
  CHECK(message == NULL && refused == 2);
  CHECK(decisions[0].allowed == 1 && decisions[0].limit == 2 && decisions[0].remaining == 1);
  CHECK(decisions[1].allowed == 1 && decisions[1].limit == 3 && decisions[1].remaining == 2);
  CHECK(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, NULL) == 0);
  CHECK(refused == 2 && decisions[0].remaining == 0 && decisions[1].remaining == 1);

  /* The per-second limit refuses: the per-minute one counts nothing, and its decision
   * (every byte written: stale ones are not left there) says it would have admitted the
   * request, with 1 left before it, and when its two counts leave the window. */
  memset(&decisions[1], 0xAB, sizeof decisions[1]);
  decisions[1].size = sizeof decisions[1];
  CHECK(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, NULL) == 0);
  CHECK(refused == 0);
  CHECK(decisions[0].allowed == 0 && decisions[0].limit == 2 && decisions[0].retry_after_ns > 0);
  CHECK(decisions[1].size == sizeof decisions[1] && decisions[1].allowed == 1);
  CHECK(decisions[1].degraded == 0 && decisions[1].would_reject == 0);
  CHECK(decisions[1].limit == 3 && decisions[1].remaining == 1);
  CHECK(decisions[1].retry_after_ns == 0 && decisions[1].reset_after_ns > 0);
  CHECK(remaining_of(engine, key, per_minute) == 1);

  /* Two seconds on, the per-minute limit has room for one: admitted; then it refuses,
   * and the per-second limit keeps no count of the refused request. */
  atomic_fetch_add(&manual_clock, 2 * kSecond);
  CHECK(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, NULL) == 0);
  CHECK(refused == 2 && decisions[0].remaining == 1 && decisions[1].remaining == 0);
  CHECK(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, NULL) == 0);
  CHECK(refused == 1 && decisions[1].allowed == 0 && decisions[1].retry_after_ns > 0);
  CHECK(decisions[0].allowed == 1 && decisions[0].limit == 2 && decisions[0].remaining == 1);
  CHECK(remaining_of(engine, key, per_second) == 1);

  /* No limit at all: admitted; the arrays may be NULL. */
  refused = 99;
  CHECK(ratewin_engine_try_acquire_all(engine, NULL, 0, NULL, &refused, &message) == 0);
  CHECK(message == NULL && refused == 0);

  /* Elements from a newer header, larger than this library's: read and written as far as
   * it knows them, accepted while the rest is 0, with the element's index otherwise. */
  struct {
    ratewin_acquisition known;
    uint64_t newer;
  } wide_items[3];
  struct {
    ratewin_decision known;
    unsigned char canary[16];
  } wide_decisions[3];
  ratewin_limit* roomy = make_limit(10, 1000, 0, RATEWIN_FAILURE_LOCAL);
  memset(wide_items, 0, sizeof wide_items);
  for (size_t i = 0; i < 3; ++i) {
    ratewin_acquisition_init(&wide_items[i].known);
    wide_items[i].known.size = sizeof wide_items[i];
    wide_items[i].known.resource = 100 + i;
    wide_items[i].known.limit = roomy;
    wide_items[i].known.cost = i + 1;
    ratewin_decision_init(&wide_decisions[i].known);
    wide_decisions[i].known.size = sizeof wide_decisions[i];
    memset(wide_decisions[i].canary, 0xCD, sizeof wide_decisions[i].canary);
  }
  CHECK(ratewin_engine_try_acquire_all(engine, &wide_items[0].known, 3, &wide_decisions[0].known,
                                       &refused, NULL) == 0);
  CHECK(refused == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(wide_decisions[i].known.size == sizeof wide_decisions[i]);
    CHECK(wide_decisions[i].known.allowed == 1 && wide_decisions[i].known.limit == 10);
    CHECK(wide_decisions[i].known.remaining == 10 - (i + 1));
    for (size_t j = 0; j < sizeof wide_decisions[i].canary; ++j) {
      CHECK(wide_decisions[i].canary[j] == 0xCD);
    }
  }
  wide_items[2].newer = 1;
  refused = 99;
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, &wide_items[0].known, 3,
                                             &wide_decisions[0].known, &refused, &message),
              RATEWIN_EINVAL, message, "items[2]: a field this library version");
  CHECK(refused == 99);
  CHECK(remaining_of(engine, 100, roomy) == 9); /* nothing counted by the failed call */
  wide_items[2].newer = 0;

  /* The stride is the first element's size: every element must carry it. Nothing is
   * counted and nothing written when one does not. */
  ratewin_decision before = decisions[0];
  items[1].size = sizeof items[1] - 8;
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, &message),
              RATEWIN_EINVAL, message, "items[1].size");
  items[1].size = sizeof items[1];
  decisions[1].size = sizeof decisions[1] + 8;
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, &message),
              RATEWIN_EINVAL, message, "decisions[1].size");
  decisions[1].size = sizeof decisions[1];
  /* Mixed: wide items with ordinary decisions is fine, each array has its own stride. */
  CHECK(ratewin_engine_try_acquire_all(engine, &wide_items[0].known, 2, decisions, &refused,
                                       NULL) == 0);
  CHECK(refused == 2 && decisions[0].allowed == 1 && decisions[0].remaining == 8);
  before = decisions[0];
  items[0].size = 0; /* never initialised */
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, &message),
              RATEWIN_EINVAL, message, "items[0].size");
  items[0].size = sizeof items[0] + 4; /* no array has elements 4 bytes apart from 8 */
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, 1, decisions, &refused, &message),
              RATEWIN_EINVAL, message, "items[0].size");
  items[0].size = sizeof items[0];
  decisions[0].size = 8;
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, &message),
              RATEWIN_EINVAL, message, "decisions[0].size");
  decisions[0].size = sizeof decisions[0];
  CHECK(memcmp(&decisions[0], &before, sizeof before) == 0);
  CHECK(refused == 2);

  /* A count whose elements would not fit in memory: refused before any element past the
   * first is read. */
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, SIZE_MAX / 16, decisions, &refused,
                                             &message),
              RATEWIN_ERANGE, message, "address space");
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, SIZE_MAX, decisions, &refused,
                                             &message),
              RATEWIN_ERANGE, message, "address space");

  /* NULL arguments. */
  CHECK_ERROR(ratewin_engine_try_acquire_all(NULL, items, 2, decisions, &refused, &message),
              RATEWIN_EINVAL, message, "engine");
  CHECK_ERROR(ratewin_engine_try_acquire_all(NULL, NULL, 0, NULL, &refused, &message),
              RATEWIN_EINVAL, message, "engine");
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, NULL, 2, decisions, &refused, &message),
              RATEWIN_EINVAL, message, "items");
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, 2, NULL, &refused, &message),
              RATEWIN_EINVAL, message, "decisions");
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, 2, decisions, NULL, &message),
              RATEWIN_EINVAL, message, "refused");
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, NULL, 0, NULL, NULL, &message),
              RATEWIN_EINVAL, message, "refused");
  items[1].limit = NULL;
  CHECK_ERROR(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, &message),
              RATEWIN_EINVAL, message, "items[1].limit");
  CHECK(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, NULL) ==
        RATEWIN_EINVAL);
  items[1].limit = per_minute;
  CHECK(memcmp(&decisions[0], &before, sizeof before) == 0);
  CHECK(refused == 2);

  ratewin_limit_free(roomy);
  ratewin_limit_free(per_minute);
  ratewin_limit_free(per_second);
  ratewin_engine_close(engine);
}

/* ---- Algorithms (1.3) ------------------------------------------------------------ */

/* A limit that must be made (a failed check, and NULL, if not). */
static ratewin_limit* make_options_limit(uint64_t max, uint64_t interval_ms,
                                         uint64_t resolution_ms, int32_t algorithm,
                                         uint64_t burst) {
  ratewin_limit_options o;
  ratewin_limit_options_init(&o);
  o.max = max;
  o.interval_ms = interval_ms;
  o.resolution_ms = resolution_ms;
  o.algorithm = algorithm;
  o.burst = burst;
  ratewin_limit* limit = NULL;
  char* message = NULL;
  CHECK(ratewin_limit_new(&o, &limit, &message) == 0 && limit != NULL && message == NULL);
  if (message != NULL) fprintf(stderr, "  message: %s\n", message);
  ratewin_free(message);
  return limit;
}

static ratewin_limit* make_algorithm_limit(uint64_t max, uint64_t interval_ms,
                                           uint64_t resolution_ms, int32_t algorithm) {
  return make_options_limit(max, interval_ms, resolution_ms, algorithm, 0);
}

/* One request of cost 1 for `resource` under `limit` now. */
static ratewin_decision acquire_cost(ratewin_engine* engine, uint64_t resource,
                                     const ratewin_limit* limit, uint64_t cost);
static ratewin_decision acquire_one(ratewin_engine* engine, uint64_t resource,
                                    const ratewin_limit* limit) {
  return acquire_cost(engine, resource, limit, 1);
}

static void test_algorithms(void) {
  /* Each algorithm made and read back; a fixed window's resolution is its interval. */
  const int32_t algorithms[] = {RATEWIN_ALGORITHM_SLIDING_WINDOW, RATEWIN_ALGORITHM_STRICT_WINDOW,
                                RATEWIN_ALGORITHM_FIXED_WINDOW};
  ratewin_limit* limits[3];
  for (size_t i = 0; i < 3; ++i) {
    limits[i] = make_algorithm_limit(10, 1000, 0, algorithms[i]);
    ratewin_limit_options got;
    memset(&got, 0x5A, sizeof got);
    got.size = sizeof got;
    CHECK(ratewin_limit_get(limits[i], &got) == 0);
    CHECK(got.algorithm == algorithms[i] && got.reserved2 == 0 && got.burst == 0);
    CHECK(got.max == 10 && got.interval_ms == 1000 && got.scope == 0);
    CHECK(got.resolution_ms == (algorithms[i] == RATEWIN_ALGORITHM_FIXED_WINDOW ? 1000 : 100));
    /* What ratewin_limit_get gives makes the same limit again. */
    ratewin_limit* remade = NULL;
    CHECK(ratewin_limit_new(&got, &remade, NULL) == 0 && remade != NULL);
    ratewin_limit_options again;
    ratewin_limit_options_init(&again);
    CHECK(ratewin_limit_get(remade, &again) == 0 && memcmp(&again, &got, sizeof got) == 0);
    ratewin_limit_free(remade);
  }
  ratewin_limit* const sliding = limits[0];
  ratewin_limit* const strict = limits[1];
  ratewin_limit* const fixed = limits[2];
  /* A fixed window given its interval as resolution_ms is the same limit. */
  ratewin_limit* fixed_explicit =
      make_algorithm_limit(10, 1000, 1000, RATEWIN_ALGORITHM_FIXED_WINDOW);

  /* The same burst, then the same requests at the same times: the algorithms differ in
   * how the subinterval leaving the window counts. On a clock at a whole number of
   * seconds, the burst fills the first 100 ms subinterval of a fixed window. */
  ratewin_engine* engine = open_manual_engine(1000);
  const int64_t t0 = (atomic_load(&manual_clock) / (10 * kSecond) + 1) * (10 * kSecond);
  atomic_store(&manual_clock, t0);
  const int64_t ms = kSecond / 1000;
  ratewin_decision d;
  for (size_t i = 0; i < 3; ++i) {
    for (int n = 0; n < 10; ++n) CHECK(acquire_one(engine, 1, limits[i]).allowed == 1);
    d = acquire_one(engine, 1, limits[i]);
    CHECK(d.allowed == 0 && d.remaining == 0);
  }
  /* Limits of different algorithms have scopes of their own: the same resource counts
   * apart under each. */
  CHECK(remaining_of(engine, 2, sliding) == 10);
  /* The fixed window given resolution_ms is the same limit: the same counter. */
  CHECK(remaining_of(engine, 1, fixed_explicit) == 0);

  /* 1 ms before the fixed window ends: every algorithm refuses; the fixed window opens
   * again at its end. */
  atomic_store(&manual_clock, t0 + 999 * ms);
  CHECK(acquire_one(engine, 1, sliding).allowed == 0);
  CHECK(acquire_one(engine, 1, strict).allowed == 0);
  d = acquire_one(engine, 1, fixed);
  CHECK(d.allowed == 0 && d.retry_after_ns == 1 * ms && d.reset_after_ns == 1 * ms);

  /* At the window's end: the fixed window starts afresh; the burst's subinterval has
   * just begun to leave the sliding window (its full count still weighs), and the
   * strict window counts it in full until it has left, 100 ms on. */
  atomic_store(&manual_clock, t0 + 1000 * ms);
  d = acquire_one(engine, 1, fixed);
  CHECK(d.allowed == 1 && d.remaining == 9 && d.reset_after_ns == 1000 * ms);
  d = acquire_one(engine, 1, sliding);
  CHECK(d.allowed == 0 && d.retry_after_ns == 10 * ms); /* 9 of 10 weigh 10 ms on */
  d = acquire_one(engine, 1, strict);
  CHECK(d.allowed == 0 && d.retry_after_ns == 100 * ms);

  /* Half of the burst's subinterval has left: the sliding window counts 5 of the 10 by
   * overlap but discounts a trailing count by at most max / 4, so 8, and admits; the
   * strict window still refuses, until the subinterval has left. */
  atomic_store(&manual_clock, t0 + 1050 * ms);
  d = acquire_one(engine, 1, sliding);
  CHECK(d.allowed == 1 && d.remaining == 1);
  d = acquire_one(engine, 1, strict);
  CHECK(d.allowed == 0 && d.retry_after_ns == 50 * ms);
  atomic_store(&manual_clock, t0 + 1100 * ms);
  d = acquire_one(engine, 1, strict);
  CHECK(d.allowed == 1 && d.remaining == 9);

  /* Limits of one named scope and window share counts whatever their algorithms, each
   * deciding its own way. */
  const uint64_t shared = ratewin_hash("shared", 6);
  ratewin_limit_options so;
  ratewin_limit_options_init(&so);
  so.max = 10;
  so.interval_ms = 1000;
  so.scope = shared;
  ratewin_limit* shared_sliding = NULL;
  CHECK(ratewin_limit_new(&so, &shared_sliding, NULL) == 0 && shared_sliding != NULL);
  so.algorithm = RATEWIN_ALGORITHM_STRICT_WINDOW;
  ratewin_limit* shared_strict = NULL;
  CHECK(ratewin_limit_new(&so, &shared_strict, NULL) == 0 && shared_strict != NULL);
  for (int n = 0; n < 10; ++n) CHECK(acquire_one(engine, 3, shared_strict).allowed == 1);
  atomic_fetch_add(&manual_clock, 1050 * ms);
  CHECK(acquire_one(engine, 3, shared_strict).allowed == 0);
  d = acquire_one(engine, 3, shared_sliding);
  CHECK(d.allowed == 1 && d.remaining == 1); /* (8 of the 10 count: see above) */

  /* Refused: an unknown algorithm, a reserved2 that is not 0, a fixed window's
   * resolution_ms that is not its interval_ms, a fixed window longer than its longest
   * (its one subinterval) though the same interval is a valid sliding window. */
  ratewin_limit* out = (ratewin_limit*)&so; /* a sentinel that must not change */
  ratewin_limit* const sentinel = out;
  char* message = NULL;
  struct {
    uint64_t interval_ms, resolution_ms;
    int32_t algorithm, reserved2;
    const char* word;
  } bad[] = {
      {1000, 0, 5, 0, "unknown algorithm 5"},
      {1000, 0, -1, 0, "unknown algorithm -1"},
      {1000, 0, INT32_MAX, 0, "algorithm"},
      {1000, 0, RATEWIN_ALGORITHM_SLIDING_WINDOW, 1, "reserved2"},
      {1000, 100, RATEWIN_ALGORITHM_FIXED_WINDOW, 0, "resolution_ms 100"},
      {1000, 2000, RATEWIN_ALGORITHM_FIXED_WINDOW, 0, "resolution_ms 2000"},
      {RATEWIN_LIMIT_MAX_RESOLUTION_MS + 1, 0, RATEWIN_ALGORITHM_FIXED_WINDOW, 0,
       "interval_ms 4294967296 is longer than 4294967295, the longest for "
       "RATEWIN_ALGORITHM_FIXED_WINDOW"},
      {RATEWIN_LIMIT_MAX_RESOLUTION_MS + 1, RATEWIN_LIMIT_MAX_RESOLUTION_MS + 1,
       RATEWIN_ALGORITHM_FIXED_WINDOW, 0, "the longest for RATEWIN_ALGORITHM_FIXED_WINDOW"},
      {UINT64_C(60) * 86400000, 0, RATEWIN_ALGORITHM_FIXED_WINDOW, 0, "longest for RATEWIN_ALGORITHM_FIXED_WINDOW"},
      {RATEWIN_LIMIT_MAX_INTERVAL_MS + 1, 0, RATEWIN_ALGORITHM_FIXED_WINDOW, 0, "366 days"},
      {0, 0, RATEWIN_ALGORITHM_FIXED_WINDOW, 0, "interval_ms"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ratewin_limit_options b;
    ratewin_limit_options_init(&b);
    b.max = 10;
    b.interval_ms = bad[i].interval_ms;
    b.resolution_ms = bad[i].resolution_ms;
    b.algorithm = bad[i].algorithm;
    b.reserved2 = bad[i].reserved2;
    CHECK_ERROR(ratewin_limit_new(&b, &out, &message), RATEWIN_EINVAL, message, bad[i].word);
    CHECK(out == sentinel);
  }
  /* The longest fixed window is accepted, and so is the 60-day window as a sliding or
   * strict one. */
  ratewin_limit* longest =
      make_algorithm_limit(1, RATEWIN_LIMIT_MAX_RESOLUTION_MS, 0, RATEWIN_ALGORITHM_FIXED_WINDOW);
  ratewin_limit_options got;
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(longest, &got) == 0);
  CHECK(got.resolution_ms == RATEWIN_LIMIT_MAX_RESOLUTION_MS &&
        got.interval_ms == got.resolution_ms);
  ratewin_limit_free(longest);
  ratewin_limit* sixty_days =
      make_algorithm_limit(1, UINT64_C(60) * 86400000, 0, RATEWIN_ALGORITHM_STRICT_WINDOW);
  ratewin_limit_free(sixty_days);

  /* A caller built against 1.2 passes the options without algorithm: a sliding window,
   * and ratewin_limit_get writes nothing beyond its size. */
  ratewin_limit_options old;
  ratewin_limit_options_init(&old);
  old.size = offsetof(ratewin_limit_options, algorithm);
  old.max = 10;
  old.interval_ms = 1000;
  old.algorithm = RATEWIN_ALGORITHM_FIXED_WINDOW; /* beyond the size it gave: not read */
  old.reserved2 = 1;                              /* (nor this) */
  ratewin_limit* old_limit = NULL;
  CHECK(ratewin_limit_new(&old, &old_limit, NULL) == 0 && old_limit != NULL);
  memset(&got, 0x5A, sizeof got);
  got.size = offsetof(ratewin_limit_options, algorithm);
  CHECK(ratewin_limit_get(old_limit, &got) == 0 && got.max == 10 && got.resolution_ms == 100);
  CHECK(got.size == offsetof(ratewin_limit_options, algorithm) && got.scope == 0);
  CHECK(got.algorithm == 0x5A5A5A5A && got.reserved2 == 0x5A5A5A5A);
  got.size = sizeof got;
  CHECK(ratewin_limit_get(old_limit, &got) == 0);
  CHECK(got.algorithm == RATEWIN_ALGORITHM_SLIDING_WINDOW && got.resolution_ms == 100);
  /* It is the sliding limit: the same counter. */
  CHECK(remaining_of(engine, 2, old_limit) == remaining_of(engine, 2, sliding));
  CHECK(acquire_one(engine, 2, old_limit).allowed == 1);
  CHECK(remaining_of(engine, 2, sliding) == 9);
  ratewin_limit_free(old_limit);

  /* A caller built against a newer header: its algorithm is applied while the fields
   * this library does not know are 0, and the struct refused when one is set. */
  struct {
    ratewin_limit_options known;
    uint64_t newer[2];
  } newer;
  memset(&newer, 0, sizeof newer);
  ratewin_limit_options_init(&newer.known);
  newer.known.size = sizeof newer;
  newer.known.max = 10;
  newer.known.interval_ms = 1000;
  newer.known.algorithm = RATEWIN_ALGORITHM_STRICT_WINDOW;
  ratewin_limit* grown = NULL;
  CHECK(ratewin_limit_new(&newer.known, &grown, &message) == 0 && grown != NULL);
  CHECK(message == NULL);
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(grown, &got) == 0 && got.algorithm == RATEWIN_ALGORITHM_STRICT_WINDOW);
  ratewin_limit_free(grown);
  newer.newer[0] = 1;
  CHECK_ERROR(ratewin_limit_new(&newer.known, &out, &message), RATEWIN_EINVAL, message,
              "does not know");
  CHECK(out == sentinel);

  ratewin_limit_free(shared_strict);
  ratewin_limit_free(shared_sliding);
  ratewin_limit_free(fixed_explicit);
  for (size_t i = 0; i < 3; ++i) ratewin_limit_free(limits[i]);
  ratewin_engine_close(engine);
}

/* ---- Sliding logs (1.3) ----------------------------------------------------------- */

/* Exact on the manual clock: max in any window, retry_after when the oldest leaves; the
 * struct's bounds said in its terms; an older caller's struct cannot ask for it. */
static void test_sliding_log(void) {
  ratewin_limit* log = make_options_limit(3, 1000, 0, RATEWIN_ALGORITHM_SLIDING_LOG, 0);
  ratewin_limit_options got;
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(log, &got) == 0);
  CHECK(got.algorithm == RATEWIN_ALGORITHM_SLIDING_LOG && got.max == 3 && got.burst == 0);
  CHECK(got.interval_ms == 1000 && got.resolution_ms == 1000);
  ratewin_engine* engine = open_manual_engine(1000);
  const int64_t ms = kSecond / 1000;
  ratewin_decision d;
  for (uint64_t n = 0; n < 3; ++n) {
    d = acquire_one(engine, 1, log);
    CHECK(d.allowed == 1 && d.limit == 3 && d.remaining == 2 - n);
    atomic_fetch_add(&manual_clock, 100 * ms);
  }
  d = acquire_one(engine, 1, log);
  /* The first unit, at 0 ms, leaves at 1000 ms: 700 ms from now (300 ms). */
  CHECK(d.allowed == 0 && d.remaining == 0 && d.retry_after_ns == 700 * ms);
  CHECK(d.reset_after_ns == 900 * ms);
  atomic_fetch_add(&manual_clock, 700 * ms - 1);
  CHECK(acquire_one(engine, 1, log).allowed == 0);
  atomic_fetch_add(&manual_clock, 1);
  CHECK(acquire_one(engine, 1, log).allowed == 1);
  CHECK(acquire_one(engine, 1, log).allowed == 0);
  ratewin_engine_close(engine);

  ratewin_limit* out = NULL;
  char* message = NULL;
  ratewin_limit_options big;
  ratewin_limit_options_init(&big);
  big.max = RATEWIN_LIMIT_MAX_LOG_COUNT + 1;
  big.interval_ms = 1000;
  big.algorithm = RATEWIN_ALGORITHM_SLIDING_LOG;
  CHECK_ERROR(ratewin_limit_new(&big, &out, &message), RATEWIN_EINVAL, message, "is more than 4096");
  big.max = RATEWIN_LIMIT_MAX_LOG_COUNT;
  big.resolution_ms = 100;
  CHECK_ERROR(ratewin_limit_new(&big, &out, &message), RATEWIN_EINVAL, message,
              "RATEWIN_ALGORITHM_SLIDING_LOG has one subinterval");
  big.resolution_ms = 0;
  CHECK(ratewin_limit_new(&big, &out, NULL) == 0 && out != NULL);
  ratewin_limit_free(out);
  ratewin_limit_free(log);
}

/* ---- Shadow mode (1.4) ----------------------------------------------------------- */

/* A limit in shadow decides as the same limit enforcing, allows what it would refuse
 * (would_reject), counts only what it admits, and keeps its counts when made again to
 * enforce. A caller built against 1.3 passes options without a mode (enforce) and reads
 * decisions and stats without would_reject. */
static const char* header_of(const ratewin_decision* d, const char* wanted);

static void test_shadow_mode(void) {
  ratewin_limit_options o;
  ratewin_limit_options_init(&o);
  CHECK(o.mode == RATEWIN_MODE_ENFORCE);
  o.max = 3;
  o.interval_ms = 1000;
  ratewin_limit* enforcing = NULL;
  CHECK(ratewin_limit_new(&o, &enforcing, NULL) == 0);
  o.mode = RATEWIN_MODE_SHADOW;
  ratewin_limit* shadow = NULL;
  CHECK(ratewin_limit_new(&o, &shadow, NULL) == 0);
  ratewin_limit_options got;
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(shadow, &got) == 0 && got.mode == RATEWIN_MODE_SHADOW);
  CHECK(got.reserved3 == 0);

  ratewin_engine* engine = open_manual_engine(1000);
  for (int i = 0; i < 5; ++i) {
    const ratewin_decision e = acquire_one(engine, 1, enforcing);
    const ratewin_decision d = acquire_one(engine, 2, shadow);
    CHECK(d.allowed == 1 && e.would_reject == 0);
    CHECK(d.would_reject == (e.allowed ? 0 : 1));
    CHECK(d.remaining == e.remaining && d.retry_after_ns == e.retry_after_ns);
    CHECK(d.reserved == 0);
    /* No Retry-After: the request was allowed. */
    CHECK(strcmp(header_of(&d, "Retry-After"), "") == 0);
  }
  /* Made again to enforce, with the same scope: it keeps the shadow's counts. */
  o.mode = RATEWIN_MODE_ENFORCE;
  ratewin_limit* switched = NULL;
  CHECK(ratewin_limit_new(&o, &switched, NULL) == 0);
  ratewin_decision d = acquire_one(engine, 2, switched);
  CHECK(d.allowed == 0 && d.would_reject == 0);

  ratewin_stats stats;
  ratewin_stats_init(&stats);
  CHECK(ratewin_engine_stats(engine, &stats) == 0);
  CHECK(stats.would_reject == 2 && stats.rejected == 3 && stats.allowed == 3 + 5);
  ratewin_stats old_stats;
  memset(&old_stats, 0x5A, sizeof old_stats);
  old_stats.size = offsetof(ratewin_stats, would_reject);
  CHECK(ratewin_engine_stats(engine, &old_stats) == 0 && old_stats.would_reject == 0x5A5A5A5A5A5A5A5AULL);

  /* A 1.3 caller's decision ends before would_reject: nothing is written past it. */
  ratewin_decision old;
  memset(&old, 0x5A, sizeof old);
  old.size = offsetof(ratewin_decision, would_reject);
  CHECK(ratewin_engine_try_acquire(engine, 2, shadow, 1, &old, NULL) == 0);
  CHECK(old.allowed == 1 && old.would_reject == 0x5A5A5A5A);

  /* A 1.3 caller's options end before mode: enforce. */
  ratewin_limit_options older;
  ratewin_limit_options_init(&older);
  older.size = offsetof(ratewin_limit_options, mode);
  older.max = 3;
  older.interval_ms = 1000;
  older.mode = RATEWIN_MODE_SHADOW; /* beyond its size: not read */
  ratewin_limit* old_limit = NULL;
  CHECK(ratewin_limit_new(&older, &old_limit, NULL) == 0);
  CHECK(ratewin_limit_get(old_limit, &got) == 0 && got.mode == RATEWIN_MODE_ENFORCE);
  CHECK(acquire_one(engine, 2, old_limit).allowed == 0);

  /* try_acquire_all: a shadow limit never refuses the group. */
  ratewin_acquisition items[2];
  ratewin_acquisition_init(&items[0]);
  ratewin_acquisition_init(&items[1]);
  items[0].resource = 2;
  items[0].limit = shadow;
  items[1].resource = 3;
  items[1].limit = enforcing;
  ratewin_decision out[2];
  ratewin_decision_init(&out[0]);
  ratewin_decision_init(&out[1]);
  size_t refused = 0;
  CHECK(ratewin_engine_try_acquire_all(engine, items, 2, out, &refused, NULL) == 0);
  CHECK(refused == 2 && out[0].allowed == 1 && out[0].would_reject == 1 && out[1].allowed == 1);

  char* message = NULL;
  o.mode = 2;
  ratewin_limit* bad = NULL;
  CHECK_ERROR(ratewin_limit_new(&o, &bad, &message), RATEWIN_EINVAL, message, "unknown mode");
  o.mode = RATEWIN_MODE_SHADOW;
  o.reserved3 = 1;
  CHECK_ERROR(ratewin_limit_new(&o, &bad, &message), RATEWIN_EINVAL, message, "reserved3");
  ratewin_engine_close(engine);
  ratewin_limit_free(old_limit);
  ratewin_limit_free(switched);
  ratewin_limit_free(shadow);
  ratewin_limit_free(enforcing);
}

/* ---- Token buckets (1.3) --------------------------------------------------------- */

/* A token bucket of max per interval_ms with room for `burst` at once (0: max). */
static ratewin_limit* make_bucket(uint64_t max, uint64_t interval_ms, uint64_t burst) {
  return make_options_limit(max, interval_ms, 0, RATEWIN_ALGORITHM_TOKEN_BUCKET, burst);
}

/* A request of `cost` for `resource` under `limit` now. */
static ratewin_decision acquire_cost(ratewin_engine* engine, uint64_t resource,
                                     const ratewin_limit* limit, uint64_t cost) {
  ratewin_decision d;
  ratewin_decision_init(&d);
  CHECK(ratewin_engine_try_acquire(engine, resource, limit, cost, &d, NULL) == 0);
  return d;
}

/* The value of the decision's header `name`, "" when it has none (a static buffer). */
static const char* header_of(const ratewin_decision* d, const char* wanted) {
  static char value[RATEWIN_HEADER_VALUE_SIZE];
  const char* name = NULL;
  for (size_t i = 0; ratewin_decision_header(d, i, &name, value, sizeof value) == 0; ++i) {
    if (strcmp(name, wanted) == 0) return value;
  }
  return "";
}

static void test_token_bucket(void) {
  /* Made and read back: one unit every 100 ms, 4 at once; resolution_ms is the interval,
   * burst the one in effect. */
  ratewin_limit* bucket = make_bucket(10, 1000, 4);
  ratewin_limit_options got;
  memset(&got, 0x5A, sizeof got);
  got.size = sizeof got;
  CHECK(ratewin_limit_get(bucket, &got) == 0);
  CHECK(got.algorithm == RATEWIN_ALGORITHM_TOKEN_BUCKET && got.burst == 4 && got.max == 10);
  CHECK(got.interval_ms == 1000 && got.resolution_ms == 1000 && got.reserved2 == 0);
  CHECK(got.scope == 0 && got.failure_policy == RATEWIN_FAILURE_LOCAL);
  /* What ratewin_limit_get gives makes the same limit again. */
  ratewin_limit* remade = NULL;
  CHECK(ratewin_limit_new(&got, &remade, NULL) == 0 && remade != NULL);
  ratewin_limit_options again;
  ratewin_limit_options_init(&again);
  CHECK(ratewin_limit_get(remade, &again) == 0 && memcmp(&again, &got, sizeof got) == 0);
  ratewin_limit_free(remade);
  /* burst 0 is max, and reads back as max: the same limit as burst == max, given its
   * interval as resolution_ms or not. */
  ratewin_limit* full = make_bucket(10, 1000, 0);
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(full, &got) == 0 && got.burst == 10 && got.resolution_ms == 1000);
  ratewin_limit* full_explicit = NULL;
  got.resolution_ms = 1000;
  CHECK(ratewin_limit_new(&got, &full_explicit, NULL) == 0 && full_explicit != NULL);

  /* On the manual clock: the burst passes at once, then one every interval / max. */
  ratewin_engine* engine = open_manual_engine(1000);
  const int64_t ms = kSecond / 1000;
  ratewin_decision d;
  for (uint64_t n = 0; n < 4; ++n) {
    d = acquire_one(engine, 1, bucket);
    CHECK(d.allowed == 1 && d.limit == 4 && d.remaining == 3 - n);
    CHECK(d.reset_after_ns == (int64_t)(n + 1) * 100 * ms && d.retry_after_ns == 0);
  }
  d = acquire_one(engine, 1, bucket);
  CHECK(d.allowed == 0 && d.limit == 4 && d.remaining == 0);
  CHECK(d.retry_after_ns == 100 * ms && d.reset_after_ns == 400 * ms);
  /* Its headers: X-RateLimit-Limit is the burst (not max), the delays rounded up. */
  CHECK(strcmp(header_of(&d, "X-RateLimit-Limit"), "4") == 0);
  CHECK(strcmp(header_of(&d, "X-RateLimit-Remaining"), "0") == 0);
  CHECK(strcmp(header_of(&d, "X-RateLimit-Reset"), "1") == 0);
  CHECK(strcmp(header_of(&d, "Retry-After"), "1") == 0);
  /* retry_after is exact: 1 ms early it still refuses, saying 1 ms; then one passes, and
   * the next one 100 ms later. */
  atomic_fetch_add(&manual_clock, 99 * ms);
  d = acquire_one(engine, 1, bucket);
  CHECK(d.allowed == 0 && d.retry_after_ns == 1 * ms && d.reset_after_ns == 301 * ms);
  atomic_fetch_add(&manual_clock, 1 * ms);
  d = acquire_one(engine, 1, bucket);
  CHECK(d.allowed == 1 && d.remaining == 0 && d.reset_after_ns == 400 * ms);
  d = acquire_one(engine, 1, bucket);
  CHECK(d.allowed == 0 && d.retry_after_ns == 100 * ms);
  atomic_fetch_add(&manual_clock, 100 * ms);
  CHECK(acquire_one(engine, 1, bucket).allowed == 1);
  CHECK(acquire_one(engine, 1, bucket).allowed == 0);
  /* 250 ms on, 2 units have come back and a half: a cost of 3 waits exactly 50 ms, a
   * cost of 2 passes. */
  atomic_fetch_add(&manual_clock, 250 * ms);
  d = acquire_cost(engine, 1, bucket, 3);
  CHECK(d.allowed == 0 && d.remaining == 2 && d.retry_after_ns == 50 * ms);
  CHECK(strcmp(header_of(&d, "Retry-After"), "1") == 0);
  d = acquire_cost(engine, 1, bucket, 2);
  CHECK(d.allowed == 1 && d.remaining == 0 && d.reset_after_ns == 350 * ms);
  /* More than the burst never passes, though it is within max. */
  d = acquire_cost(engine, 1, bucket, 5);
  CHECK(d.allowed == 0 && d.retry_after_ns == RATEWIN_NEVER && d.limit == 4);
  CHECK(strcmp(header_of(&d, "Retry-After"), "") == 0);
  /* Once full again, it has its burst and nothing to wait for. */
  atomic_fetch_add(&manual_clock, 350 * ms);
  d = acquire_cost(engine, 1, bucket, 0);
  CHECK(d.allowed == 1 && d.remaining == 4 && d.reset_after_ns == 0);

  /* Refund and reset: units given back pass again; a reset fills the bucket. */
  CHECK(acquire_cost(engine, 1, bucket, 4).allowed == 1);
  uint64_t refunded = 0;
  CHECK(ratewin_engine_refund(engine, 1, bucket, 1, &refunded, NULL) == 0 && refunded == 1);
  CHECK(remaining_of(engine, 1, bucket) == 1);
  int32_t cleared = -1;
  CHECK(ratewin_engine_reset(engine, 1, bucket, &cleared, NULL) == 0 && cleared == 1);
  CHECK(remaining_of(engine, 1, bucket) == 4);

  /* burst == max: max at once, then refused; the same limit as burst 0 (one bucket). */
  for (int n = 0; n < 10; ++n) CHECK(acquire_one(engine, 2, full).allowed == 1);
  d = acquire_one(engine, 2, full_explicit);
  CHECK(d.allowed == 0 && d.limit == 10 && d.retry_after_ns == 100 * ms);
  /* A bucket and a window of the same max count apart (each in its own scope). */
  ratewin_limit* window = make_limit(10, 1000, 100, RATEWIN_FAILURE_LOCAL);
  CHECK(remaining_of(engine, 2, window) == 10);

  /* Token buckets of one named scope share their one time whatever their rates (a
   * backlog of 1 s is the whole of both), and never share with a window. */
  const uint64_t shared = ratewin_hash("buckets", 7);
  ratewin_limit_options so;
  ratewin_limit_options_init(&so);
  so.max = 10;
  so.interval_ms = 1000;
  so.algorithm = RATEWIN_ALGORITHM_TOKEN_BUCKET;
  so.scope = shared;
  ratewin_limit* slow_shared = NULL;
  CHECK(ratewin_limit_new(&so, &slow_shared, NULL) == 0 && slow_shared != NULL);
  so.max = 20;
  ratewin_limit* fast_shared = NULL;
  CHECK(ratewin_limit_new(&so, &fast_shared, NULL) == 0 && fast_shared != NULL);
  so.algorithm = RATEWIN_ALGORITHM_FIXED_WINDOW;
  ratewin_limit* window_shared = NULL;
  CHECK(ratewin_limit_new(&so, &window_shared, NULL) == 0 && window_shared != NULL);
  CHECK(acquire_cost(engine, 4, slow_shared, 10).allowed == 1);
  d = acquire_one(engine, 4, fast_shared);
  CHECK(d.allowed == 0 && d.limit == 20 && d.retry_after_ns == 50 * ms);
  CHECK(remaining_of(engine, 4, window_shared) == 20);
  ratewin_limit_free(window_shared);
  ratewin_limit_free(fast_shared);
  ratewin_limit_free(slow_shared);

  /* All or nothing: the bucket refuses, and the window counts nothing. */
  ratewin_acquisition items[2];
  ratewin_decision decisions[2];
  for (size_t i = 0; i < 2; ++i) {
    ratewin_acquisition_init(&items[i]);
    ratewin_decision_init(&decisions[i]);
    items[i].resource = 2;
  }
  items[0].limit = window;
  items[1].limit = full;
  size_t refused = 9;
  CHECK(ratewin_engine_try_acquire_all(engine, items, 2, decisions, &refused, NULL) == 0);
  CHECK(refused == 1 && decisions[1].allowed == 0 && decisions[1].limit == 10);
  CHECK(decisions[1].retry_after_ns == 100 * ms);
  CHECK(remaining_of(engine, 2, window) == 10);

  /* Refused, *out untouched, in the struct's terms. */
  ratewin_limit* out = (ratewin_limit*)&so; /* a sentinel that must not change */
  ratewin_limit* const sentinel = out;
  char* message = NULL;
  struct {
    uint64_t max, interval_ms, resolution_ms, burst;
    int32_t algorithm;
    const char* word;
  } bad[] = {
      {10, 1000, 0, 4, RATEWIN_ALGORITHM_SLIDING_WINDOW,
       "burst applies to RATEWIN_ALGORITHM_TOKEN_BUCKET only, not to "
       "RATEWIN_ALGORITHM_SLIDING_WINDOW: leave it out"},
      {10, 1000, 0, 10, RATEWIN_ALGORITHM_STRICT_WINDOW, "RATEWIN_ALGORITHM_STRICT_WINDOW"},
      {10, 1000, 0, 1, RATEWIN_ALGORITHM_FIXED_WINDOW, "RATEWIN_ALGORITHM_FIXED_WINDOW"},
      {10, 1000, 100, 0, RATEWIN_ALGORITHM_TOKEN_BUCKET,
       "RATEWIN_ALGORITHM_TOKEN_BUCKET has one subinterval, the whole window (interval_ms "
       "1000): resolution_ms 100 says otherwise"},
      {10, 1000, 2000, 0, RATEWIN_ALGORITHM_TOKEN_BUCKET, "resolution_ms 2000"},
      {10, 1000, 0, RATEWIN_LIMIT_MAX_COUNT + 1, RATEWIN_ALGORITHM_TOKEN_BUCKET,
       "burst must be from 1 to 4294967295, got 4294967296"},
      {10, 1000, 0, UINT64_MAX, RATEWIN_ALGORITHM_TOKEN_BUCKET, "burst must be from 1 to"},
      /* One unit every 6 s: 715828 of them take longer than 4294967295 ms. */
      {10, 60000, 0, 715828, RATEWIN_ALGORITHM_TOKEN_BUCKET,
       "RATEWIN_ALGORITHM_TOKEN_BUCKET with max 10 and interval_ms 60000 takes longer than "
       "4294967295 (about 49.7 days) to refill burst 715828 (burst x interval_ms / max)"},
      {10, 60000, 0, 1000000000, RATEWIN_ALGORITHM_TOKEN_BUCKET, "refill burst 1000000000"},
      /* 60 days: refilling max takes that long (a burst of 1 would not: below). */
      {1000, UINT64_C(60) * 86400000, 0, 0, RATEWIN_ALGORITHM_TOKEN_BUCKET,
       "takes longer than 4294967295 (about 49.7 days) to refill its burst (max, when burst "
       "is not given)"},
      {1000, RATEWIN_LIMIT_MAX_INTERVAL_MS + 1, 0, 1, RATEWIN_ALGORITHM_TOKEN_BUCKET, "366 days"},
      {0, 1000, 0, 1, RATEWIN_ALGORITHM_TOKEN_BUCKET, "max must be from 1"},
      {10, 0, 0, 1, RATEWIN_ALGORITHM_TOKEN_BUCKET, "interval_ms"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ratewin_limit_options b;
    ratewin_limit_options_init(&b);
    b.max = bad[i].max;
    b.interval_ms = bad[i].interval_ms;
    b.resolution_ms = bad[i].resolution_ms;
    b.burst = bad[i].burst;
    b.algorithm = bad[i].algorithm;
    CHECK_ERROR(ratewin_limit_new(&b, &out, &message), RATEWIN_EINVAL, message, bad[i].word);
    CHECK(out == sentinel);
  }
  /* At the bounds: the slowest bucket of 10 per minute, a burst above max, a burst of 1
   * on a bucket whose max refills within the bound. */
  ratewin_limit* slowest = make_bucket(10, 60000, 715827);
  ratewin_limit_free(slowest);
  ratewin_limit* above = make_bucket(3, 1000, 5);
  d = acquire_cost(engine, 3, above, 5);
  CHECK(d.allowed == 1 && d.limit == 5 && d.reset_after_ns == 1666666670); /* 5 x 1/3 s, up */
  ratewin_limit_free(above);
  ratewin_limit* one = make_bucket(1000, UINT64_C(49) * 86400000, 1);
  ratewin_limit_free(one);
  /* 60 days cannot refill max 1000 within the bound, but a burst of 1 refills in 5.2 s. */
  ratewin_limit* slow = make_bucket(1000, UINT64_C(60) * 86400000, 1);
  ratewin_limit_options slow_options;
  ratewin_limit_options_init(&slow_options);
  CHECK(ratewin_limit_get(slow, &slow_options) == RATEWIN_OK && slow_options.burst == 1 &&
        slow_options.interval_ms == UINT64_C(60) * 86400000);
  ratewin_limit_free(slow);

  /* A caller built against 1.2 passes the options without algorithm nor burst: a sliding
   * window, whatever lies beyond its size. */
  ratewin_limit_options old;
  ratewin_limit_options_init(&old);
  old.size = offsetof(ratewin_limit_options, algorithm);
  old.max = 10;
  old.interval_ms = 1000;
  old.algorithm = RATEWIN_ALGORITHM_TOKEN_BUCKET; /* beyond the size it gave: not read */
  old.burst = 4;                                  /* (nor this) */
  ratewin_limit* old_limit = NULL;
  CHECK(ratewin_limit_new(&old, &old_limit, NULL) == 0 && old_limit != NULL);
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(old_limit, &got) == 0);
  CHECK(got.algorithm == RATEWIN_ALGORITHM_SLIDING_WINDOW && got.burst == 0);
  CHECK(got.resolution_ms == 100);
  ratewin_limit_free(old_limit);
  /* ... and reads a token bucket's settings as far as its size goes. */
  memset(&got, 0x5A, sizeof got);
  got.size = offsetof(ratewin_limit_options, algorithm);
  CHECK(ratewin_limit_get(bucket, &got) == 0 && got.max == 10 && got.interval_ms == 1000);
  CHECK(got.resolution_ms == 1000 && got.scope == 0);
  CHECK(got.algorithm == 0x5A5A5A5A && got.burst == UINT64_C(0x5A5A5A5A5A5A5A5A));

  /* A caller whose struct ends before burst (a 1.3 header without it) makes a token bucket
   * with burst max, whatever lies beyond its size. */
  ratewin_limit_options early;
  ratewin_limit_options_init(&early);
  early.size = offsetof(ratewin_limit_options, burst);
  early.max = 10;
  early.interval_ms = 1000;
  early.algorithm = RATEWIN_ALGORITHM_TOKEN_BUCKET;
  early.burst = 4; /* beyond the size it gave: not read */
  ratewin_limit* early_limit = NULL;
  CHECK(ratewin_limit_new(&early, &early_limit, NULL) == 0 && early_limit != NULL);
  memset(&got, 0x5A, sizeof got);
  got.size = offsetof(ratewin_limit_options, burst);
  CHECK(ratewin_limit_get(early_limit, &got) == 0);
  CHECK(got.size == offsetof(ratewin_limit_options, burst));
  CHECK(got.algorithm == RATEWIN_ALGORITHM_TOKEN_BUCKET && got.reserved2 == 0);
  CHECK(got.resolution_ms == 1000 && got.burst == UINT64_C(0x5A5A5A5A5A5A5A5A));
  got.size = sizeof got;
  CHECK(ratewin_limit_get(early_limit, &got) == 0 && got.burst == 10);
  /* It is the full bucket: the same one. */
  CHECK(remaining_of(engine, 2, early_limit) == 0);
  /* Without burst, a window's options from such a caller still work. */
  early.algorithm = RATEWIN_ALGORITHM_FIXED_WINDOW;
  ratewin_limit* early_fixed = NULL;
  CHECK(ratewin_limit_new(&early, &early_fixed, NULL) == 0 && early_fixed != NULL);
  ratewin_limit_free(early_fixed);
  ratewin_limit_free(early_limit);

  /* A caller built against a newer header: its burst is applied while the fields this
   * library does not know are 0. */
  struct {
    ratewin_limit_options known;
    uint64_t newer[2];
  } newer;
  memset(&newer, 0, sizeof newer);
  ratewin_limit_options_init(&newer.known);
  newer.known.size = sizeof newer;
  newer.known.max = 10;
  newer.known.interval_ms = 1000;
  newer.known.algorithm = RATEWIN_ALGORITHM_TOKEN_BUCKET;
  newer.known.burst = 4;
  ratewin_limit* grown = NULL;
  CHECK(ratewin_limit_new(&newer.known, &grown, &message) == 0 && grown != NULL);
  CHECK(message == NULL);
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(grown, &got) == 0 && got.burst == 4);
  CHECK(remaining_of(engine, 1, grown) == remaining_of(engine, 1, bucket));
  ratewin_limit_free(grown);

  ratewin_limit_free(window);
  ratewin_limit_free(full_explicit);
  ratewin_limit_free(full);
  ratewin_limit_free(bucket);
  ratewin_engine_close(engine);
}

/* ---- Asynchronous decisions (1.2) ------------------------------------------------- */

/* What the callbacks of a group of calls saw, for the main thread to check (CHECK is for
 * the main thread only). */
struct tally {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int calls;    /* callbacks run */
  int admitted; /* of those, with every item admitted */
  int degraded; /* degraded decisions among them */
  int closed;   /* callbacks given RATEWIN_ECLOSED */
  int odd;      /* given another status, or not their own array and count */
};

static void tally_init(struct tally* t) {
  memset(t, 0, sizeof *t);
  pthread_mutex_init(&t->mutex, NULL);
  pthread_cond_init(&t->cond, NULL);
}

static void tally_destroy(struct tally* t) {
  pthread_cond_destroy(&t->cond);
  pthread_mutex_destroy(&t->mutex);
}

/* Waits (at most `seconds`) until `calls` callbacks have run; 1 if they have. */
static int wait_calls(struct tally* t, int calls, int seconds) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += seconds;
  pthread_mutex_lock(&t->mutex);
  while (t->calls < calls) {
    if (pthread_cond_timedwait(&t->cond, &t->mutex, &deadline) == ETIMEDOUT) break;
  }
  const int reached = t->calls >= calls;
  pthread_mutex_unlock(&t->mutex);
  return reached;
}

static int calls_of(struct tally* t) {
  pthread_mutex_lock(&t->mutex);
  const int calls = t->calls;
  pthread_mutex_unlock(&t->mutex);
  return calls;
}

/* One call: its arrays, alive until its callback has run, and what the callback saw
 * (written under the tally's mutex). */
struct async_call {
  struct tally* tally;
  ratewin_engine* engine;
  ratewin_acquisition items[2];
  ratewin_decision decisions[2];
  size_t count;
  pthread_t caller;
  size_t refused_now; /* *refused of the call, when decided at once */
  int finished;
  int status;
  size_t refused;
  pthread_t thread;
  /* A call the callback makes on the same engine, before it reports, and what it
   * returned. */
  struct async_call* next;
  int next_rc;
};

static void prepare_call(struct async_call* c, struct tally* t, ratewin_engine* engine,
                         uint64_t resource, const ratewin_limit* first,
                         const ratewin_limit* second) {
  memset(c, 0, sizeof *c);
  c->tally = t;
  c->engine = engine;
  c->count = second == NULL ? 1 : 2;
  for (size_t i = 0; i < 2; ++i) {
    ratewin_acquisition_init(&c->items[i]);
    c->items[i].resource = resource;
    ratewin_decision_init(&c->decisions[i]);
  }
  c->items[0].limit = first;
  c->items[1].limit = second;
  c->refused_now = 99;
  c->next_rc = 99;
}

static void on_decided(void* data, int status, size_t refused, ratewin_decision* decisions,
                       size_t count);

static int start_call(struct async_call* c) {
  c->caller = pthread_self();
  return ratewin_engine_try_acquire_all_async(c->engine, c->items, c->count, c->decisions,
                                              &c->refused_now, on_decided, c, NULL);
}

static void on_decided(void* data, int status, size_t refused, ratewin_decision* decisions,
                       size_t count) {
  struct async_call* c = data;
  struct tally* t = c->tally;
  const int next_rc = c->next != NULL ? start_call(c->next) : 99;
  pthread_mutex_lock(&t->mutex);
  c->finished = 1;
  c->status = status;
  c->refused = refused;
  c->thread = pthread_self();
  c->next_rc = next_rc;
  ++t->calls;
  if (status == RATEWIN_ECLOSED) {
    ++t->closed;
  } else if (status != RATEWIN_OK) {
    ++t->odd;
  }
  if (decisions != c->decisions || count != c->count) {
    ++t->odd;
  } else {
    if (refused == count) ++t->admitted;
    for (size_t i = 0; i < count; ++i) t->degraded += decisions[i].degraded;
  }
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->mutex);
}

/* Local mode: every decision is made at once, and no callback ever runs. */
static void test_try_acquire_all_async_local(void) {
  ratewin_engine* engine = open_manual_engine(1000);
  ratewin_limit* tight = make_limit(2, 10000, 0, RATEWIN_FAILURE_LOCAL);
  ratewin_limit* roomy = make_limit(10, 10000, 0, RATEWIN_FAILURE_LOCAL);
  struct tally t;
  tally_init(&t);
  struct async_call c;
  prepare_call(&c, &t, engine, 41, tight, roomy);
  char* message = (char*)"not cleared";
  CHECK(ratewin_engine_try_acquire_all_async(engine, c.items, 2, c.decisions, &c.refused_now,
                                             on_decided, &c, &message) == RATEWIN_OK);
  CHECK(message == NULL && c.refused_now == 2);
  CHECK(c.decisions[0].allowed == 1 && c.decisions[0].limit == 2 && c.decisions[0].remaining == 1);
  CHECK(c.decisions[1].allowed == 1 && c.decisions[1].limit == 10 && c.decisions[1].remaining == 9);
  CHECK(start_call(&c) == RATEWIN_OK && c.refused_now == 2 && c.decisions[0].remaining == 0);
  CHECK(start_call(&c) == RATEWIN_OK && c.refused_now == 0);
  CHECK(c.decisions[0].allowed == 0 && c.decisions[0].retry_after_ns > 0);
  /* Not decided: described as it stands, nothing counted (8 of 10 left). */
  CHECK(c.decisions[1].allowed == 1 && c.decisions[1].limit == 10);
  CHECK(c.decisions[1].remaining == 8 && c.decisions[1].retry_after_ns == 0);
  CHECK(remaining_of(engine, 41, roomy) == 8);
  c.refused_now = 99;
  CHECK(ratewin_engine_try_acquire_all_async(engine, NULL, 0, NULL, &c.refused_now, on_decided, &c,
                                             NULL) == RATEWIN_OK);
  CHECK(c.refused_now == 0);

  /* The arguments of ratewin_engine_try_acquire_all, checked the same way, and `done`:
   * an error, nothing counted or written. */
  const ratewin_decision before = c.decisions[0];
  size_t refused = 7;
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(engine, c.items, 2, c.decisions, &refused, NULL,
                                                   &c, &message),
              RATEWIN_EINVAL, message, "done");
  CHECK_ERROR(
      ratewin_engine_try_acquire_all_async(engine, NULL, 0, NULL, &refused, NULL, &c, &message),
      RATEWIN_EINVAL, message, "done");
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(NULL, c.items, 2, c.decisions, &refused,
                                                   on_decided, &c, &message),
              RATEWIN_EINVAL, message, "engine");
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(engine, c.items, 2, c.decisions, NULL,
                                                   on_decided, &c, &message),
              RATEWIN_EINVAL, message, "refused");
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(engine, NULL, 2, c.decisions, &refused,
                                                   on_decided, &c, &message),
              RATEWIN_EINVAL, message, "items");
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(engine, c.items, 2, NULL, &refused, on_decided,
                                                   &c, &message),
              RATEWIN_EINVAL, message, "decisions");
  c.items[1].limit = NULL;
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(engine, c.items, 2, c.decisions, &refused,
                                                   on_decided, &c, &message),
              RATEWIN_EINVAL, message, "items[1].limit");
  c.items[1].limit = roomy;
  c.decisions[1].size = sizeof c.decisions[1] + 8;
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(engine, c.items, 2, c.decisions, &refused,
                                                   on_decided, &c, &message),
              RATEWIN_EINVAL, message, "decisions[1].size");
  c.decisions[1].size = sizeof c.decisions[1];
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(engine, c.items, SIZE_MAX, c.decisions, &refused,
                                                   on_decided, &c, &message),
              RATEWIN_ERANGE, message, "address space");
  CHECK(refused == 7 && memcmp(&c.decisions[0], &before, sizeof before) == 0);
  CHECK(remaining_of(engine, 41, roomy) == 8);

  ratewin_engine_close(engine);
  CHECK(calls_of(&t) == 0);
  tally_destroy(&t);
  ratewin_limit_free(roomy);
  ratewin_limit_free(tight);
}

/* ---- Threads: many callers, one exact total -------------------------------------- */

struct worker {
  ratewin_engine* engine;
  ratewin_limiter* limiter;
  const ratewin_limit* limit;
  int allowed;
  int errors;
};

static void* hammer(void* arg) {
  struct worker* w = arg;
  ratewin_decision d;
  ratewin_decision_init(&d);
  for (int i = 0; i < 2000; ++i) {
    int rc = (i % 2 == 0 && w->limiter != NULL)
                 ? ratewin_limiter_try_acquire(w->limiter, 1, &d, NULL)
                 : ratewin_engine_try_acquire_name(w->engine, "shared", 6, w->limit, 1, &d, NULL);
    if (rc != 0) ++w->errors;
    if (rc == 0 && d.allowed) ++w->allowed;
  }
  return NULL;
}

static void test_threads(void) {
  ratewin_engine* engine = open_manual_engine(1000);
  ratewin_limit* limit = make_limit(1500, 60000, 0, RATEWIN_FAILURE_LOCAL);
  ratewin_limiter* limiter = NULL;
  CHECK(ratewin_limiter_open(engine, ratewin_hash("shared", 6), limit, &limiter, NULL) == 0);
  enum { kThreads = 4 };
  pthread_t threads[kThreads];
  struct worker workers[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    workers[i] = (struct worker){engine, limiter, limit, 0, 0};
    CHECK(pthread_create(&threads[i], NULL, hammer, &workers[i]) == 0);
  }
  int allowed = 0;
  for (int i = 0; i < kThreads; ++i) {
    pthread_join(threads[i], NULL);
    allowed += workers[i].allowed;
    CHECK(workers[i].errors == 0);
  }
  CHECK(allowed == 1500); /* 8000 offered at one instant: exactly max admitted */
  ratewin_limiter_close(limiter);
  ratewin_limit_free(limit);
  ratewin_engine_close(engine);
}

/* ---- Redis ------------------------------------------------------------------------ */

/* The private server of the test kit (tests/support/redis_server_c.h): redis-server, or
 * valkey-server with RATEWIN_TEST_REDIS=valkey. The Redis tests reach it on its Unix
 * socket. */
static ratewin_test_redis* redis = NULL;

static void stop_redis(void) {
  ratewin_test_redis_free(redis);
  redis = NULL;
}

static ratewin_engine* open_redis_engine_mode(const char* url, struct log_record* log,
                                              uint32_t command_timeout_ms, int32_t write_mode) {
  ratewin_options o;
  ratewin_options_init(&o);
  o.command_timeout_ms = command_timeout_ms;
  o.write_mode = write_mode;
  o.redis = url;
  o.key_prefix = "capi";
  o.clock = manual_now;
  o.clock_data = (void*)&manual_clock;
  o.sync_clock = 0; /* the manual clock is the only time */
  o.connect_timeout_ms = 300;
  o.logger = record_log;
  o.logger_data = log;
  ratewin_engine* engine = NULL;
  char* message = (char*)&o; /* stale: success must set it to NULL */
  CHECK(ratewin_engine_open(&o, &engine, &message) == 0 && engine != NULL && message == NULL);
  return engine;
}

static ratewin_engine* open_redis_engine_timeout(const char* url, struct log_record* log,
                                                 uint32_t command_timeout_ms) {
  return open_redis_engine_mode(url, log, command_timeout_ms, RATEWIN_WRITE_SYNC);
}

static ratewin_engine* open_redis_engine(const char* url, struct log_record* log) {
  /* Generous: these tests expect no degraded decision, on machines shared with other
   * suites. The one test of a stalled Redis says its own timeout. */
  return open_redis_engine_timeout(url, log, 1000);
}

/* Redis that is not there: the engine opens, says so, and follows each limit's
 * failure policy. */
static void test_redis_unreachable(void) {
  struct log_record log = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
  ratewin_engine* engine = open_redis_engine("unix:///nonexistent/ratewin.sock", &log);
  if (engine == NULL) return;
  pthread_mutex_lock(&log.mutex); /* the engine logs before ratewin_engine_open returns */
  CHECK(log.warnings >= 1 && log.unreachable >= 1 && log.malformed == 0);
  pthread_mutex_unlock(&log.mutex);

  ratewin_limit* local = make_limit(1, 1000, 0, RATEWIN_FAILURE_LOCAL);
  ratewin_limit* open = make_limit(1, 1000, 0, RATEWIN_FAILURE_OPEN);
  ratewin_limit* closed = make_limit(1, 1000, 0, RATEWIN_FAILURE_CLOSED);
  ratewin_decision d;
  ratewin_decision_init(&d);
  CHECK(ratewin_engine_try_acquire(engine, 1, local, 1, &d, NULL) == 0);
  CHECK(d.allowed == 1 && d.degraded == 1);
  CHECK(ratewin_engine_try_acquire(engine, 1, local, 1, &d, NULL) == 0);
  CHECK(d.allowed == 0 && d.degraded == 1);
  CHECK(ratewin_engine_try_acquire(engine, 2, open, 5, &d, NULL) == 0);
  CHECK(d.allowed == 1 && d.degraded == 1); /* over max, and still allowed */
  CHECK(ratewin_engine_try_acquire(engine, 3, closed, 1, &d, NULL) == 0);
  CHECK(d.allowed == 0 && d.degraded == 1 && d.retry_after_ns > 0);

  ratewin_stats s;
  ratewin_stats_init(&s);
  CHECK(ratewin_engine_stats(engine, &s) == 0);
  CHECK(s.store == 1 && s.store_available == 0 && s.degraded == 4 && s.writes_ok == 0);
  char* last = NULL;
  CHECK(ratewin_engine_last_error(engine, &last) == 0 && last != NULL && last[0] != '\0');
  ratewin_free(last);
  /* The key of a resource's counts (Redis need not be up to name it): its counter in a
   * hash tag, then the window's geometry. */
  char* key = NULL;
  CHECK(ratewin_engine_store_key(engine, 1, local, &key) == 0 && key != NULL);
  CHECK(strstr(key, ":{") != NULL && strstr(key, "}:100x10:w") != NULL);
  char* other = NULL;
  CHECK(ratewin_engine_store_key(engine, 2, local, &other) == 0 && strcmp(key, other) != 0);
  ratewin_free(key);
  ratewin_free(other);

  /* Reset and refund still succeed: this engine's counts go, the store's cannot be
   * reached, and reset says so. (The last error says why, until the next attempt to
   * connect replaces it: not checked here.) */
  uint64_t refunded = 0;
  CHECK(ratewin_engine_refund(engine, 1, local, 1, &refunded, NULL) == 0 && refunded == 1);
  CHECK(ratewin_engine_try_acquire(engine, 1, local, 1, &d, NULL) == 0 && d.allowed == 1);
  int32_t cleared = -1;
  CHECK(ratewin_engine_reset(engine, 1, local, &cleared, NULL) == 0 && cleared == 0);
  CHECK(ratewin_engine_try_acquire(engine, 1, local, 1, &d, NULL) == 0 && d.allowed == 1);

  /* Asynchronously: the closed policy's refusal is decided at once; an admission goes
   * through the engine's I/O thread all the same, and comes back degraded. */
  struct tally t;
  tally_init(&t);
  struct async_call c;
  prepare_call(&c, &t, engine, 4, closed, NULL);
  CHECK(start_call(&c) == RATEWIN_OK && c.refused_now == 0);
  CHECK(c.decisions[0].allowed == 0 && c.decisions[0].degraded == 1);
  prepare_call(&c, &t, engine, 5, local, NULL);
  CHECK(start_call(&c) == RATEWIN_PENDING);
  CHECK(wait_calls(&t, 1, 10));
  pthread_mutex_lock(&t.mutex);
  CHECK(c.status == RATEWIN_OK && c.refused == 1);
  CHECK(c.decisions[0].allowed == 1 && c.decisions[0].degraded == 1);
  pthread_mutex_unlock(&t.mutex);
  tally_destroy(&t);
  ratewin_limit_free(local);
  ratewin_limit_free(open);
  ratewin_limit_free(closed);
  ratewin_engine_close(engine);

  /* Fail fast on request: no engine, and a message saying why. */
  ratewin_options strict;
  ratewin_options_init(&strict);
  strict.redis = "unix:///nonexistent/ratewin.sock";
  strict.connect_timeout_ms = 50;
  strict.require_store = 1;
  ratewin_engine* none = NULL;
  char* why = NULL;
  CHECK_ERROR(ratewin_engine_open(&strict, &none, &why), RATEWIN_EUNAVAILABLE, why,
              "cannot be used");
  CHECK(none == NULL);
}

/* Starts a private server (stopped by stop_redis) and writes its Unix socket's URL in
 * `url`; 0, a failed check, when it cannot start. */
static int private_redis_url(char* url, size_t size) {
  redis = ratewin_test_redis_start(0);
  if (redis == NULL) {
    CHECK(!"redis-server started");
    return 0;
  }
  snprintf(url, size, "%s", ratewin_test_redis_unix_url(redis));
  return 1;
}

/* Waits for events of the engines and the private Redis by polling every 20 ms, for at
 * most 30 s: a bound that only ends a wait whose event never came (a ThreadSanitizer build
 * beside a CPU hog, tests/under_load.sh, may take seconds over a heartbeat). */
enum { kPollMs = 20, kPolls = 30 * 1000 / kPollMs };
static void poll_pause(void) { nanosleep(&(struct timespec){0, kPollMs * 1000 * 1000}, NULL); }

/* Polls `engine`'s stats into `s` until it counts `live` engines on its prefix (each
 * engine heartbeats once a second); 1 once it does. */
static int wait_live_nodes(ratewin_engine* engine, uint64_t live, ratewin_stats* s) {
  ratewin_stats_init(s);
  for (int i = 0; i < kPolls; ++i) {
    if (ratewin_engine_stats(engine, s) == 0 && s->live_nodes == live) return 1;
    poll_pause();
  }
  return 0;
}

/* Two engines sharing a real Redis admit exactly max between them. */
static void test_redis_shared(void) {
  char url[160];
  if (!private_redis_url(url, sizeof url)) return;
  struct log_record log = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
  ratewin_engine* a = open_redis_engine(url, &log);
  ratewin_engine* b = open_redis_engine(url, &log);
  ratewin_limit* limit = make_limit(5, 10000, 1000, RATEWIN_FAILURE_LOCAL);
  ratewin_decision d;
  ratewin_decision_init(&d);
  int allowed = 0;
  for (int i = 0; i < 3; ++i) {
    CHECK(ratewin_engine_try_acquire_name(a, "shared", 6, limit, 1, &d, NULL) == 0);
    allowed += d.allowed;
    CHECK(d.degraded == 0);
  }
  for (int i = 0; i < 6; ++i) {
    CHECK(ratewin_engine_try_acquire_name(b, "shared", 6, limit, 1, &d, NULL) == 0);
    allowed += d.allowed;
    CHECK(ratewin_engine_try_acquire_name(a, "shared", 6, limit, 1, &d, NULL) == 0);
    allowed += d.allowed;
  }
  CHECK(allowed == 5);
  ratewin_stats s;
  ratewin_stats_init(&s);
  CHECK(ratewin_engine_stats(b, &s) == 0);
  CHECK(s.store == 1 && s.store_available == 1 && s.writes_ok >= 2 && s.degraded == 0);
  /* Both engines heartbeat on the prefix (once a second): each counts two live. */
  CHECK(wait_live_nodes(b, 2, &s));
  ratewin_limit* split = make_limit(10, 10000, 1000, RATEWIN_FAILURE_PARTITIONED);
  ratewin_limit_options got;
  ratewin_limit_options_init(&got);
  CHECK(ratewin_limit_get(split, &got) == 0 && got.failure_policy == RATEWIN_FAILURE_PARTITIONED);
  ratewin_limit_free(split);

  /* Reset deletes the shared counts: an engine that starts now finds none. Refund takes
   * units back from them too. */
  const uint64_t shared = ratewin_hash("shared", 6);
  ratewin_engine* c = open_redis_engine(url, &log);
  CHECK(ratewin_engine_try_acquire(c, shared, limit, 1, &d, NULL) == 0 && d.allowed == 0);
  ratewin_engine_close(c);
  int32_t cleared = -1;
  CHECK(ratewin_engine_reset(a, shared, limit, &cleared, NULL) == 0 && cleared == 1);
  c = open_redis_engine(url, &log);
  CHECK(ratewin_engine_try_acquire(c, shared, limit, 3, &d, NULL) == 0);
  CHECK(d.allowed == 1 && d.remaining == 2 && d.degraded == 0);
  uint64_t refunded = 0;
  CHECK(ratewin_engine_refund(c, shared, limit, 2, &refunded, NULL) == 0 && refunded == 2);
  ratewin_engine_close(c);
  c = open_redis_engine(url, &log);
  CHECK(ratewin_engine_try_acquire(c, shared, limit, 0, &d, NULL) == 0 && d.remaining == 4);
  ratewin_engine_close(c);

  /* All or nothing through the store: b's own counts of `tight` are stale (a took them
   * all since b last looked), so b counts both items, the store's reply refuses `tight`,
   * and what `roomy` counted is given back. */
  ratewin_limit* tight = make_limit(2, 10000, 1000, RATEWIN_FAILURE_LOCAL);
  ratewin_limit* roomy = make_limit(10, 10000, 1000, RATEWIN_FAILURE_LOCAL);
  CHECK(ratewin_engine_try_acquire(b, 77, tight, 0, &d, NULL) == 0 && d.remaining == 2);
  CHECK(ratewin_engine_try_acquire(a, 77, tight, 2, &d, NULL) == 0 && d.allowed == 1);
  ratewin_acquisition items[2];
  ratewin_decision decisions[2];
  for (size_t i = 0; i < 2; ++i) {
    ratewin_acquisition_init(&items[i]);
    items[i].resource = 77;
    ratewin_decision_init(&decisions[i]);
  }
  items[0].limit = roomy;
  items[1].limit = tight;
  size_t refused = 99;
  CHECK(ratewin_engine_try_acquire_all(b, items, 2, decisions, &refused, NULL) == 0);
  CHECK(refused == 1 && decisions[1].allowed == 0);
  CHECK(decisions[0].allowed == 1 && decisions[0].remaining == 10); /* given back */
  c = open_redis_engine(url, &log);
  CHECK(ratewin_engine_try_acquire(c, 77, roomy, 0, &d, NULL) == 0 && d.remaining == 10);
  ratewin_engine_close(c);
  ratewin_limit_free(roomy);
  ratewin_limit_free(tight);

  /* Since 1.8, batched write mode: admissions are counted in memory, and written by a
   * flush (the engine's thread's, or ratewin_engine_flush), one write per limiter, once
   * the engine has read how many engines share the store. */
  ratewin_engine* batched = open_redis_engine_mode(url, &log, 1000, RATEWIN_WRITE_BATCHED);
  char* message = NULL;
  CHECK(wait_live_nodes(batched, 3, &s));
  ratewin_limit* wide = make_limit(1000, 10000, 1000, RATEWIN_FAILURE_LOCAL);
  for (int i = 0; i < 21; ++i) { /* the first a warm start; a budget of 999 / 6 / 3 then */
    CHECK(ratewin_engine_try_acquire(batched, 99, wide, 1, &d, NULL) == 0 && d.allowed == 1);
  }
  CHECK(ratewin_engine_flush(batched, &message) == 0 && message == NULL);
  CHECK(ratewin_engine_stats(batched, &s) == 0 && s.flushes >= 1 && s.flushed_units == 20);
  CHECK(s.flush_failures == 0);
  c = open_redis_engine(url, &log);
  CHECK(ratewin_engine_try_acquire(c, 99, wide, 0, &d, NULL) == 0 && d.remaining == 979);
  ratewin_engine_close(c);
  CHECK(ratewin_engine_flush(a, &message) == 0); /* sync mode: nothing to flush */
  CHECK_ERROR(ratewin_engine_flush(NULL, &message), RATEWIN_EINVAL, message, "engine is NULL");
  ratewin_engine_close(batched);
  ratewin_limit_free(wide);

  pthread_mutex_lock(&log.mutex);
  CHECK(log.warnings == 0);
  pthread_mutex_unlock(&log.mutex);
  ratewin_limit_free(limit);
  ratewin_engine_close(a);
  ratewin_engine_close(b);
  stop_redis();
}

/* A thread making asynchronous calls without waiting for them. */
enum { kAsyncCallsPerThread = 100 };
struct async_caller {
  ratewin_engine* engine;
  struct tally* tally;
  const ratewin_limit* limit;
  uint64_t resource;
  struct async_call calls[kAsyncCallsPerThread];
  int pending, admitted_now, refused_now, errors;
};

static void* call_async(void* arg) {
  struct async_caller* w = arg;
  for (int i = 0; i < kAsyncCallsPerThread; ++i) {
    struct async_call* c = &w->calls[i];
    prepare_call(c, w->tally, w->engine, w->resource, w->limit, NULL);
    const int rc = start_call(c);
    if (rc == RATEWIN_PENDING) {
      ++w->pending;
    } else if (rc == RATEWIN_OK && c->refused_now == 1) {
      ++w->admitted_now;
    } else if (rc == RATEWIN_OK && c->refused_now == 0) {
      ++w->refused_now;
    } else {
      ++w->errors;
    }
  }
  return NULL;
}

static double seconds_since(const struct timespec* start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* ratewin_engine_try_acquire_all_async with a real Redis: admissions complete on the
 * engine's thread, exactly, and closing an engine runs every callback owed. */
static void test_redis_async(void) {
  char url[160];
  if (!private_redis_url(url, sizeof url)) return;
  struct log_record log = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
  ratewin_engine* a = open_redis_engine(url, &log);
  ratewin_limit* per_key = make_limit(3, 10000, 1000, RATEWIN_FAILURE_LOCAL);
  ratewin_limit* roomy = make_limit(1000, 10000, 1000, RATEWIN_FAILURE_LOCAL);
  struct tally t;
  tally_init(&t);

  /* An admission waits for the store: pending, *refused untouched, and the callback
   * brings the decisions, on another thread. */
  struct async_call c;
  prepare_call(&c, &t, a, 500, per_key, roomy);
  char* message = (char*)"not cleared";
  c.caller = pthread_self();
  CHECK(ratewin_engine_try_acquire_all_async(a, c.items, 2, c.decisions, &c.refused_now, on_decided,
                                             &c, &message) == RATEWIN_PENDING);
  CHECK(message == NULL);
  CHECK(wait_calls(&t, 1, 10));
  pthread_mutex_lock(&t.mutex);
  CHECK(c.refused_now == 99 && c.finished && c.status == RATEWIN_OK && c.refused == 2);
  CHECK(!pthread_equal(c.thread, pthread_self()));
  CHECK(c.decisions[0].allowed == 1 && c.decisions[0].limit == 3 && c.decisions[0].remaining == 2);
  CHECK(c.decisions[1].allowed == 1 && c.decisions[1].limit == 1000);
  CHECK(c.decisions[1].remaining == 999 && t.degraded == 0 && t.odd == 0);
  pthread_mutex_unlock(&t.mutex);

  /* A refusal on the engine's own counts needs no round trip: decided at once. */
  struct async_call refusal;
  prepare_call(&refusal, &t, a, 500, per_key, roomy);
  refusal.items[0].cost = 3;
  CHECK(start_call(&refusal) == RATEWIN_OK && refusal.refused_now == 0);
  CHECK(refusal.decisions[0].allowed == 0 && refusal.decisions[0].retry_after_ns > 0);
  /* The other limit's own answer, from the engine's counts (no round trip either). */
  CHECK(refusal.decisions[1].allowed == 1 && refusal.decisions[1].limit == 1000);
  CHECK(refusal.decisions[1].remaining == 999 && refusal.decisions[1].degraded == 0);

  /* From a callback, more calls on the same engine: each pending, each callback on the
   * same thread, after the one that made its call. */
  struct async_call chain[4];
  for (size_t i = 0; i < 4; ++i) prepare_call(&chain[i], &t, a, 600 + i, roomy, NULL);
  for (size_t i = 0; i + 1 < 4; ++i) chain[i].next = &chain[i + 1];
  CHECK(start_call(&chain[0]) == RATEWIN_PENDING);
  CHECK(wait_calls(&t, 5, 10));
  pthread_mutex_lock(&t.mutex);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(chain[i].finished && chain[i].status == RATEWIN_OK && chain[i].refused == 1);
    CHECK(chain[i].decisions[0].allowed == 1 && chain[i].decisions[0].remaining == 999);
    CHECK(pthread_equal(chain[i].thread, chain[0].thread));
    CHECK(chain[i].next_rc == (i + 1 < 4 ? RATEWIN_PENDING : 99));
  }
  pthread_mutex_unlock(&t.mutex);

  /* Bad arguments on an engine whose admissions would be pending: an error, and never a
   * callback (callbacks run in order: one owed for them would come before the next). */
  struct async_call bad;
  prepare_call(&bad, &t, a, 700, per_key, roomy);
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(a, bad.items, 2, bad.decisions, &bad.refused_now,
                                                   NULL, &bad, &message),
              RATEWIN_EINVAL, message, "done");
  bad.items[1].size = 8;
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(a, bad.items, 2, bad.decisions, &bad.refused_now,
                                                   on_decided, &bad, &message),
              RATEWIN_EINVAL, message, "items[1].size");
  bad.items[1].size = sizeof bad.items[1];
  bad.items[1].limit = NULL;
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(a, bad.items, 2, bad.decisions, &bad.refused_now,
                                                   on_decided, &bad, &message),
              RATEWIN_EINVAL, message, "items[1].limit");
  bad.items[1].limit = roomy;
  CHECK_ERROR(ratewin_engine_try_acquire_all_async(a, bad.items, 2, bad.decisions, NULL, on_decided,
                                                   &bad, &message),
              RATEWIN_EINVAL, message, "refused");
  CHECK(bad.refused_now == 99 && bad.decisions[0].limit == 0);
  CHECK(start_call(&bad) == RATEWIN_PENDING);
  CHECK(wait_calls(&t, 6, 10));
  pthread_mutex_lock(&t.mutex);
  CHECK(bad.finished && bad.refused == 2 && t.calls == 6 && t.odd == 0);
  pthread_mutex_unlock(&t.mutex);
  CHECK(remaining_of(a, 700, roomy) == 999); /* only the last call counted */

  /* Exact: two engines, two threads each, 400 calls for one resource, none waiting for
   * the last: 150 admitted in all, some at once (refusals on local counts). */
  ratewin_engine* b = open_redis_engine(url, &log);
  const uint64_t scope = ratewin_hash("exact", 5);
  ratewin_limit* exact = make_scoped_limit(150, 60000, scope);
  struct tally exact_tally;
  tally_init(&exact_tally);
  enum { kCallers = 4 };
  struct async_caller* callers = calloc(kCallers, sizeof *callers);
  CHECK(callers != NULL);
  if (callers != NULL) {
    pthread_t threads[kCallers];
    for (int i = 0; i < kCallers; ++i) {
      callers[i].engine = i % 2 == 0 ? a : b;
      callers[i].tally = &exact_tally;
      callers[i].limit = exact;
      callers[i].resource = 800;
      CHECK(pthread_create(&threads[i], NULL, call_async, &callers[i]) == 0);
    }
    int pending = 0, admitted = 0, refused_now = 0, errors = 0;
    for (int i = 0; i < kCallers; ++i) {
      pthread_join(threads[i], NULL);
      pending += callers[i].pending;
      admitted += callers[i].admitted_now;
      refused_now += callers[i].refused_now;
      errors += callers[i].errors;
    }
    CHECK(errors == 0 && pending + admitted + refused_now == kCallers * kAsyncCallsPerThread);
    CHECK(refused_now > 0);
    CHECK(wait_calls(&exact_tally, pending, 20));
    pthread_mutex_lock(&exact_tally.mutex);
    admitted += exact_tally.admitted;
    CHECK(exact_tally.calls == pending && exact_tally.degraded == 0 && exact_tally.odd == 0);
    pthread_mutex_unlock(&exact_tally.mutex);
    CHECK(admitted == 150);
    if (admitted != 150) fprintf(stderr, "  admitted %d of 150\n", admitted);
    free(callers);
  }
  /* What refusals had counted was given back: a new engine finds exactly the 150. (The
   * give-backs are sent without waiting for their replies, so they may land just after
   * the callbacks: a new engine looks again until they have, for at most 2 s.) */
  ratewin_limit* one_more = make_scoped_limit(151, 60000, scope);
  uint64_t left = 0, left_one_more = 0;
  for (int attempt = 0; attempt < 40; ++attempt) {
    ratewin_engine* fresh = open_redis_engine(url, &log);
    left = remaining_of(fresh, 800, exact);
    left_one_more = remaining_of(fresh, 800, one_more);
    ratewin_engine_close(fresh);
    if (left_one_more == 1) break;
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  }
  CHECK(left == 0 && left_one_more == 1);
  ratewin_limit_free(one_more);
  ratewin_limit_free(exact);
  tally_destroy(&exact_tally);

  /* Closed with calls pending while a limiter keeps its store running: the writes get
   * their replies, and ratewin_engine_close returns once every callback has run. */
  enum { kInFlight = 10 };
  struct tally closing;
  tally_init(&closing);
  ratewin_engine* d = open_redis_engine(url, &log);
  ratewin_limiter* keeper = NULL;
  CHECK(ratewin_limiter_open(d, 900, roomy, &keeper, NULL) == 0);
  struct async_call in_flight[kInFlight];
  int pending = 0;
  for (int i = 0; i < kInFlight; ++i) {
    prepare_call(&in_flight[i], &closing, d, 900 + (uint64_t)i, roomy, NULL);
    pending += start_call(&in_flight[i]) == RATEWIN_PENDING;
  }
  CHECK(pending == kInFlight);
  ratewin_engine_close(d);
  pthread_mutex_lock(&closing.mutex);
  CHECK(closing.calls == kInFlight && closing.admitted == kInFlight && closing.odd == 0);
  pthread_mutex_unlock(&closing.mutex);
  ratewin_limiter_close(keeper);
  tally_destroy(&closing);

  /* Closed with calls pending on a Redis that does not answer (stopped): their writes
   * fail at once instead of waiting out the 10 s deadline, their callbacks run with
   * RATEWIN_ECLOSED and degraded decisions (the local policy admits), and a call made
   * from such a callback fails with RATEWIN_ECLOSED, without a callback of its own. */
  struct log_record paused_log = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
  tally_init(&closing);
  ratewin_engine* e = open_redis_engine_timeout(url, &paused_log, 10000);
  /* The engine's I/O thread makes its first writes synchronously while its own connection
   * comes up, and pipelines them once it has read Redis's answer to that connection's
   * login, a PING: the writes below must be pipelined ones, left waiting for replies.
   * Waited for as events (it was a 300 ms sleep): once the engine's background connection
   * is up (its own login's PING counted before), the first write starts the I/O thread's
   * connection; Redis counts its PING; then two writes one after the other, each sent
   * after Redis answered that PING, so the I/O thread has read the answer, at the latest
   * in the turn of its loop that takes the second, before any write below reaches it. */
  enum { kWarm = 3 };
  ratewin_stats es;
  ratewin_stats_init(&es);
  for (int i = 0; i < kPolls && ratewin_engine_stats(e, &es) == 0 && es.connections == 0; ++i) {
    poll_pause();
  }
  CHECK(es.connections >= 1);
  const long long pings = ratewin_test_redis_calls(redis, "ping");
  CHECK(pings > 0);
  struct async_call warm[kWarm];
  prepare_call(&warm[0], &closing, e, 1000, roomy, NULL);
  CHECK(start_call(&warm[0]) == RATEWIN_PENDING);
  CHECK(wait_calls(&closing, 1, 10));
  long long pinged = pings;
  for (int i = 0; i < kPolls && pinged <= pings; ++i) {
    poll_pause();
    pinged = ratewin_test_redis_calls(redis, "ping");
  }
  CHECK(pinged == pings + 1);
  for (int i = 1; i < kWarm; ++i) {
    prepare_call(&warm[i], &closing, e, 1100 + (uint64_t)i, roomy, NULL);
    CHECK(start_call(&warm[i]) == RATEWIN_PENDING);
    CHECK(wait_calls(&closing, 1 + i, 10));
  }
  struct async_call nested[kInFlight];
  pending = 0;
  CHECK(ratewin_test_redis_pause(redis));
  for (int i = 0; i < kInFlight; ++i) {
    prepare_call(&in_flight[i], &closing, e, 1001 + (uint64_t)i, roomy, NULL);
    prepare_call(&nested[i], &closing, e, 2001 + (uint64_t)i, roomy, NULL);
    in_flight[i].next = &nested[i];
    pending += start_call(&in_flight[i]) == RATEWIN_PENDING;
  }
  CHECK(pending == kInFlight);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  ratewin_engine_close(e);
  const double took = seconds_since(&start);
  CHECK(took < 5.0);
  pthread_mutex_lock(&closing.mutex);
  CHECK(closing.calls == kWarm + kInFlight && closing.closed == kInFlight && closing.odd == 0);
  CHECK(closing.admitted == kWarm + kInFlight && closing.degraded == kInFlight);
  for (int i = 0; i < kInFlight; ++i) {
    CHECK(in_flight[i].status == RATEWIN_ECLOSED && in_flight[i].next_rc == RATEWIN_ECLOSED);
    CHECK(in_flight[i].decisions[0].allowed == 1 && in_flight[i].decisions[0].degraded == 1);
    CHECK(!nested[i].finished);
  }
  pthread_mutex_unlock(&closing.mutex);
  CHECK(ratewin_test_redis_resume(redis));
  /* Nothing after ratewin_engine_close: its threads have ended, and 50 ms more give a
   * stray callback time to show (a busy machine could only hide one, never fail this). */
  nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  CHECK(calls_of(&closing) == kWarm + kInFlight);
  tally_destroy(&closing);

  pthread_mutex_lock(&log.mutex);
  CHECK(log.warnings == 0);
  pthread_mutex_unlock(&log.mutex);
  tally_destroy(&t);
  ratewin_limit_free(roomy);
  ratewin_limit_free(per_key);
  ratewin_engine_close(a);
  ratewin_engine_close(b);
  stop_redis();
}

/* ---- TLS (since 1.6) ---------------------------------------------------------------- */

/* ratewin_tls_options follows the struct conventions, and settings that cannot be used
 * fail ratewin_engine_open with RATEWIN_EINVAL and the library's message. */
static void test_tls_options(void) {
  ratewin_tls_options t;
  memset(&t, 0xff, sizeof t);
  ratewin_tls_options_init(&t);
  CHECK(t.size == sizeof t);
  CHECK(t.ca_file == NULL && t.ca_dir == NULL && t.cert_file == NULL && t.key_file == NULL);
  CHECK(t.server_name == NULL && t.min_version == NULL);
  CHECK(t.verify == RATEWIN_TLS_VERIFY_FULL && t.reserved == 0);
  ratewin_tls_options_init(NULL);

  ratewin_options o;
  ratewin_options_init(&o);
  CHECK(o.tls == NULL);
  ratewin_engine* engine = NULL;
  char* message = NULL;
  /* The defaults ask for nothing: accepted in local mode and with any address. */
  o.tls = &t;
  CHECK(ratewin_engine_open(&o, &engine, &message) == 0 && engine != NULL && message == NULL);
  ratewin_engine_close(engine);

  ratewin_engine* const sentinel = (ratewin_engine*)&o;
  ratewin_engine* out = sentinel;
  struct {
    const char* word; /* the message names it */
    const char* redis;
    ratewin_tls_options tls;
  } bad[9];
  for (size_t i = 0; i < 9; ++i) {
    ratewin_tls_options_init(&bad[i].tls);
    bad[i].redis = "rediss://127.0.0.1:1";
  }
  bad[0].word = "size";
  bad[0].tls.size = 8;
  bad[1].word = "verify";
  bad[1].tls.verify = 3;
  bad[2].word = "verify";
  bad[2].tls.verify = -1;
  bad[3].word = "reserved";
  bad[3].tls.reserved = 1;
  bad[4].word = "min_version";
  bad[4].tls.min_version = "1.1";
  bad[5].word = "/nonexistent/ca.crt"; /* a file that cannot be read: named */
  bad[5].tls.ca_file = "/nonexistent/ca.crt";
  bad[6].word = "rediss"; /* TLS settings for an address without TLS */
  bad[6].tls.ca_file = "/nonexistent/ca.crt";
  bad[6].redis = "redis://127.0.0.1:1";
  bad[7].word = "tls_verify"; /* the URL's parameter, checked the same way */
  bad[7].redis = "rediss://127.0.0.1:1?tls_verify=maybe";
  bad[8].word = "tls_min_version";
  bad[8].redis = "rediss://127.0.0.1:1?tls_min_version=1.0";
  for (size_t i = 0; i < 9; ++i) {
    ratewin_options_init(&o);
    o.redis = bad[i].redis;
    o.tls = &bad[i].tls;
    CHECK_ERROR(ratewin_engine_open(&o, &out, &message), RATEWIN_EINVAL, message, bad[i].word);
    CHECK(out == sentinel);
  }

  /* TLS options from a newer header: accepted while the unknown fields are 0. */
  struct {
    ratewin_tls_options known;
    uint64_t newer[2];
  } newer;
  memset(&newer, 0, sizeof newer);
  ratewin_tls_options_init(&newer.known);
  newer.known.size = sizeof newer;
  ratewin_options_init(&o);
  o.tls = &newer.known;
  CHECK(ratewin_engine_open(&o, &engine, &message) == 0 && message == NULL);
  ratewin_engine_close(engine);
  newer.newer[1] = 1;
  CHECK_ERROR(ratewin_engine_open(&o, &out, &message), RATEWIN_EINVAL, message,
              "does not know");
  CHECK(out == sentinel);

  /* A caller built against 1.5 passes options without the tls field: whatever lies
   * beyond its size is not read. */
  ratewin_options_init(&o);
  o.size = offsetof(ratewin_options, tls);
  o.tls = (const ratewin_tls_options*)&o; /* not a ratewin_tls_options: must not be read */
  CHECK(ratewin_engine_open(&o, &engine, &message) == 0 && message == NULL);
  ratewin_engine_close(engine);
}

/* The kit's server with TLS (a plain port too), with the kit's certificates
 * (tests/support/make_certs.sh's). */
static ratewin_test_redis* tls_redis = NULL;

static void stop_tls_redis(void) {
  ratewin_test_redis_free(tls_redis);
  tls_redis = NULL;
}

/* ratewin_engine_open over TLS with require_store: its code, and the engine (or NULL). */
static int open_tls_engine(const char* url, const ratewin_tls_options* tls,
                           struct log_record* log, ratewin_engine** engine, char** message) {
  ratewin_options o;
  ratewin_options_init(&o);
  o.redis = url;
  o.tls = tls;
  o.key_prefix = "capi-tls";
  o.require_store = 1;
  o.connect_timeout_ms = 5000; /* handshakes are slow under the sanitizers */
  o.command_timeout_ms = 2000;
  o.logger = record_log;
  o.logger_data = log;
  *engine = NULL;
  return ratewin_engine_open(&o, engine, message);
}

/* Engines over TLS count together; a certificate that does not pass is said plainly. */
static void test_redis_tls(void) {
  char url[64], plain_url[64], ca[256], other_ca[256], url_with_ca[384];
  tls_redis = ratewin_test_redis_start(RATEWIN_TEST_REDIS_TLS);
  if (tls_redis == NULL || !ratewin_test_certificate("ca.crt", ca, sizeof ca) ||
      !ratewin_test_certificate("other-ca.crt", other_ca, sizeof other_ca)) {
    CHECK(!"a TLS redis-server started");
    stop_tls_redis();
    return;
  }
  snprintf(url, sizeof url, "%s", ratewin_test_redis_tls_url(tls_redis));
  snprintf(plain_url, sizeof plain_url, "rediss://127.0.0.1:%d",
           ratewin_test_redis_port(tls_redis));
  snprintf(url_with_ca, sizeof url_with_ca, "%s?tls_ca_file=%s", url, ca);
  struct log_record log = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};

  /* Two engines, the CA given in the struct and in the URL, admit exactly max between
   * them. */
  ratewin_tls_options tls;
  ratewin_tls_options_init(&tls);
  tls.ca_file = ca;
  tls.min_version = "1.3";
  ratewin_engine* a = NULL;
  ratewin_engine* b = NULL;
  char* message = NULL;
  CHECK(open_tls_engine(url, &tls, &log, &a, &message) == 0 && a != NULL && message == NULL);
  if (message != NULL) fprintf(stderr, "  message: %s\n", message);
  ratewin_free(message);
  message = NULL;
  CHECK(open_tls_engine(url_with_ca, NULL, &log, &b, &message) == 0 && b != NULL);
  if (message != NULL) fprintf(stderr, "  message: %s\n", message);
  ratewin_free(message);
  message = NULL;
  if (a != NULL && b != NULL) {
    ratewin_limit* limit = make_limit(5, 3600000, 0, RATEWIN_FAILURE_LOCAL);
    int allowed = 0, degraded = 0;
    for (int i = 0; i < 12; ++i) {
      ratewin_decision d;
      ratewin_decision_init(&d);
      CHECK(ratewin_engine_try_acquire_name(i % 2 ? a : b, "tls", 3, limit, 1, &d, NULL) == 0);
      allowed += d.allowed;
      degraded += d.degraded;
    }
    CHECK(allowed == 5 && degraded == 0);
    ratewin_stats s;
    ratewin_stats_init(&s);
    CHECK(ratewin_engine_stats(a, &s) == 0 && s.store_available == 1 && s.writes_ok >= 1);
    ratewin_limit_free(limit);
  }
  ratewin_engine_close(a);
  ratewin_engine_close(b);
  pthread_mutex_lock(&log.mutex);
  CHECK(log.warnings == 0);
  pthread_mutex_unlock(&log.mutex);

  /* Failures at open, with require_store: RATEWIN_EUNAVAILABLE and the handshake's own
   * words. */
  ratewin_engine* none = NULL;
  ratewin_tls_options wrong;
  ratewin_tls_options_init(&wrong);
  wrong.ca_file = other_ca; /* a CA that did not sign the server's certificate */
  CHECK_ERROR(open_tls_engine(url, &wrong, &log, &none, &message), RATEWIN_EUNAVAILABLE, message,
              "certificate verify failed");
  CHECK(none == NULL);
  ratewin_tls_options renamed;
  ratewin_tls_options_init(&renamed);
  renamed.ca_file = ca;
  renamed.server_name = "redis.example.com"; /* not a name of the certificate */
  CHECK_ERROR(open_tls_engine(url, &renamed, &log, &none, &message), RATEWIN_EUNAVAILABLE,
              message, "host name mismatch");
  CHECK(none == NULL);
  /* TLS to the plain port, and plain to the TLS port. */
  CHECK_ERROR(open_tls_engine(plain_url, &tls, &log, &none, &message), RATEWIN_EUNAVAILABLE,
              message, "TLS");
  CHECK(none == NULL);
  char to_tls_port[64];
  snprintf(to_tls_port, sizeof to_tls_port, "redis://127.0.0.1:%d",
           ratewin_test_redis_tls_port(tls_redis));
  CHECK_ERROR(open_tls_engine(to_tls_port, NULL, &log, &none, &message), RATEWIN_EUNAVAILABLE,
              message, "rediss://");
  CHECK(none == NULL);

  /* verify=ca passes a certificate for another name; verify=none any certificate, with a
   * warning. */
  renamed.verify = RATEWIN_TLS_VERIFY_CA;
  CHECK(open_tls_engine(url, &renamed, &log, &a, NULL) == 0 && a != NULL);
  ratewin_engine_close(a);
  struct log_record unverified = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
  wrong.verify = RATEWIN_TLS_VERIFY_NONE;
  CHECK(open_tls_engine(url, &wrong, &unverified, &a, NULL) == 0 && a != NULL);
  ratewin_engine_close(a);
  pthread_mutex_lock(&unverified.mutex);
  CHECK(unverified.warnings >= 1 && unverified.malformed == 0);
  pthread_mutex_unlock(&unverified.mutex);
  stop_tls_redis();
}

int main(void) {
  test_versions_and_errors();
  test_limits();
  test_limit_parse();
  test_options();
  test_local_engine();
  test_handle_limit();
  test_scopes();
  test_reset_and_refund();
  test_try_acquire_all();
  test_algorithms();
  test_token_bucket();
  test_sliding_log();
  test_shadow_mode();
  test_try_acquire_all_async_local();
  test_threads();
  test_redis_unreachable();
  test_redis_shared();
  test_redis_async();
  test_tls_options();
  test_redis_tls();
  if (failures != 0) {
    fprintf(stderr, "capi_test: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("capi_test: %d checks passed\n", checks);
  return 0;
}
