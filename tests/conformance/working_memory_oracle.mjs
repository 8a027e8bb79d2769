#!/usr/bin/env node
// The real Mastra's working memory (`Memory` from @mastra/memory over its LibSQL store, no vector store,
// no embedder): the oracle for RecallQL's updateWorkingMemory, workingMemory, workingMemoryTemplate,
// Resource.workingMemory and Thread.workingMemory.
//
//   RECALL_ORACLE_NODE_MODULES=<the recall oracle's package cache> node working_memory_oracle.mjs DATASET QUERIES OUT
//
// DATASET: {threads, memoryOptions}: the threads saved as given, the options `new Memory` gets.
// QUERIES: [{name, args: {op, ...}}], run one after another on one store (a later case sees an earlier
// one's update). memoryConfig is Mastra's shape (scope 'thread').
//   update   {threadId, resourceId?, workingMemory, memoryConfig?} -> {scope, threadId, resourceId,
//            workingMemory, thread}: updateWorkingMemory (it returns nothing), then what RecallQL's payload
//            reports: the scope, the resource (in thread scope the thread's owner), the value
//            getWorkingMemory now gives there, and the call's thread as then stored ({metadata, touched:
//            whether its updatedAt moved}, null when there is no such thread);
//   get      {threadId, resourceId?, memoryConfig?} -> {workingMemory}: getWorkingMemory;
//   resource {resourceId, memoryConfig?} -> {workingMemory}: getWorkingMemory of that resource (resource
//            scope or disabled only: what Resource.workingMemory answers);
//   thread   {threadId, memoryConfig?} -> {workingMemory}: getWorkingMemory of that thread with its own
//            resource (null for an unknown thread, as Query.thread is): what Thread.workingMemory answers;
//   template {memoryConfig?} -> {template: {format, content} | null}: getWorkingMemoryTemplate (format in
//            upper case, as the GraphQL enum spells it);
//   createThread {thread, createdAt, memoryConfig?}, updateThread {id, title?, metadata, memoryConfig?}
//            -> {thread: {id, resourceId, metadata}}: Memory.saveThread, Memory.updateThread;
//   cloneThread {sourceThreadId, newThreadId, resourceId?, metadata?, memoryConfig?} -> {thread: {id, resourceId}}:
//            Memory.cloneThread (the clone's working memory is then read by the cases after it).
import { load } from '../mastra_packages.mjs';
import { clone, memoryStorage, oracleArgs, runCases, saveThreads, writeResults } from './listing_oracle.mjs';

const { mode, paths, dataset, queries } = oracleArgs('working_memory_oracle.mjs');
const outPath = paths[2];
const { Memory } = await load('@mastra/memory');
const { storage, memoryStore } = await memoryStorage('working-memory-oracle', 'file::memory:');
await saveThreads(memoryStore, dataset.threads);
// The dataset's options (RecallQL: RECALLQL_WORKING_MEMORY); none: Mastra's defaults, working memory off.
const memory = new Memory({ storage, options: clone(dataset.memoryOptions) });

// updatedAt has millisecond precision: an update in the same millisecond as the thread's last change would
// not show as a move, so each update waits for the clock to pass it (the candidate does the same).
const tick = () => new Promise((resolve) => setTimeout(resolve, 2));

async function update({ threadId, resourceId, workingMemory, memoryConfig }) {
  const before = await memoryStore.getThreadById({ threadId });
  await tick();
  await memory.updateWorkingMemory({ threadId, resourceId, workingMemory, memoryConfig: clone(memoryConfig) });
  const after = await memoryStore.getThreadById({ threadId });
  const scope = memory.getMergedThreadConfig(clone(memoryConfig) || {}).workingMemory.scope || 'resource';
  return {
    scope: scope.toUpperCase(),
    threadId,
    resourceId: scope === 'thread' ? after.resourceId : resourceId,
    workingMemory: await memory.getWorkingMemory({ threadId, resourceId, memoryConfig: clone(memoryConfig) }),
    thread: after && {
      metadata: after.metadata ?? null,
      touched: before.updatedAt.getTime() !== after.updatedAt.getTime(),
    },
  };
}

async function threadWorkingMemory({ threadId, memoryConfig }) {
  const thread = await memoryStore.getThreadById({ threadId });
  if (!thread) return null;
  return memory.getWorkingMemory({ threadId, resourceId: thread.resourceId, memoryConfig: clone(memoryConfig) });
}

async function template({ memoryConfig }) {
  const t = await memory.getWorkingMemoryTemplate({ memoryConfig: clone(memoryConfig) });
  return t && { format: t.format.toUpperCase(), content: t.content };
}

// Memory.saveThread and Memory.updateThread (patchThread), which copy a string metadata.workingMemory to
// the resource when working memory is on in resource scope: the thread as they return it.
const shown = (t) => ({ id: t.id, resourceId: t.resourceId, metadata: t.metadata ?? null });
async function createThread({ thread, createdAt, memoryConfig }) {
  const when = new Date(createdAt);
  const saved = { ...clone(thread), createdAt: when, updatedAt: when };
  return { thread: shown(await memory.saveThread({ thread: saved, memoryConfig: clone(memoryConfig) })) };
}
async function updateThread({ id, title, metadata, memoryConfig }) {
  const args = { id, title, metadata: clone(metadata), memoryConfig: clone(memoryConfig) };
  return { thread: shown(await memory.updateThread(args)) };
}

// Memory.cloneThread, which carries working memory over (thread scope: the source thread's to the clone;
// resource scope, into another resource: the source resource's to that one): the clone's id and resource.
async function cloneThread({ sourceThreadId, newThreadId, resourceId, metadata, memoryConfig }) {
  const args = { sourceThreadId, newThreadId, resourceId, metadata };
  const { thread } = await memory.cloneThread(args, clone(memoryConfig));
  return { thread: { id: thread.id, resourceId: thread.resourceId } };
}

const answers = {
  update,
  createThread,
  updateThread,
  cloneThread,
  get: async (a) => ({ workingMemory: await memory.getWorkingMemory({ ...a, memoryConfig: clone(a.memoryConfig) }) }),
  resource: async ({ resourceId, memoryConfig }) => ({
    workingMemory: await memory.getWorkingMemory({ threadId: undefined, resourceId, memoryConfig: clone(memoryConfig) }),
  }),
  thread: async (a) => ({ workingMemory: await threadWorkingMemory(a) }),
  template: async (a) => ({ template: await template(a) }),
};

const results = await runCases(queries, async ({ op, ...args }) => {
  const answer = answers[op];
  if (!answer) throw new Error(`unknown op ${op}`);
  return answer(args);
});
writeResults(outPath, 'working-memory-oracle', mode, { threads: (dataset.threads ?? []).length }, results);
