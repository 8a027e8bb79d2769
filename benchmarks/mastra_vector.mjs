#!/usr/bin/env node
// Mastra's Memory.recall() with semantic recall (LibSQLVector + LibSQLStore) on a dataset written by
// semantic_bench.py.
//
//   RECALL_ORACLE_NODE_MODULES=~/.cache/recall-oracle/<hash> \
//     node benchmarks/mastra_vector.mjs DIR [--out OUT.json] [--calls 300] [--warmup 10]
//                                       [--max-seconds 60] [--storage file|memory]
//                                       [--vector-url file::memory:|file|URL] [--diskann]
//
// DIR holds meta.json ({dim, texts, messages: [[id, threadId, resourceId, role, createdAtMs, textIdx]],
// threads: [[id, resourceId]], queries: {resource: [...], thread: [...]}, each query {text, resourceId,
// threadId, vector}) and vectors.f32 (one little-endian float32 vector per message, in message order).
//
// Packages are loaded as the conformance oracle loads them (../shared/conformance/oracle.mjs). The embedder
// is a fake AI SDK v2 EmbeddingModel that answers from the precomputed query vectors, so only Mastra's own
// work is timed (its embedding cache, createEmbeddingIndex, LibSQLVector.query, listMessages with include).
//
// Vectors go into LibSQLVector's own table (same DDL and rows as LibSQLVector.createIndex/upsert write:
// vector32(json), metadata as Memory.saveMessages writes it) with plain SQL batches. With its libsql DiskANN
// index, LibSQLVector inserts about 60 vectors/s on a 2-core machine, so 100k vectors would take half an
// hour. Unless --diskann, the index name `<table>_vector_idx` is therefore taken by a plain B-tree index
// before Memory first runs createIndex (CREATE INDEX IF NOT EXISTS, a no-op then). On file::memory: (the
// default, as in the oracle) LibSQLVector.query never uses that index: it always scans, so the measured
// read path is Mastra's. On a file URL without --diskann the query would try vector_top_k on the
// placeholder and fall back to the scan; use --diskann there (small sizes only). `--vector-url file`
// means a temp file (removed afterwards), like --storage file.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { load, versionOf } from '../tests/mastra_packages.mjs';

function parseArgs(argv) {
  const opts = {
    dir: null,
    out: '-',
    calls: 300,
    warmup: 10,
    maxSeconds: 60,
    storage: 'file',
    vectorUrl: 'file::memory:',
    diskann: false,
  };
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
    else if (a === '--vector-url') opts.vectorUrl = next();
    else if (a === '--diskann') opts.diskann = true;
    else if (!opts.dir) opts.dir = a;
    else throw new Error(`unexpected argument ${a}`);
  }
  if (!opts.dir) throw new Error('usage: node mastra_vector.mjs DIR [--out OUT.json] [--calls N] [--warmup N]');
  if (opts.storage !== 'file' && opts.storage !== 'memory') throw new Error('--storage is file or memory');
  return opts;
}

function percentile(sorted, q) {
  // Nearest rank, as semantic_bench.py computes it.
  if (!sorted.length) return null;
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1];
}

const iso = (ms) => new Date(ms).toISOString();

const opts = parseArgs(process.argv.slice(2));
const meta = JSON.parse(readFileSync(join(opts.dir, 'meta.json'), 'utf8'));
const dim = meta.dim;
const raw = readFileSync(join(opts.dir, 'vectors.f32'));
const vectors = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
if (vectors.length !== meta.messages.length * dim) throw new Error('vectors.f32 does not match meta.json');

const { Memory } = await load('@mastra/memory');
const { LibSQLStore, LibSQLVector } = await load('@mastra/libsql');

// An AI SDK v2 EmbeddingModel (what Memory's embedder option takes) answering from precomputed vectors.
const queryVectors = new Map();
for (const group of [meta.queries, meta.warmupQueries ?? {}]) {
  for (const list of Object.values(group)) for (const q of list) queryVectors.set(q.text, q.vector);
}
let embedCalls = 0;
const embedder = {
  specificationVersion: 'v2',
  provider: 'precomputed.embedding',
  modelId: 'all-MiniLM-L6-v2',
  maxEmbeddingsPerCall: 2048,
  supportsParallelCalls: false,
  async doEmbed({ values }) {
    embedCalls++;
    return {
      embeddings: values.map((v) => {
        const vec = queryVectors.get(v);
        if (!vec) throw new Error(`no precomputed vector for ${JSON.stringify(v)}`);
        return vec;
      }),
    };
  },
};

let tmp = null;
let storageUrl = 'file::memory:';
if (opts.storage === 'file') {
  tmp = mkdtempSync(join(tmpdir(), 'mastra-vector-bench-'));
  storageUrl = `file:${join(tmp, 'mastra.db')}`;
}
let vectorUrl = opts.vectorUrl;
if (vectorUrl === 'file') {
  tmp ??= mkdtempSync(join(tmpdir(), 'mastra-vector-bench-'));
  vectorUrl = `file:${join(tmp, 'vectors.db')}`;
}

