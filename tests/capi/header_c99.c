/* ratewin.h is C99: this file includes it under -std=c99 -pedantic -Werror and uses
 * every struct, so a C11 or GNU construct slipping into the header fails the build. */
#include <ratewin.h>

int ratewin_header_c99_check(void);

int ratewin_header_c99_check(void) {
  ratewin_options options;
  ratewin_limit_options limit_options;
  ratewin_decision decision;
  ratewin_stats stats;
  ratewin_acquisition acquisition;
  ratewin_tls_options tls;
  ratewin_clock_fn clock = 0;
  ratewin_log_fn logger = 0;
  ratewin_acquire_fn done = 0;
  options.size = sizeof options;
  limit_options.size = sizeof limit_options;
  decision.size = sizeof decision;
  stats.size = sizeof stats;
  acquisition.size = sizeof acquisition;
  tls.size = sizeof tls;
  (void)clock;
  (void)logger;
  (void)done;
  return (int)(options.size + limit_options.size + decision.size + stats.size +
               acquisition.size + tls.size) > 0 &&
         RATEWIN_VERSION_HEX > 0 && RATEWIN_NEVER > 0;
}
