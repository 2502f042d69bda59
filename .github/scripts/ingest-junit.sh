#!/usr/bin/env bash
# Ingest every JUnit artifact of a run into the test history (`python -m ci history ingest`), one
# call per artifact, as download-artifact lays them out: reports/junit-<tier>-<i>-of-<n>/*.xml (a
# shard), reports/junit-<tier>-<anything else>/*.xml (no shard: the quarantined run, a rerun).
# Tier names are identifiers, so the first '-' after "junit-" ends the tier. An artifact may hold
# runner.txt, the name of the machine that ran it (its first line, at most 200 bytes), and
# depmap-*.json, the runtime dependency map the shard recorded (`ci run --record-depmap`): it is
# ingested in the same call, with the same identity. A map in an UNSCORED=1 artifact (a pull
# request's code wrote it) is never ingested: a warning names it and the JUnit is ingested alone.
#
# The run's identity comes from the environment: REPO, SHA, EVENT, RUN_URL and STORE (a
# PostgreSQL URL or an SQLite path) are required; PR, AUTHOR, BASE_SHA, BATCH and HEAD_REF (a
# merge_group run's pull requests and the queue's ref naming its last) are passed when set, and
# UNSCORED=1 marks JUnit written by code nobody has reviewed yet (a pull request's): it serves that
# run's verdicts and never a flakiness score, a quarantine or a runner's record. The run id and
# attempt are ingest's defaults, GitHub's $GITHUB_RUN_ID and $GITHUB_RUN_ATTEMPT. REPORTS is the
# folder (default: reports). A report or map ingest refuses writes nothing of its artifact; the
# other artifacts are still ingested, and the script then exits with the first failure's status
# (2 bad input, 3 the store).
set -euo pipefail
shopt -s nullglob
: "${REPO:?}" "${SHA:?}" "${EVENT:?}" "${STORE:?}"
extra=()
if [ -n "${PR:-}" ]; then extra+=(--pr "$PR"); fi
if [ -n "${AUTHOR:-}" ]; then extra+=(--author "$AUTHOR"); fi
if [ -n "${BASE_SHA:-}" ]; then extra+=(--base-sha "$BASE_SHA"); fi
if [ -n "${BATCH:-}" ]; then extra+=(--batch "$BATCH"); fi
if [ -n "${HEAD_REF:-}" ]; then extra+=(--head-ref "$HEAD_REF"); fi
if [ "${UNSCORED:-}" = 1 ]; then extra+=(--unscored); fi
failed=0
for dir in "${REPORTS:-reports}"/junit-*/; do
  name="$(basename "$dir")"; name="${name#junit-}"
  tier="${name%%-*}"; part="${name#"$tier"}"; part="${part#-}"
  case "$part" in
    *-of-*) shard="${part%%-of-*}/${part##*-of-}" ;;
    *) shard="" ;;
  esac
  reports=("$dir"*.xml)
  if [ "${#reports[@]}" -eq 0 ]; then continue; fi
  maps=("$dir"depmap-*.json)
  if [ "${UNSCORED:-}" = 1 ] && [ "${#maps[@]}" -gt 0 ]; then
    echo "::warning::not ingesting ${maps[*]}: a dependency map of unreviewed code is never stored"
    maps=()
  fi
  runner=""
  if [ -f "${dir}runner.txt" ]; then runner="$(head -c 200 "${dir}runner.txt" | head -n 1 | tr -d '\r\0')"; fi
  rc=0
  python3 -m ci history ingest "${reports[@]}" "${maps[@]}" --repo "$REPO" --sha "$SHA" --event "$EVENT" \
    --tier "$tier" --shard "$shard" --runner "$runner" --run-url "${RUN_URL:-}" --store "$STORE" "${extra[@]}" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=$rc; fi
done
exit "$failed"
