#include <pybind11/functional.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "lifetime.h"
#include "ratewin_internal/redis_client.h"

namespace ratewin::python {
namespace {

// The acquisitions of one resource under several limits (see to_limits; `what` names the
// argument).
std::vector<Acquisition> acquisitions(py::handle resource, py::handle limits, py::handle cost,
                                      const char* what = "limits") {
  const std::uint64_t id = to_resource(resource);
  const std::uint64_t units = to_u64(cost, "cost", 0, UINT64_MAX);
  std::vector<Acquisition> items;
  for (const Limit& l : to_limits(limits, what)) items.push_back({id, l, units});
  return items;
}

// What try_acquire_all answered, as Python sees it.
Decisions decisions_of(std::size_t refused, std::span<const Decision> out) {
  Decisions result;
  result.decisions.assign(out.begin(), out.end());
  if (refused != out.size()) result.refused = refused;
  return result;
}

// The Engine's tls_* arguments as TlsOptions: TypeError or ValueError for what they cannot
// be (the files, the version and the name are the engine's to check).
TlsOptions to_tls(OptionalPathArg ca_file, OptionalPathArg ca_dir, OptionalPathArg cert_file,
                  OptionalPathArg key_file, OptionalStrArg server_name, StrArg verify,
                  StrArg min_version) {
  TlsOptions tls;
  if (!ca_file.is_none()) tls.ca_file = to_path(ca_file, "tls_ca_file");
  if (!ca_dir.is_none()) tls.ca_dir = to_path(ca_dir, "tls_ca_dir");
  if (!cert_file.is_none()) tls.cert_file = to_path(cert_file, "tls_cert_file");
  if (!key_file.is_none()) tls.key_file = to_path(key_file, "tls_key_file");
  if (!server_name.is_none()) tls.server_name = to_utf8(server_name, "tls_server_name");
  tls.verify = to_named<TlsVerify>(verify, "tls_verify", internal::kTlsVerifyNames);
  tls.min_version = to_utf8(min_version, "tls_min_version");
  if (std::find(std::begin(internal::kTlsVersions), std::end(internal::kTlsVersions),
                tls.min_version) == std::end(internal::kTlsVersions)) {
    throw py::value_error("tls_min_version must be " +
                          internal::choices(internal::kTlsVersions, "'") + ", not '" +
                          tls.min_version + "'");
  }
  return tls;
}

class PyEngine : public Owner<PyEngine, Engine> {
 public:
  explicit PyEngine(Options options) {
    redis_ = options.redis;
    if (!redis_.empty()) redis_ = internal::RedisClient::describe(redis_);
    // Connecting to Redis may take up to the connect timeout.
    own(without_gil([&] { return deleted_safely(new Engine(std::move(options))); }));
  }

  std::shared_ptr<Engine> engine() const {
    if (!object_) {
      PyErr_SetString(closed_error, "this Engine is closed");
      throw py::error_already_set();
    }
    return object_;
  }

  // One limit, or several at once (all or nothing, as try_acquire_all): the Decision that
  // describes the outcome.
  Decision try_acquire(ResourceArg resource, LimitsArg limits, IntArg cost) const {
    // The common case, a Limit object: one type lookup, no vector.
    if (py::detail::make_caster<Limit> caster; caster.load(limits, false)) {
      const std::uint64_t id = to_resource(resource);
      const std::uint64_t units = to_u64(cost, "cost", 0, UINT64_MAX);
      const Limit& limit = py::detail::cast_op<const Limit&>(caster);
      const std::shared_ptr<Engine> e = engine();
      return without_gil([&] { return e->try_acquire(id, limit, units); });
    }
    const std::vector<Acquisition> items = acquisitions(resource, limits, cost, "limit");
    const std::shared_ptr<Engine> e = engine();
    if (items.size() == 1) {
      return without_gil([&] { return e->try_acquire(items[0].resource, items[0].limit, items[0].cost); });
    }
    std::vector<Decision> out(items.size());
    const std::size_t refused = without_gil([&] { return e->try_acquire_all(items, out); });
    return decisions_of(refused, out).shown();
  }

  Stats stats() const {
    const std::shared_ptr<Engine> e = engine();
    return without_gil([&] { return e->stats(); });
  }

  bool flush() const {
    const std::shared_ptr<Engine> e = engine();
    return without_gil([&] { return e->flush(); });
  }

