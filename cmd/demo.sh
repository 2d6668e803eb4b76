#!/usr/bin/env bash
# The main job: set up, build, and measure the decision path (ratewin-bench local).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/cmd/setup.sh"
exec "$root/build/cmd/ratewin-bench" local "$@"
