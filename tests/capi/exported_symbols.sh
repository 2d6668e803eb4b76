#!/usr/bin/env bash
# libratewin.so exports the C API and nothing else: every defined dynamic symbol is a
# ratewin_* function of a version node RATEWIN_<major> or RATEWIN_<major>.<minor> (plus
# the nodes themselves), and every function ratewin.h declares is among them.
#   exported_symbols.sh <libratewin.so.N> <ratewin.h> <major>
set -euo pipefail
library="$1" header="$2" major="$3"
version="RATEWIN_$major(\\.[0-9]+)?"

symbols="$(nm -D --defined-only --with-symbol-versions "$library" | awk '{print $2, $3}')"
bad="$(grep -Ev "^(T ratewin_[a-z0-9_]+@@$version|A $version)\$" <<<"$symbols" || true)"
if [[ -n "$bad" ]]; then
  echo "exported_symbols: $library exports symbols outside the C API:"
  echo "$bad"
  exit 1
fi
exported="$(sed -n 's/^T \(ratewin_[a-z0-9_]*\)@@.*/\1/p' <<<"$symbols" | sort)"
declared="$(grep -Eo '\bratewin_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u)"
missing="$(comm -13 <(echo "$exported") <(echo "$declared"))"
undeclared="$(comm -23 <(echo "$exported") <(echo "$declared"))"
if [[ -n "$missing" || -n "$undeclared" ]]; then
  echo "exported_symbols: declared in ratewin.h but not exported: ${missing:-none}"
  echo "exported_symbols: exported but not declared in ratewin.h: ${undeclared:-none}"
  exit 1
fi
echo "exported_symbols: $(wc -l <<<"$exported") ratewin_* functions of RATEWIN_$major, nothing else"