  std::uint64_t capacity(LimitArg limit) const {
    return engine()->capacity(to_limit(limit, "limit"));
  }

  // Each of the limits; true when Redis confirmed every one.
  bool reset(ResourceArg resource, LimitsArg limits) const {
    const std::vector<Acquisition> items = acquisitions(resource, limits, py::int_(0), "limit");
    const std::shared_ptr<Engine> e = engine();
    return without_gil([&] {
      bool all = true;
      for (const Acquisition& a : items) all = e->reset(a.resource, a.limit) && all;
      return all;
    });
  }

  // Up to `cost` under each of the limits; the least given back under any of them.
  std::uint64_t refund(ResourceArg resource, LimitsArg limits, IntArg cost) const {
    const std::vector<Acquisition> items = acquisitions(resource, limits, cost, "limit");
    const std::shared_ptr<Engine> e = engine();
    return without_gil([&] {
      std::uint64_t least = UINT64_MAX;
      for (const Acquisition& a : items) least = std::min(least, e->refund(a.resource, a.limit, a.cost));
      return least;
    });
  }

  Decisions try_acquire_all(ResourceArg resource, LimitsArg limits, IntArg cost) const {
    const std::vector<Acquisition> items = acquisitions(resource, limits, cost);
    std::vector<Decision> out(items.size());
    const std::shared_ptr<Engine> e = engine();
    const std::size_t refused = without_gil([&] { return e->try_acquire_all(items, out); });
    return decisions_of(refused, out);
  }

  // Engine.try_acquire_all_async's core: the Decisions now, or None and `callback`
  // (Decisions) called later, on the engine's I/O thread, with the GIL held.
  py::object try_acquire_all_async(ResourceArg resource, LimitsArg limits, IntArg cost,
                                   const py::function& callback) const {
    const std::vector<Acquisition> items = acquisitions(resource, limits, cost);
    std::vector<Decision> out(items.size());
    const auto call = std::make_shared<PyCallback>(
        callback, "ratewin: the callback of an asynchronous decision");
    const std::shared_ptr<Engine> e = engine();
    const std::size_t refused = without_gil([&] {
      return e->try_acquire_all_async(
          items, out, [call](std::size_t refused_at, std::span<const Decision> decisions) {
            (*call)(decisions_of(refused_at, decisions));
          });
    });
    if (refused == Engine::kPending) return py::none();
    return py::cast(decisions_of(refused, out));
  }


  const std::string& redis() const noexcept { return redis_; }

 private:
  std::string redis_;  // without the password
};

// An open limiter keeps its engine's threads running.
class PyLimiter : public Owner<PyLimiter, LimiterHandle> {
 public:
  PyLimiter(const PyEngine& engine, ResourceArg resource, const Limit& limit)
      : resource_(to_resource(resource)),
        name_(py::isinstance<py::int_>(resource) ? py::object(py::none())
                                                 : py::reinterpret_borrow<py::object>(resource)),
        limit_(limit) {
    const std::shared_ptr<Engine> e = engine.engine();
    own(deleted_safely(new LimiterHandle(e->limiter(resource_, limit_))));
  }

  Decision try_acquire(IntArg cost) const {
    const std::uint64_t units = to_u64(cost, "cost", 0, UINT64_MAX);
    std::shared_ptr<LimiterHandle> h = object_;
    if (!h) {
      PyErr_SetString(closed_error, "this Limiter is closed");
      throw py::error_already_set();
    }
    return without_gil([&] { return h->try_acquire(units); });
  }
  std::uint64_t resource() const noexcept { return resource_; }
  // The name it was made with (a str or bytes), or None for an int id.
  const py::object& name() const noexcept { return name_; }
  const Limit& limit() const noexcept { return limit_; }

