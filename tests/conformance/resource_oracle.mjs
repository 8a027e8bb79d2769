#!/usr/bin/env node
// The real Mastra's listMessagesByResourceId (LibSQL storage) over a conformance dataset: the oracle for
// RecallQL's Resource.messages. The recall oracle (../shared/conformance/oracle.mjs) runs recall only.
//
//   RECALL_ORACLE_NODE_MODULES=<the recall oracle's package cache> node resource_oracle.mjs DATASET QUERIES OUT
//
// DATASET: the generator's dataset (threads, messages; saved exactly as the recall oracle's storage mode
// saves them, so insertion order is dataset order). QUERIES: [{name, args}], args passed to
// listMessagesByResourceId as given (dateRange strings become Dates). OUT: {results: [{name, ok, ids,
// total, page, perPage, hasMore} | {name, ok: false, error}]}.
//
// Mastra orders by createdAt alone and leaves ties to SQLite's scan. ORACLE_MODE=contract (the default)
// uses the total order the recall contract uses everywhere, (createdAt, insertion sequence), reversed for
// DESC: in the page query (Mastra as published returns DESC ties in insertion order), in the include
// windows (the recall oracle's patch of _getIncludedMessages, whose windows can otherwise miss their own
// target) and in the returned list. ORACLE_MODE=mastra runs it as published.
import { readFileSync, writeFileSync } from 'node:fs';

import { load } from '../mastra_packages.mjs';

const [, , datasetPath, queriesPath, outPath] = process.argv;
if (!outPath) {
  process.stderr.write('usage: node resource_oracle.mjs DATASET.json QUERIES.json OUT.json\n');
  process.exit(2);
}
const mode = process.env.ORACLE_MODE || 'contract';
if (mode !== 'contract' && mode !== 'mastra') throw new Error(`unknown ORACLE_MODE ${mode}`);

const { LibSQLStore } = await load('@mastra/libsql');
const dataset = JSON.parse(readFileSync(datasetPath, 'utf8'));
const queries = JSON.parse(readFileSync(queriesPath, 'utf8'));
const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

const storage = new LibSQLStore({ id: 'resource-oracle', url: 'file::memory:' });
await storage.init();
const memoryStore = await storage.getStore('memory');

for (const t of dataset.threads ?? []) {
  await memoryStore.saveThread({
    thread: {
      id: t.id,
      resourceId: t.resourceId,
      title: t.title ?? '',
      metadata: clone(t.metadata),
      createdAt: new Date(t.createdAt ?? '2026-01-01T00:00:00.000Z'),
      updatedAt: new Date(t.updatedAt ?? t.createdAt ?? '2026-01-01T00:00:00.000Z'),
    },
  });
}
const messages = (dataset.messages ?? []).map((m) => {
  const c = clone(m);
  if (c.createdAt !== undefined && c.createdAt !== null) c.createdAt = new Date(c.createdAt);
  return c;
});
if (messages.length) await memoryStore.saveMessages({ messages });

// The page query is the only one ordered by createdAt; the tie-break goes after its direction.
const pageOrder = /ORDER BY "createdAt" (ASC|DESC) LIMIT/;
if (mode === 'contract') {
  // storage.client is a Proxy that queues calls and then runs the client's own execute: the method is
  // replaced on the client under it, and the replacement calls the class's original.
  const original = Object.getPrototypeOf(storage.client).execute;
  storage.client.execute = function (stmt, ...rest) {
    if (typeof stmt === 'object' && pageOrder.test(stmt.sql)) {
      stmt = { ...stmt, sql: stmt.sql.replace(pageOrder, (_, d) => `ORDER BY "createdAt" ${d}, rowid ${d} LIMIT`) };
    }
    return original.call(this, stmt, ...rest);
  };
}

