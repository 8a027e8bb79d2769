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
import { clone, memoryStorage, oracleArgs, rewriteSql, runQueries, saveDataset, writeResults } from './listing_oracle.mjs';

const { mode, paths, dataset, queries } = oracleArgs('resource_oracle.mjs');
const outPath = paths[2];
const { storage, memoryStore } = await memoryStorage('resource-oracle', 'file::memory:');

const messages = await saveDataset(memoryStore, dataset);

// The page query is the only one ordered by createdAt; the tie-break goes after its direction.
const pageOrder = /ORDER BY "createdAt" (ASC|DESC) LIMIT/;
if (mode === 'contract') rewriteSql(storage, (sql) => sql.replace(pageOrder, (_, d) => `ORDER BY "createdAt" ${d}, rowid ${d} LIMIT`));

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

const results = await runQueries(queries, async (raw) => {
  const args = prepareArgs(raw);
  const r = await memoryStore.listMessagesByResourceId(args);
  const rows = mode === 'contract' ? inTotalOrder(r.messages, args.orderBy?.direction ?? 'ASC') : r.messages;
  return { ...r, rows };
});
writeResults(outPath, 'resource-oracle', mode, { messages: messages.length }, results);
