#!/usr/bin/env bash
# The main job: set up and build (cmd/setup.sh), then run the demo (cmd/demo.py): two
# ratewin-server instances sharing a private Redis, a burst of traffic over both, and a
# table of what was admitted against the configured limits.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/cmd/setup.sh"
exec /usr/bin/python3 "$root/cmd/demo.py" "$@"
