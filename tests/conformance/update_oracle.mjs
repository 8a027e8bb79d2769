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
import { clone, memoryStorage, oracleArgs, runCases, saveDataset, storedRows, writeResults } from './listing_oracle.mjs';

const { mode, paths, dataset, queries } = oracleArgs('update_oracle.mjs');
const outPath = paths[2];
const { storage, memoryStore } = await memoryStorage('update-oracle', 'file::memory:');
const messages = await saveDataset(memoryStore, dataset);

// The messages as then stored, in the given order (content parsed): what a later read of them gives.
async function stored(ids) {
  const byId = await storedRows(storage, ids);
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

// No contract patch: nothing updateMessages does depends on how ties in createdAt are broken.
const results = await runCases(queries, async (args) => {
  const returned = await memoryStore.updateMessages(clone(args));
  return { rows: await stored(returned.map((m) => m.id)) };
});
writeResults(outPath, 'update-oracle', mode, { messages: messages.length }, results);
