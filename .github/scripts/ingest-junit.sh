#!/usr/bin/env bash
# Ingest every JUnit artifact of a run into the test history (`python -m ci history ingest`), one
# call per artifact, as download-artifact lays them out: reports/junit-<tier>-<i>-of-<n>/*.xml (a
# shard), reports/junit-<tier>-<anything else>/*.xml (no shard: the quarantined run, a rerun).
# Tier names are identifiers, so the first '-' after "junit-" ends the tier. An artifact may hold
# runner.txt, the name of the machine that ran it (its first line, at most 200 bytes).
#
# The run's identity comes from the environment: REPO, SHA, EVENT, RUN_URL and STORE (a
# PostgreSQL URL or an SQLite path) are required; PR, AUTHOR, BASE_SHA are passed when set, and
# UNSCORED=1 marks JUnit written by code nobody has reviewed yet (a pull request's): it serves that
# run's verdicts and never a flakiness score, a quarantine or a runner's record. The run id and
# attempt are ingest's defaults, GitHub's $GITHUB_RUN_ID and $GITHUB_RUN_ATTEMPT. REPORTS is the
# folder (default: reports). A report ingest refuses fails the script (exit 2, nothing written).
set -euo pipefail
shopt -s nullglob
: "${REPO:?}" "${SHA:?}" "${EVENT:?}" "${STORE:?}"
extra=()
if [ -n "${PR:-}" ]; then extra+=(--pr "$PR"); fi
if [ -n "${AUTHOR:-}" ]; then extra+=(--author "$AUTHOR"); fi
if [ -n "${BASE_SHA:-}" ]; then extra+=(--base-sha "$BASE_SHA"); fi
if [ "${UNSCORED:-}" = 1 ]; then extra+=(--unscored); fi
for dir in "${REPORTS:-reports}"/junit-*/; do
  name="$(basename "$dir")"; name="${name#junit-}"
  tier="${name%%-*}"; part="${name#"$tier"}"; part="${part#-}"
  case "$part" in
    *-of-*) shard="${part%%-of-*}/${part##*-of-}" ;;
    *) shard="" ;;
  esac
  reports=("$dir"*.xml)
  if [ "${#reports[@]}" -eq 0 ]; then continue; fi
  runner=""
  if [ -f "${dir}runner.txt" ]; then runner="$(head -c 200 "${dir}runner.txt" | head -n 1 | tr -d '\r\0')"; fi
  python3 -m ci history ingest "${reports[@]}" --repo "$REPO" --sha "$SHA" --event "$EVENT" \
    --tier "$tier" --shard "$shard" --runner "$runner" --run-url "${RUN_URL:-}" --store "$STORE" "${extra[@]}"
done
