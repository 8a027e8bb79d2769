#!/usr/bin/env node
// The real Mastra's listThreads (LibSQL storage) over a dataset of threads: the oracle for RecallQL's
// threads listing (Query.threads, Resource.threads). The recall oracle (../shared/conformance/oracle.mjs)
// runs recall only.
//
//   RECALL_ORACLE_NODE_MODULES=<the recall oracle's package cache> node threads_oracle.mjs DATASET QUERIES OUT DB
//
// DATASET: {threads: [{id, resourceId, title, metadata, createdAt, updatedAt}]}, saved with saveThread into
// the LibSQL file DB (which RecallQL then imports, so both sides list the very rows Mastra stored).
// QUERIES: [{name, args}], args passed to listThreads as given. OUT: {results: [{name, ok, ids, total,
// page, perPage, hasMore} | {name, ok: false, error}]}.
//
// Mastra orders by the one field and leaves ties to SQLite's scan. ORACLE_MODE=contract (the default)
// breaks them as RecallQL documents, by id in the direction asked for (SQLite compares text byte by
// byte, which for UTF-8 is code point order). ORACLE_MODE=mastra runs it as published. Neither mode
// touches the metadata filter: where Mastra's differs from RecallQL's on purpose (1 matching true, null
// matching a missing key), the harness asks no such question.
import { clone, memoryStorage, oracleArgs, rewriteSql, runQueries, saveThreads, writeResults } from './listing_oracle.mjs';

const { mode, paths, dataset, queries } = oracleArgs('threads_oracle.mjs', ['DB.sqlite']);
const [, , outPath, dbPath] = paths;
const { storage, memoryStore } = await memoryStorage('threads-oracle', `file:${dbPath}`);

await saveThreads(memoryStore, dataset.threads);

const pageOrder = /ORDER BY "(createdAt|updatedAt)" (ASC|DESC) LIMIT/;
if (mode === 'contract') rewriteSql(storage, (sql) => sql.replace(pageOrder, (_, f, d) => `ORDER BY "${f}" ${d}, id ${d} LIMIT`));

const results = await runQueries(queries, async (args) => {
  const r = await memoryStore.listThreads(clone(args));
  return { ...r, rows: r.threads };
});
storage.client.close?.();
writeResults(outPath, 'threads-oracle', mode, { threads: (dataset.threads ?? []).length }, results);
