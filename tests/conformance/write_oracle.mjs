#!/usr/bin/env node
// The real Mastra's writes over a conformance dataset, one after another on one store: the oracle for
// RecallQL's createThread, saveMessages, updateThread, updateThreadResourceId, deleteMessages and
// deleteThread mutations.
//
//   RECALL_ORACLE_NODE_MODULES=<the recall oracle's package cache> node write_oracle.mjs DATASET QUERIES OUT
//
// QUERIES: [{name, args: {op, ...}}] with op one of
//   createThread    {id, resourceId, title?, metadata?, createdAt}: Memory.saveThread (a new id);
//   save            {messages}: the LibSQL store's saveMessages (the contract's row 6: RecallQL stores
//                   every message as given, as Mastra's storage layer does, not as Memory.saveMessages
//                   rewrites them);
//   updateThread    {id, title?, metadata?}: Memory.updateThread (patchThread);
//   transfer        {threadId, resourceId}: Memory.updateThreadResourceId (no vector store: the thread
//                   and the messages filed under it take the resource);
//   deleteMessages  {ids}: Memory.deleteMessages (its checks, then the store's);
//   deleteThread    {id}: Memory.deleteThread.
// OUT: {results: [{name, ok, returned, threads, messages} | {name, ok: false, error}]}: what the call
// returned (save: the messages' ids in order; createThread, updateThread, transfer: the thread's id,
// resourceId, title, metadata), then every thread as stored ({id, resourceId, title, metadata,
// createdAt, touched: whether this call moved its updatedAt}) and every message ({id, threadId,
// resourceId, role, type, createdAt, content}), by id.
import { clone, memoryStorage, oracleArgs, runCases, saveDataset, writeResults } from './listing_oracle.mjs';
import { load } from '../mastra_packages.mjs';

const { mode, paths, dataset, queries } = oracleArgs('write_oracle.mjs');
const outPath = paths[2];
const { storage, memoryStore } = await memoryStorage('write-oracle', 'file::memory:');
const { Memory } = await load('@mastra/memory');
const memory = new Memory({ storage });
const messages = await saveDataset(memoryStore, dataset);

const iso = (v) => new Date(v).toISOString();
const json = (v) => (typeof v === 'string' ? JSON.parse(v) : v ?? null);

async function threadRows() {
  const rows = (await storage.client.execute(
    'SELECT id, "resourceId", title, json(metadata) AS metadata, "createdAt", "updatedAt" FROM mastra_threads ORDER BY id',
  )).rows;
  return rows.map((r) => ({
    id: r.id,
    resourceId: r.resourceId,
    title: r.title,
    metadata: json(r.metadata),
    createdAt: iso(r.createdAt),
    updatedAt: iso(r.updatedAt),
  }));
}

async function messageRows() {
  const rows = (await storage.client.execute(
    'SELECT id, thread_id, "resourceId", role, type, "createdAt", content FROM mastra_messages ORDER BY id',
  )).rows;
  return rows.map((r) => ({
    id: r.id,
    threadId: r.thread_id,
    resourceId: r.resourceId,
    role: r.role,
    type: r.type,
    createdAt: iso(r.createdAt),
    content: json(r.content),
  }));
}

const run = {
  async createThread({ id, resourceId, title, metadata, createdAt }) {
    const when = new Date(createdAt);
    const thread = { id, resourceId, title, metadata: clone(metadata), createdAt: when, updatedAt: when };
    const t = await memory.saveThread({ thread });
    return { id: t.id, resourceId: t.resourceId, title: t.title ?? null, metadata: t.metadata ?? null };
  },
  async save({ messages: given }) {
    const batch = clone(given).map((m) => ({ ...m, createdAt: new Date(m.createdAt) }));
    const { messages: saved } = await memoryStore.saveMessages({ messages: batch });
    return saved.map((m) => m.id);
  },
  async updateThread({ id, title, metadata }) {
    const t = await memory.updateThread({ id, title, metadata: clone(metadata) });
    return { id: t.id, resourceId: t.resourceId, title: t.title, metadata: t.metadata ?? null };
  },
  async transfer({ threadId, resourceId }) {
    const t = await memory.updateThreadResourceId({ threadId, resourceId });
    return { id: t.id, resourceId: t.resourceId, title: t.title, metadata: t.metadata ?? null };
  },
  async deleteMessages({ ids }) {
    await memory.deleteMessages(clone(ids));
    return null;
  },
  async deleteThread({ id }) {
    await memory.deleteThread(id);
    return null;
  },
};

const results = await runCases(queries, async ({ op, ...args }) => {
  const before = new Map((await threadRows()).map((t) => [t.id, t.updatedAt]));
  // updatedAt has millisecond precision: a call in the same millisecond as the last would leave it
  // unchanged, and a write would look like none.
  await new Promise((resolve) => setTimeout(resolve, 3));
  const returned = await run[op](args);
  const threads = (await threadRows()).map(({ updatedAt, ...t }) => ({
    ...t,
    touched: before.has(t.id) && before.get(t.id) !== updatedAt,
  }));
  return { returned, threads, messages: await messageRows() };
});
writeResults(outPath, 'write-oracle', mode, { messages: messages.length }, results);