// Insertion sequence of every stored message (SQLite rowid), for the contract's total order.
const seqOf = new Map((await storage.client.execute('SELECT id, rowid AS seq FROM mastra_messages')).rows.map((r) => [r.id, Number(r.seq)]));
function inTotalOrder(messages, direction) {
  const key = (m) => [new Date(m.createdAt).getTime(), seqOf.get(m.id) ?? Infinity];
  const sorted = [...messages].sort((a, b) => {
    const [ta, sa] = key(a), [tb, sb] = key(b);
    return ta - tb || sa - sb;
  });
  return direction === 'DESC' ? sorted.reverse() : sorted;
}

if (mode === 'contract') {
  // The recall oracle's contract _getIncludedMessages (../shared/conformance/oracle.mjs): windows in the
  // total order, the "previous" one always holding its target, inside the resource when one is given.
  memoryStore._getIncludedMessages = async function ({ include, resourceId }) {
    if (!include?.length) return null;
    const byRes = resourceId ? ' AND "resourceId" = ?' : '';
    const rows = new Map();
    for (const inc of include) {
      if (!inc?.id) continue;
      const t = (await storage.client.execute({
        sql: `SELECT rowid AS seq, thread_id, "createdAt" FROM mastra_messages WHERE id = ?${byRes}`,
        args: resourceId ? [inc.id, resourceId] : [inc.id],
      })).rows[0];
      if (!t) continue;
      const cols = 'rowid AS seq, id, content, role, type, "createdAt", thread_id, "resourceId"';
      const before = Math.max(0, inc.withPreviousMessages ?? 0);
      const after = Math.max(0, inc.withNextMessages ?? 0);
      const prev = await storage.client.execute({
        sql: `SELECT ${cols} FROM mastra_messages WHERE thread_id = ? AND ("createdAt" < ? OR ("createdAt" = ? AND rowid <= ?))${byRes}
              ORDER BY "createdAt" DESC, rowid DESC LIMIT ?`,
        args: [t.thread_id, t.createdAt, t.createdAt, t.seq, ...(resourceId ? [resourceId] : []), before + 1],
      });
      const next = after > 0 ? await storage.client.execute({
        sql: `SELECT ${cols} FROM mastra_messages WHERE thread_id = ? AND ("createdAt" > ? OR ("createdAt" = ? AND rowid > ?))${byRes}
              ORDER BY "createdAt" ASC, rowid ASC LIMIT ?`,
        args: [t.thread_id, t.createdAt, t.createdAt, t.seq, ...(resourceId ? [resourceId] : []), after],
      }) : { rows: [] };
      for (const r of [...prev.rows, ...next.rows]) if (!rows.has(r.id)) rows.set(r.id, r);
    }
    return inTotalOrder([...rows.values()], 'ASC').map((r) => this.parseRow(r));
  };
}

function prepareArgs(raw) {
  const args = clone(raw ?? {});
  const dr = args?.filter?.dateRange;
  if (dr && typeof dr === 'object') {
    for (const k of ['start', 'end']) if (typeof dr[k] === 'string') dr[k] = new Date(dr[k]);
  }
  return args;
}

const results = [];
for (const q of queries) {
  try {
    const args = prepareArgs(q.args);
    const r = await memoryStore.listMessagesByResourceId(args);
    if (mode === 'contract') r.messages = inTotalOrder(r.messages, args.orderBy?.direction ?? 'ASC');
    results.push({
      name: q.name,
      ok: true,
      ids: r.messages.map((m) => m.id),
      total: r.total,
      page: r.page,
      perPage: r.perPage,
      hasMore: r.hasMore,
    });
  } catch (err) {
    results.push({ name: q.name, ok: false, error: String(err?.message ?? err) });
  }
}
const text = JSON.stringify({ mode, messages: messages.length, results }, null, 1) + '\n';
writeFileSync(outPath, text);
process.stdout.write(`resource-oracle: ${results.length} queries (${results.filter((r) => !r.ok).length} errors)\n`);
