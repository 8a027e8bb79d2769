#!/usr/bin/env bash
# RecallQL beside Mastra's HTTP memory API, with ../shared/peer-bench (same data, same core, ABBA order).
#   benchmarks/peer-compare.sh                  # one worker
#   RECALLQL_WORKERS=2 PIN=0 benchmarks/peer-compare.sh   # two workers, unpinned (both cores)
# Writes benchmarks/results/peer-<date>[-wN].md with the run's report. Takes about 5 minutes.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bench="$(cd "$repo/../shared/peer-bench" && pwd)"
"$repo/scripts/bootstrap"
out="$repo/benchmarks/results/peer-$(date -u +%Y-%m-%d)${RECALLQL_WORKERS:+-w$RECALLQL_WORKERS}.md"
export WAIT_QUIET="${WAIT_QUIET:-90}"
PEER_ENV="$repo/benchmarks/peer-bench/recallql.env" bash "$bench/run.sh" | tee "$out.tmp"
{ echo "# RecallQL vs Mastra (peer-bench) — $(date -u +%Y-%m-%d), workers ${RECALLQL_WORKERS:-1}"; echo; cat "$out.tmp"; } > "$out"
rm -f "$out.tmp"
echo "report: $out" >&2
