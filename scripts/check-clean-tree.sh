#!/usr/bin/env bash
# Fails when the checkout has changed since a snapshot: a test wrote into the source tree.
#   scripts/check-clean-tree.sh snapshot FILE     record `git status --porcelain` into FILE
#   scripts/check-clean-tree.sh check FILE WHAT   fail (exit 1), naming WHAT and each path, when
#                                                 the status differs from FILE's
# .ci/run takes the snapshot on its fresh clone (where it is empty) and checks after `make test`
# and after `make e2e`. Git-ignored build outputs (.venv/, build/) do not show; anything else a
# test leaves (an untracked file, a changed tracked one) does. FILE belongs outside the checkout.
set -euo pipefail
mode=${1:?snapshot|check}; file=${2:?snapshot file}
root=$(git rev-parse --show-toplevel)
status() { git -C "$root" status --porcelain=v1 --untracked-files=all; }
case "$mode" in
    snapshot) status > "$file" ;;
    check)
        what=${3:-the tests}
        now=$(status)
        if [[ "$now" != "$(cat "$file")" ]]; then
            echo "check-clean-tree: $what changed the source tree (git status --porcelain):" >&2
            diff <(cat "$file") <(echo "$now") | sed -n 's/^> /  /p' >&2
            diff <(cat "$file") <(echo "$now") | sed -n 's/^< /  no longer: /p' >&2
            exit 1
        fi
        echo "check-clean-tree: tree unchanged after $what" ;;
    *) echo "check-clean-tree: unknown mode $mode" >&2; exit 2 ;;
esac
