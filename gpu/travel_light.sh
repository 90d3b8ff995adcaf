#!/usr/bin/env bash
# The tracked tree (test data, published traces, the gallery) is larger than the 64 MiB a device
# call carries. `gpu/travel_light.sh on` takes the folders a GPU run does not read out of the index
# and ignores them (the files stay on disk), so that only the code and .device-carry travel;
# `gpu/travel_light.sh off` restores the index and the ignore list. Commit nothing in between.
set -euo pipefail
cd "$(dirname "$0")/.."
FOLDERS=(fixtures gallery tests docs benchmarks tools)
SAVED=.git/info/exclude.before-travel-light
case "${1:-}" in
  on)
    [ -e "$SAVED" ] && { echo "already on (remove $SAVED only after 'off')"; exit 2; }
    git diff --cached --quiet || { echo "the index holds staged changes: commit or unstage them first"; exit 2; }
    cp .git/info/exclude "$SAVED"
    git rm -r -q --cached "${FOLDERS[@]}"
    printf '/%s/\n' "${FOLDERS[@]}" >> .git/info/exclude
    git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {printf "tracked now: %.1f MiB\n", s / 1048576}'
    ;;
  off)
    [ -e "$SAVED" ] || { echo "not on"; exit 2; }
    git reset -q -- "${FOLDERS[@]}"
    mv "$SAVED" .git/info/exclude
    git status --short | head
    ;;
  *) echo "usage: gpu/travel_light.sh on|off"; exit 2 ;;
esac
