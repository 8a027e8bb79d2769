#!/usr/bin/env node
// The real Mastra's cloneThread (LibSQL storage: copyThread, then the copies listed oldest first) over a
// conformance dataset: the oracle for RecallQL's cloneThread mutation.
//
//   RECALL_ORACLE_NODE_MODULES=<the recall oracle's package cache> node clone_oracle.mjs DATASET QUERIES OUT
//
// QUERIES: [{name, args}], run one after another on one store (a later case may clone an earlier clone),
// args passed to cloneThread as given (filter dates as strings, as Mastra's copyThread takes them too).
// OUT: {results: [{name, ok, thread: {id, resourceId, title, metadata}, copied, cloned, sameRows} |
// {name, ok: false, error}]}: `copied` the copied messages in the id map's order and `cloned` the clone's
// listed messages, each named by the dataset message it descends from (a copy of a copy by the
// original, as is metadata.clone.lastMessageId); `sameRows`: every copy holds its source's role, type, createdAt and content, under the
// clone's thread and resource. metadata.clone.clonedAt (the time of the call) is left out.
//
// Mastra selects the copies `ORDER BY "createdAt"` alone (DESC, LIMIT, then ASC with a messageLimit),
// leaving ties to SQLite. ORACLE_MODE=contract (the default) breaks them by insertion order (rowid), the
// contract's total order, which decides which of several messages of one instant a messageLimit keeps
// and the order the copies are written in. ORACLE_MODE=mastra runs it as published.
import { clone, memoryStorage, oracleArgs, rewriteSql, runCases, saveDataset, storedRows, writeResults } from './listing_oracle.mjs';

const { mode, paths, dataset, queries } = oracleArgs('clone_oracle.mjs');
const outPath = paths[2];
const { storage, memoryStore } = await memoryStorage('clone-oracle', 'file::memory:');

const messages = await saveDataset(memoryStore, dataset);

// copyThread's selection of the messages to copy (alone, or inside its messageLimit form).
const selection = /SELECT id, "createdAt"(\s+FROM "mastra_messages" WHERE thread_id = \?)/;
if (mode === 'contract') {
  // Its rows carry their rowid, and each of its ORDER BY "createdAt" breaks ties by it (the outer one of
  // the messageLimit form orders the inner one's rows by their seq).
  rewriteSql(storage, (sql) => {
    if (!selection.test(sql)) return sql;
    return sql
      .replace(selection, 'SELECT id, "createdAt", rowid AS seq$1')
      .replace(/ORDER BY "createdAt" (ASC|DESC)/g, (_, d) => `ORDER BY "createdAt" ${d}, seq ${d}`);
  });
}

// Each message's dataset origin: a dataset message is its own; a copy, its source's.
const origin = new Map((dataset.messages ?? []).map((m) => [m.id, m.id]));
const rowsOf = (ids) => storedRows(storage, ids);
const results = await runCases(queries, async (args) => {
  const r = await memoryStore.cloneThread(clone(args));
  const map = Object.entries(r.messageIdMap ?? {});
  for (const [source, copy] of map) origin.set(copy, origin.get(source) ?? source);
  const sources = await rowsOf(map.map(([source]) => source));
  const copies = await rowsOf(map.map(([, copy]) => copy));
  const sameRows = map.every(([source, copy]) => {
    const s = sources.get(source), c = copies.get(copy);
    return Boolean(s && c) && s.role === c.role && s.type === c.type && c.thread_id === r.thread.id
      && c.resourceId === r.thread.resourceId && s.createdAt === c.createdAt && s.content === c.content;
  });
  const { clonedAt, ...cloneMeta } = r.thread.metadata?.clone ?? {};
  if (cloneMeta.lastMessageId !== undefined) cloneMeta.lastMessageId = origin.get(cloneMeta.lastMessageId) ?? cloneMeta.lastMessageId;
  return {
    thread: {
      id: r.thread.id,
      resourceId: r.thread.resourceId,
      title: r.thread.title,
      metadata: { ...r.thread.metadata, clone: cloneMeta },
    },
    clonedAtIsSet: clonedAt !== undefined,
    copied: map.map(([source]) => origin.get(source) ?? source),
    cloned: (r.clonedMessages ?? []).map((m) => origin.get(m.id) ?? m.id),
    sameRows,
  };
});
writeResults(outPath, 'clone-oracle', mode, { messages: messages.length }, results);
