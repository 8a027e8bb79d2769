// Monaco (GraphiQL's editor) runs its language services in web workers. The build bundles each
// worker into its own file next to this bundle; this tells Monaco where they are. The worker file
// names (content-hashed) are injected by build.mjs as __RECALLQL_WORKERS__.
/* global __RECALLQL_WORKERS__ */

const script = document.currentScript;
const base = new URL('.', script ? script.src : document.baseURI);

globalThis.MonacoEnvironment = {
  getWorker(_workerId, label) {
    const name = __RECALLQL_WORKERS__[label] ?? __RECALLQL_WORKERS__.editor;
    return new Worker(new URL(name, base), { name: label });
  },
};