try {
  const storage = new LibSQLStore({ id: 'semantic-bench', url: storageUrl });
  const vector = new LibSQLVector({ id: 'semantic-bench-vector', url: vectorUrl });
  const memoryStore = await storage.getStore('memory');
  const memory = new Memory({ storage, vector, embedder, options: { lastMessages: 10, semanticRecall: false } });
  const sqliteVersion = (await storage.client.execute('SELECT sqlite_version() AS v')).rows[0]?.v ?? null;
  const texts = meta.texts;

  // Threads, then messages straight into the storage domain (as benchmarks/mastra_recall.mjs does).
  const threadsStart = performance.now();
  for (const [id, resourceId] of meta.threads) {
    const at = new Date(meta.baseMs - 60_000);
    await memory.saveThread({ thread: { id, resourceId, title: '', metadata: {}, createdAt: at, updatedAt: at } });
  }
  const threadsMs = performance.now() - threadsStart;

  const messagesStart = performance.now();
  const batch = 1000;
  for (let i = 0; i < meta.messages.length; i += batch) {
    const messages = meta.messages.slice(i, i + batch).map(([id, threadId, resourceId, role, createdAt, t]) => ({
      id,
      threadId,
      resourceId,
      role,
      type: 'v2',
      createdAt: new Date(createdAt),
      content: { format: 2, parts: [{ type: 'text', text: texts[t] }] },
    }));
    await memoryStore.saveMessages({ messages });
  }
  const messagesMs = performance.now() - messagesStart;

  // Vectors: the index Memory uses for this dimension, with the rows Memory.saveMessages would write.
  const indexName = dim === 1536 ? 'memory_messages' : `memory_messages_${dim}`;
  const vectorsStart = performance.now();
  if (opts.diskann) {
    await vector.createIndex({ indexName, dimension: dim, metadataIndexes: ['thread_id', 'resource_id'] });
  } else {
    await vector.turso.execute(`CREATE TABLE IF NOT EXISTS ${indexName} (
            id SERIAL PRIMARY KEY,
            vector_id TEXT UNIQUE NOT NULL,
            embedding F32_BLOB(${dim}),
            metadata TEXT DEFAULT '{}'
          )`);
    await vector.turso.execute(`CREATE INDEX IF NOT EXISTS ${indexName}_vector_idx ON ${indexName} (vector_id)`);
  }
  const insert = `INSERT INTO ${indexName} (vector_id, embedding, metadata) VALUES (?, vector32(?), ?)`;
  const vbatch = opts.diskann ? 200 : 5000;
  for (let i = 0; i < meta.messages.length; i += vbatch) {
    const stmts = [];
    for (let k = i; k < Math.min(i + vbatch, meta.messages.length); k++) {
      const [id, threadId, resourceId, role, createdAt, t] = meta.messages[k];
      const vec = Array.from(vectors.subarray(k * dim, (k + 1) * dim));
      const metadata = {
        message_id: id,
        thread_id: threadId,
        resource_id: resourceId,
        role,
        content: texts[t],
        created_at: iso(createdAt),
      };
      stmts.push({ sql: insert, args: [crypto.randomUUID(), JSON.stringify(vec), JSON.stringify(metadata)] });
    }
    await vector.turso.batch(stmts, 'write');
  }
  const vectorsMs = performance.now() - vectorsStart;

  const scenarios = [];
  for (const [scope, queries] of Object.entries(meta.queries)) {
    const call = (q) =>
      memory.recall({
        threadId: q.threadId,
        resourceId: q.resourceId,
        vectorSearchString: q.text,
        threadConfig: { semanticRecall: { topK: 4, messageRange: 1, scope } },
      });
    const warm = meta.warmupQueries?.[scope] ?? [];
    for (const q of warm.slice(0, opts.warmup)) await call(q);
    const samples = [];
    const results = [];
    const deadline = performance.now() + opts.maxSeconds * 1000;
    for (const q of queries) {
      if (samples.length >= opts.calls || performance.now() > deadline) break;
      const start = performance.now();
      const out = await call(q);
      samples.push(performance.now() - start);
      results.push(out.messages.map((m) => m.id));
    }
    const sorted = [...samples].sort((a, b) => a - b);
    scenarios.push({
      scope,
      n: samples.length,
      p50Ms: percentile(sorted, 0.5),
      p95Ms: percentile(sorted, 0.95),
      p99Ms: percentile(sorted, 0.99),
      meanMs: samples.reduce((a, b) => a + b, 0) / Math.max(1, samples.length),
      capped: samples.length < Math.min(opts.calls, queries.length),
      results,
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
    vectorUrl: opts.vectorUrl,
    diskann: opts.diskann,
    messages: meta.messages.length,
    threads: meta.threads.length,
    threadsMs,
    messagesMs,
    vectorsMs,
    embedCalls,
    scenarios,
  };
  const text = JSON.stringify(out) + '\n';
  if (opts.out === '-') process.stdout.write(text);
  else writeFileSync(opts.out, text);
} finally {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}
process.exit(0);
