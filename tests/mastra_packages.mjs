// Loads Mastra's packages the way the conformance oracle does (../../shared/conformance/oracle.mjs): from
// RECALL_ORACLE_NODE_MODULES/node_modules (the oracle's package cache, installed by oracle.sh), or by bare
// specifier when that is unset. Shared by tests/mastra_fixture.mjs, tests/conformance/listing_oracle.mjs (the listing oracles) and
// the Mastra halves of the benchmarks.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export async function load(pkg) {
  const base = process.env.RECALL_ORACLE_NODE_MODULES;
  if (!base) return import(pkg);
  const pkgDir = join(base, 'node_modules', ...pkg.split('/'));
  const pj = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
  const dot = pj.exports?.['.'];
  const entry = (typeof dot === 'string' ? dot : dot?.import?.default ?? dot?.import ?? dot?.default) ?? pj.module ?? pj.main;
  return import(pathToFileURL(join(pkgDir, entry)).href);
}

// The installed version of a package, or null when it is loaded by bare specifier (or not found).
export function versionOf(pkg) {
  try {
    const base = process.env.RECALL_ORACLE_NODE_MODULES;
    if (!base) return null;
    return JSON.parse(readFileSync(join(base, 'node_modules', ...pkg.split('/'), 'package.json'), 'utf8')).version;
  } catch {
    return null;
  }
}
