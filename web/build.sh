#!/usr/bin/env bash
# Builds RecallQL's offline GraphiQL page into web/static/build/ (git-ignored) from the pinned npm
# packages in package-lock.json: `npm ci`, then `npm run build`. Idempotent: does nothing when the
# build is newer than package.json, package-lock.json, this script and everything in frontend/.
# FORCE=1 rebuilds anyway. Needs Node.js >= 20 and npm; the server itself never needs them.
set -euo pipefail
cd "$(dirname "$0")"
stamp="static/build/.built"
if [ "${FORCE:-}" != 1 ] && [ -f "$stamp" ] && [ -f static/build/graphiql/index.html ] &&
  [ -z "$(find package.json package-lock.json build.sh frontend -newer "$stamp" -print -quit)" ]; then
  echo "web/build.sh: GraphiQL build is up to date" >&2
  exit 0
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "web/build.sh: npm (Node.js >= 20) is required to build the GraphiQL page, and it was not found." >&2
  echo "web/build.sh: install Node.js 20+ with npm (e.g. apt-get install nodejs npm) and run it again." >&2
  exit 1
fi
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || {
  echo "web/build.sh: Node.js >= 20 is required (found $(node --version))." >&2
  exit 1
}
echo "web/build.sh: installing the pinned packages (npm ci)" >&2
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
touch "$stamp"