 private:
  std::uint64_t resource_;
  py::object name_;
  Limit limit_;
};

// Closes every limiter and engine still open (limiters first: an open one keeps its
// engine's threads running), then waits for what is still being deleted (engines dropped
// unclosed, or closed from their own logger).
void close_all() {
  close_each(PyLimiter::open());
  close_each(PyEngine::open());
  without_gil([] {
    drain_reaped();
    return 0;
  });
}

// Engine(...)'s arguments as an engine: TypeError or ValueError for what they cannot be.
// The ranges and names are engine_options.h's; what is in range but unusable (a bad URL,
// a TLS file) is the engine's to say.
PyEngine* make_engine(OptionalStrArg redis, StrArg key_prefix, IntArg max_limiters,
                      SecondsArg connect_timeout, SecondsArg command_timeout,
                      IntArg max_connections, SecondsArg sync_settle, BoolArg sync_clock,
                      SecondsArg clock_sync_interval, OptionalClockArg clock,
                      OptionalLoggerArg logger, IntArg max_memory, StrArg connect,
                      FloatArg partition_share, PolicyArg partitioned_unknown,
                      OptionalPathArg tls_ca_file, OptionalPathArg tls_ca_dir,
                      OptionalPathArg tls_cert_file, OptionalPathArg tls_key_file,
                      OptionalStrArg tls_server_name, StrArg tls_verify, StrArg tls_min_version,
                      StrArg write_mode, SecondsArg flush_interval) {
  const auto count = [](py::handle value, const char* name) {
    const auto min = static_cast<std::uint64_t>(internal::option_range(name).min);
    return static_cast<std::size_t>(to_u64(value, name, min, UINT64_MAX));
  };
  const auto duration = [](py::handle value, const char* name) {
    return to_milliseconds(value, name, internal::option_range(name).accepts_zero());
  };
  Options o;
  if (!redis.is_none()) o.redis = to_utf8(redis, "redis");
  o.tls = to_tls(tls_ca_file, tls_ca_dir, tls_cert_file, tls_key_file, tls_server_name,
                 tls_verify, tls_min_version);
  o.key_prefix = to_utf8(key_prefix, "key_prefix");
  o.max_limiters = count(max_limiters, "max_limiters");
  o.max_memory = count(max_memory, "max_memory");
  o.connect_timeout = duration(connect_timeout, "connect_timeout");
  o.command_timeout = duration(command_timeout, "command_timeout");
  o.max_connections = count(max_connections, "max_connections");
  o.sync_settle = duration(sync_settle, "sync_settle");
  o.sync_clock = to_bool(sync_clock, "sync_clock");
  o.clock_sync_interval = duration(clock_sync_interval, "clock_sync_interval");
  if (!clock.is_none()) {
    if (!py::isinstance<ManualClock>(clock)) {
      throw py::type_error("clock must be a ratewin.ManualClock or None");
    }
    o.clock = clock.cast<std::shared_ptr<ManualClock>>();
  }
  const std::string connect_mode = to_utf8(connect, "connect");
  if (connect_mode != "lazy" && connect_mode != "require") {
    throw py::value_error("connect must be 'lazy' or 'require', not '" + connect_mode + "'");
  }
  o.require_store = connect_mode == "require";
  o.partition_share = to_double(partition_share, "partition_share");
  o.partitioned_unknown = to_policy(partitioned_unknown, "partitioned_unknown");
  o.write_mode = to_named<WriteMode>(write_mode, "write_mode", internal::kWriteModeNames);
  o.flush_interval = duration(flush_interval, "flush_interval");
  // Without a logger of the caller's, records on the "ratewin" logger.
  py::object sink = logger.is_none() ? py::module_::import("ratewin._logsink").attr("emit")
                                     : py::reinterpret_borrow<py::object>(logger);
  if (PyCallable_Check(sink.ptr()) == 0) {
    throw py::type_error("logger must be a callable (level, message) or None");
  }
  auto callback = std::make_shared<PyCallback>(sink, "ratewin: the Engine's logger");
  o.logger = [callback](LogLevel level, std::string_view message) {
    (*callback)(internal::name_of(level), message);
  };
  return new PyEngine(std::move(o));
}

// Seconds, as Python's duration arguments are given.
double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

void def_limiter(py::module_& m);
void def_functions(py::module_& m);

}  // namespace

void init_engine(py::module_& m) {
  note_main_thread();
  const Options d;
  py::class_<PyEngine> engine_class(
      m, "Engine",
      "The rate-limiting engine: one per process is typical. Thread-safe: any number of "
      "threads may call it at once; the GIL is released while it works. Local by default; "
      "with `redis`, limits are shared by every engine using the same Redis and key_prefix. "
      "A context manager: leaving the block closes it. Engines still open at interpreter "
      "exit are closed then.");
  def_context_manager(engine_class, "engine");
  engine_class
      // Every default is Options{}'s (test_stubs holds _ratewin.pyi to the same).
      .def(py::init(&make_engine), py::arg("redis") = py::none(), py::kw_only(),
           py::arg("key_prefix") = d.key_prefix, py::arg("max_limiters") = d.max_limiters,
           py::arg("connect_timeout") = seconds(d.connect_timeout),
           py::arg("command_timeout") = seconds(d.command_timeout),
           py::arg("max_connections") = d.max_connections,
           py::arg("sync_settle") = seconds(d.sync_settle), py::arg("sync_clock") = d.sync_clock,
           py::arg("clock_sync_interval") = seconds(d.clock_sync_interval),
           py::arg("clock") = py::none(), py::arg("logger") = py::none(),
           py::arg("max_memory") = d.max_memory,
           py::arg("connect") = d.require_store ? "require" : "lazy",
           py::arg("partition_share") = d.partition_share,
           py::arg("partitioned_unknown") = std::string(internal::name_of(d.partitioned_unknown)),
           py::arg("tls_ca_file") = py::none(), py::arg("tls_ca_dir") = py::none(),
           py::arg("tls_cert_file") = py::none(), py::arg("tls_key_file") = py::none(),
           py::arg("tls_server_name") = py::none(),
           py::arg("tls_verify") = std::string(internal::name_of(d.tls.verify)),
           py::arg("tls_min_version") = d.tls.min_version,
           py::arg("write_mode") = std::string(internal::name_of(d.write_mode)),
           py::arg("flush_interval") = seconds(d.flush_interval),
           "write_mode: 'sync' (the default): each admitted request writes to Redis and "
           "waits for the reply; 'batched': requests are decided and counted in memory, "
           "without waiting on the network, and the engine flushes what it admitted every "
           "flush_interval (seconds; 0 chooses per window, a 40th of it, 10 to 50 ms where "
           "the resolution allows; else 0.001 to 1), one write per limiter. Between flushes "
           "each engine admits at most its budget, a share of what the window had left (one "
           "request a round past it is written through), so a limit may be exceeded by a "
           "bounded amount (README, 'Batched mode'). "
           "sliding_window and fixed_window limits only; the others stay sync. close() "
           "flushes; flush() does at once.\n\n"
           "partition_share, partitioned_unknown: limits with on_failure='partitioned' admit "
           "max x partition_share / live engines on each engine while Redis is unreachable "
           "(0.01 to 1000); an engine that never read the live count decides as "
           "partitioned_unknown says, 'local' or 'closed'.\n\n"
           "connect: 'lazy' (the default) starts whether or not Redis can be used, deciding "
           "with local counts until it can; 'require' raises StoreError when Redis cannot be "
           "used at start (unreachable within connect_timeout, a password missing or "
           "refused, a TLS handshake that failed: the message says why).\n\n"
           "tls_*: TLS to Redis, for rediss://, rediss-cluster:// and rediss-sentinel:// "
           "addresses (every connection: the server, each Cluster node, the sentinels and "
           "their primary). tls_ca_file, tls_ca_dir: the trusted CAs (a PEM file; a folder "
           "named by hash, `openssl rehash`); neither: the system's. tls_cert_file, "
           "tls_key_file: this client's certificate and key, for mutual TLS (no key file: "
           "the key is in the certificate's file). tls_server_name: the name sent (SNI) and "
           "verified instead of each server's host. tls_verify: 'full' (the chain and the "
           "name), 'ca' (the chain only) or 'none' (nothing: encrypted but unauthenticated; "
           "logged as a warning). tls_min_version: '1.2' or '1.3'. Paths are str or "
           "os.PathLike. The URL may give each as a parameter "
           "(rediss://host:6380?tls_ca_file=/etc/ca.pem&tls_verify=ca), which wins. Files "
           "are read at start (ValueError if one cannot be used), and again after they "
           "change. TLS settings with an address that is not rediss raise ValueError.\n\n"
           "max_limiters and max_memory (bytes, at least 16384) bound the limiters held in "
           "memory. A limiter whose window still holds counts is never dropped to make "
           "room; while the bounds are full of them, new resources share one overflow "
           "limiter per window geometry (stats()['overflowed'] counts those decisions).\n\n"
           "redis: None (local) or 'redis://[user[:password]@]host[:port][/db]', "
           "'unix://[user[:password]@]/path[?db=N]', 'redis-cluster://host:port,host:port,...' "
           "or 'redis-sentinel://host:port,.../master-name[?sentinel_password=...]', and with "
           "TLS 'rediss://...', 'rediss-cluster://...' or 'rediss-sentinel://...'; the engine "
           "starts whether or not Redis is up. Durations are seconds (int, float or timedelta). "
           "clock: a ManualClock for "
           "tests. logger: a callable(level, message), level one of 'debug', 'info', "
           "'warning', 'error', called from the engine's threads (default: records on the "
           "'ratewin' logging.Logger). Raises ValueError for a bad option, URL or TLS "
           "setting.")
      .def("try_acquire", &PyEngine::try_acquire, py::arg("resource"), py::arg("limit"),
           py::arg("cost") = 1,
           "Decides whether `cost` units of `resource` (a str, bytes or an int id) fit in "
           "`limit` (a Limit, or a limit string such as '10/second', as ratewin.parse reads "
           "it; every method taking a limit takes either) now, and counts them if they do. "
           "Several limits ('10/second; 1000/day', or a list) are decided all or nothing, as "
           "try_acquire_all does; the Decision returned is the one that describes the outcome. cost=0 asks without counting. Returns a "
           "Decision. A rejection never touches the network; an admission with Redis makes "
           "one round trip, bounded by command_timeout. Raises ClosedError after close().")
      .def(
          "limiter",
          [](const PyEngine& e, ResourceArg resource, LimitArg limit) {
            return new PyLimiter(e, resource, to_limit(limit, "limit"));
          },
          py::arg("resource"), py::arg("limit"),
          "A Limiter: `resource` under `limit`, held (never evicted) while the Limiter is "
          "open, without the lookup on every call.")
      .def("reset", &PyEngine::reset, py::arg("resource"), py::arg("limit"),
           "Forgets what `resource` counted under `limit` (a Limit, a limit string, or "
           "several: each of them; and every limit of its scope and window): the shared counts in Redis and this engine's own. Returns False when "
           "Redis could not be reached (this engine's counts are gone all the same). Other "
           "engines keep what they had already read until it leaves their window.")
      .def("refund", &PyEngine::refund, py::arg("resource"), py::arg("limit"),
           py::arg("cost") = 1,
           "Gives back up to `cost` units counted for `resource` under `limit` (a Limit, a "
           "limit string, or several: under each), newest first, in Redis and in this engine; "
           "never below zero. Returns the units given back (with several limits, the least "
           "given back under any of them).")
      .def("try_acquire_all", &PyEngine::try_acquire_all, py::arg("resource"),
           py::arg("limits"), py::arg("cost") = 1,
           "All or nothing: admits `cost` units of `resource` only if every limit in "
           "`limits` (a Limit, a limit string such as '10/second; 1000/day', or an iterable of "
           "Limits and limit strings) admits them, and counts them against each; a "
           "refused request counts against none. Returns Decisions. Limits that refuse on "
           "this engine's own counts refuse without touching the network.")
      .def(
          "redis_key",
          [](const PyEngine& e, ResourceArg resource, LimitArg limit) -> py::object {
            const std::string key =
                e.engine()->store_key(to_resource(resource), to_limit(limit, "limit"));
            return key.empty() ? py::object(py::none()) : py::object(py::str(key));
          },
          py::arg("resource"), py::arg("limit"),
          "The Redis key that holds `resource`'s shared counts under `limit` (names are "
          "hashed into keys: this finds a name's key for redis-cli), or None in local mode.")
      .def("_try_acquire_all_async", &PyEngine::try_acquire_all_async, py::arg("resource"),
           py::arg("limits"), py::arg("cost"), py::arg("callback"),
           "The core of try_acquire_all_async: the Decisions now, or None and "
           "callback(Decisions) later on the engine's I/O thread.")
      .def("capacity", &PyEngine::capacity, py::arg("limit"),
           "How many limiters of `limit`'s window geometry the bounds (max_limiters, "
           "max_memory) hold, were they all of it: 0 when not even one fits.")
      .def("stats", &PyEngine::stats,
           "Counters since the engine started and its state now, as a Stats (durations in "
           "seconds; the store's figures are zero in local mode).")
      .def("flush", &PyEngine::flush,
           "Batched write mode: writes what this engine admitted and has not yet written, "
           "reads those limiters' windows back and renews their budgets, now rather than at "
           "the next flush interval. False when a write failed (its counts are kept for a "
           "later flush while they are in the window). True at once in sync or local mode.")
      .def("close", &PyEngine::close,
           "Closes the engine: stops its threads and connections (waiting at most for calls "
           "in flight to finish or time out). Idempotent. Limiters made from it keep working "
           "until they are closed too.")
      .def_property_readonly(
          "closed", [](const PyEngine& e) { return e.closed(); }, "Whether close() was called.")
      .def_property_readonly(
          "redis",
          [](const PyEngine& e) -> py::object {
            if (e.redis().empty()) return py::none();
            return py::str(e.redis());
          },
          "The Redis the engine shares limits through (its URL without the password), or "
          "None in local mode.")
      .def("__repr__", [](const PyEngine& e) {
        if (e.closed()) return std::string("<ratewin.Engine closed>");
        return "<ratewin.Engine " + (e.redis().empty() ? std::string("local") : e.redis()) + ">";
      });
  def_limiter(m);
  def_functions(m);
}

namespace {

// ratewin.Limiter, made by Engine.limiter().
void def_limiter(py::module_& m) {
  py::class_<PyLimiter> limiter_class(
      m, "Limiter",
      "One resource under one limit, from Engine.limiter(): no lookup per "
      "call, and never evicted while open. Thread-safe. A context manager.");
  def_context_manager(limiter_class, "limiter");
  limiter_class
      .def("try_acquire", &PyLimiter::try_acquire, py::arg("cost") = 1,
           "As Engine.try_acquire for this limiter's resource and limit. Raises "
           "ClosedError after close().")
      .def("close", &PyLimiter::close, "Releases the limiter. Idempotent.")
      .def_property_readonly(
          "closed", [](const PyLimiter& l) { return l.closed(); }, "Whether close() was called.")
      .def_property_readonly("resource", &PyLimiter::resource, "The resource's 64-bit id.")
      .def_property_readonly("limit", &PyLimiter::limit, "The Limit.")
      .def_property_readonly(
          "name", [](const PyLimiter& l) { return l.name(); },
          "The resource's name as given (a str or bytes), or None when it was an int id.")
      .def("__repr__", [](const PyLimiter& l) {
        const std::string resource = l.name().is_none()
                                         ? std::to_string(l.resource())
                                         : py::repr(l.name()).cast<std::string>();
        return "<ratewin.Limiter resource=" + resource + " " +
               py::repr(py::cast(l.limit())).cast<std::string>() + (l.closed() ? " closed>" : ">");
      });
}

// The module's functions: hash, and the package's and benchmarks' helpers.
void def_functions(py::module_& m) {
  m.def(
      "hash", [](ResourceArg name) { return to_resource(name); }, py::arg("name"),
      "The 64-bit resource id of a name: XXH3-64 (seed 0) of its UTF-8 bytes (or of the "
      "bytes given), the id every ratewin API and process computes for that name. An int "
      "is returned as it is.");

  m.def("_close_all", &close_all,
        "Closes every limiter and engine still open, and waits until they are deleted.");
  m.def(
      "_at_exit",
      [] {
        close_all();
        callbacks_stop();
      },
      "Registered with atexit by the package: closes what is still open while the "
      "engines' threads can still call back into Python, then stops those calls for "
      "good, as taking the GIL during finalization would unwind the thread that takes "
      "it.");

  m.def(
      "_cxx_loop",
      [](const PyEngine& engine, ResourceArg resource, const Limit& limit, std::uint64_t calls) {
        // The same call as try_acquire, made `calls` times from C++: the baseline for the
        // Python overhead figure. Returns nanoseconds per call.
        const std::uint64_t id = to_resource(resource);
        const std::shared_ptr<Engine> e = engine.engine();
        return without_gil([&] {
          std::uint64_t allowed = 0;
          const auto start = std::chrono::steady_clock::now();
          for (std::uint64_t i = 0; i < calls; ++i) {
            Decision d = e->try_acquire(id, limit, 1);
            asm volatile("" : : "r"(&d) : "memory");  // keep every decision
            allowed += d.allowed ? 1 : 0;
          }
          const auto took = std::chrono::steady_clock::now() - start;
          asm volatile("" : : "r"(allowed) : "memory");
          return static_cast<double>(std::chrono::nanoseconds(took).count()) /
                 static_cast<double>(calls == 0 ? 1 : calls);
        });
      },
      py::arg("engine"), py::arg("resource"), py::arg("limit"), py::arg("calls"),
      "Benchmark helper: nanoseconds per Engine.try_acquire made from C++ in a loop.");
}

}  // namespace

}  // namespace ratewin::python
