#!/usr/bin/env node
// Mastra's in-process Memory.recall() latency on a dataset written by recall_http.py.
//
//   RECALL_ORACLE_NODE_MODULES=~/.cache/recall-oracle/<hash> \
//     node benchmarks/mastra_recall.mjs DATASET.json [--out OUT.json] [--calls 300] [--warmup 30]
//                                       [--max-seconds 60] [--storage file|memory]
//
// Loads @mastra/memory and @mastra/libsql exactly as the conformance oracle does
// (../shared/conformance/oracle.mjs): from RECALL_ORACLE_NODE_MODULES/node_modules, or by bare
// specifier when that is unset. A fresh LibSQLStore (a temp file by default, like RecallQL's SQLite
// file; --storage memory for file::memory:) gets the dataset's thread (memory.saveThread) and its
// messages straight into the storage domain (storage.getStore('memory').saveMessages, createdAt as a
// Date, in batches). Then each scenario's args go to memory.recall() `warmup` times untimed and up to
// `calls` times timed (bounded by --max-seconds per scenario).
//
// Dataset: {"memoryOptions", "thread": {...}, "messages": [...], "scenarios": [{"name", "args"}]}.
// Output (JSON, to --out or stdout): versions, load time, and per scenario n / p50Ms / p99Ms / meanMs / cpuMs
// with the last result's total, page, perPage, hasMore and message ids (for a cross-check).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { load, versionOf } from '../tests/mastra_packages.mjs';

function parseArgs(argv) {
  const opts = { dataset: null, out: '-', calls: 300, warmup: 30, maxSeconds: 60, storage: 'file' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--out') opts.out = next();
    else if (a === '--calls') opts.calls = Number(next());
    else if (a === '--warmup') opts.warmup = Number(next());
    else if (a === '--max-seconds') opts.maxSeconds = Number(next());
    else if (a === '--storage') opts.storage = next();
    else if (!opts.dataset) opts.dataset = a;
    else throw new Error(`unexpected argument ${a}`);
  }
  if (!opts.dataset) throw new Error('usage: node mastra_recall.mjs DATASET.json [--out OUT.json] [--calls N] [--warmup N]');
  if (opts.storage !== 'file' && opts.storage !== 'memory') throw new Error('--storage is file or memory');
  return opts;
}

function percentile(sorted, q) {
  // Nearest rank, as recall_http.py computes it.
  if (!sorted.length) return null;
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1];
}

const opts = parseArgs(process.argv.slice(2));
const dataset = JSON.parse(readFileSync(opts.dataset, 'utf8'));

const { Memory } = await load('@mastra/memory');
const { LibSQLStore } = await load('@mastra/libsql');

let tmp = null;
let url = 'file::memory:';
if (opts.storage === 'file') {
  tmp = mkdtempSync(join(tmpdir(), 'mastra-recall-bench-'));
  url = `file:${join(tmp, 'mastra.db')}`;
}

try {
  const storage = new LibSQLStore({ id: 'recall-bench', url });
  const memory = new Memory({ storage, options: dataset.memoryOptions ?? { lastMessages: 10, semanticRecall: false } });
  const memoryStore = await storage.getStore('memory');
  const sqliteVersion = (await storage.client.execute('SELECT sqlite_version() AS v')).rows[0]?.v ?? null;

  const t = dataset.thread;
  await memory.saveThread({
    thread: {
      id: t.id,
      resourceId: t.resourceId,
      title: t.title ?? '',
      metadata: t.metadata ?? {},
      createdAt: new Date(t.createdAt),
      updatedAt: new Date(t.createdAt),
    },
  });

  const loadStart = performance.now();
  const batch = 500;
  for (let i = 0; i < dataset.messages.length; i += batch) {
    const messages = dataset.messages.slice(i, i + batch).map((m) => ({ ...m, createdAt: new Date(m.createdAt) }));
    await memoryStore.saveMessages({ messages });
  }
  const loadMs = performance.now() - loadStart;

  const scenarios = [];
  for (const s of dataset.scenarios) {
    for (let i = 0; i < opts.warmup; i++) await memory.recall(structuredClone(s.args));
    const samples = [];
    let last = null;
    const deadline = performance.now() + opts.maxSeconds * 1000;
    const cpuStart = process.cpuUsage();
    while (samples.length < opts.calls && performance.now() < deadline) {
      const args = structuredClone(s.args);
      const start = performance.now();
      last = await memory.recall(args);
      samples.push(performance.now() - start);
    }
    const cpu = process.cpuUsage(cpuStart);
    const sorted = [...samples].sort((a, b) => a - b);
    scenarios.push({
      name: s.name,
      n: samples.length,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      meanMs: samples.reduce((a, b) => a + b, 0) / Math.max(1, samples.length),
      // CPU time of the whole Node process (all threads) per timed call.
      cpuMs: (cpu.user + cpu.system) / 1000 / Math.max(1, samples.length),
      total: last?.total ?? null,
      page: last?.page ?? null,
      perPage: last?.perPage ?? null,
      hasMore: last?.hasMore ?? null,
      ids: (last?.messages ?? []).map((m) => m.id),
    });
  }

  const out = {
    mastra: {
      core: versionOf('@mastra/core'),
      memory: versionOf('@mastra/memory'),
      libsql: versionOf('@mastra/libsql'),
    },
    node: process.version,
    sqlite: sqliteVersion,
    storage: opts.storage,
    messages: dataset.messages.length,
    loadMs,
    scenarios,
  };
  const text = JSON.stringify(out) + '\n';
  if (opts.out === '-') process.stdout.write(text);
  else writeFileSync(opts.out, text);
} finally {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}
process.exit(0);
