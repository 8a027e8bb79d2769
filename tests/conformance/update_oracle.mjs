#!/usr/bin/env node
// The real Mastra's updateMessages (LibSQL storage) over a conformance dataset: the oracle for RecallQL's
// updateMessages mutation.
//
//   RECALL_ORACLE_NODE_MODULES=<the recall oracle's package cache> node update_oracle.mjs DATASET QUERIES OUT
//
// QUERIES: [{name, args: {messages: [{id, ...changes}]}}], run one after another on one store (a later
// case sees an earlier one's changes). OUT: {results: [{name, ok, rows: [{id, threadId, resourceId, role,
// type, createdAt, content}]} | {name, ok: false, error}]}: the messages updateMessages returns, in its
// order, each as then stored (content parsed).
import { writeFileSync } from 'node:fs';

import { clone, memoryStorage, oracleArgs, saveDataset } from './listing_oracle.mjs';

const { mode, paths, dataset, queries } = oracleArgs('update_oracle.mjs');
const outPath = paths[2];
const { storage, memoryStore } = await memoryStorage('update-oracle', 'file::memory:');
const messages = await saveDataset(memoryStore, dataset);

// Rows as stored (content parsed): what a later read of them gives, whatever the call returned.
async function stored(ids) {
  if (!ids.length) return [];
  const rows = (await storage.client.execute({
    sql: `SELECT id, thread_id, "resourceId", role, type, "createdAt", content FROM mastra_messages WHERE id IN (${ids.map(() => '?').join(', ')})`,
    args: ids,
  })).rows;
  const byId = new Map(rows.map((r) => [r.id, r]));
  return ids.map((id) => byId.get(id)).filter(Boolean).map((r) => ({
    id: r.id,
    threadId: r.thread_id,
    resourceId: r.resourceId,
    role: r.role,
    type: r.type,
    createdAt: new Date(r.createdAt).toISOString(),
    content: JSON.parse(r.content),
  }));
}

const results = [];
for (const q of queries) {
  try {
    const returned = await memoryStore.updateMessages(clone(q.args));
    results.push({ name: q.name, ok: true, rows: await stored(returned.map((m) => m.id)) });
  } catch (err) {
    results.push({ name: q.name, ok: false, error: String(err?.message ?? err) });
  }
}
writeFileSync(outPath, JSON.stringify({ mode, messages: messages.length, results }, null, 1) + '\n');
process.stdout.write(`update-oracle: ${results.length} queries (${results.filter((r) => !r.ok).length} errors)\n`);
