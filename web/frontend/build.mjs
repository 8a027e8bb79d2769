// Bundles RecallQL's GraphiQL page into static/build/graphiql/ (git-ignored): one script, one
// stylesheet, Monaco's fonts and three web workers, every name content-hashed, plus index.html
// which the server answers GET /graphql with. Run from web/: `npm run build` (or ./build.sh).
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as esbuild from 'esbuild';

const web = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const outdir = path.join(web, 'static', 'build', 'graphiql');
// Where the page (served at /graphql) finds the files: relative, so a path prefix still works.
const publicPath = 'static/build/graphiql';

const common = {
  absWorkingDir: web,
  bundle: true,
  minify: true,
  sourcemap: false,
  legalComments: 'linked',
  target: ['es2022'],
  outdir,
  metafile: true,
  logLevel: 'warning',
  define: { 'process.env.NODE_ENV': '"production"' },
};

/** Entry name (without hash) -> output file name, for the outputs with the given extension. */
function outputsByName(result, extension) {
  const names = {};
  for (const [file, info] of Object.entries(result.metafile.outputs)) {
    if (!file.endsWith(extension) || !info.entryPoint) continue;
    const base = path.basename(file);
    names[base.replace(/-[A-Z0-9]+\.[a-z]+$/, '')] = base;
  }
  return names;
}

await rm(path.join(web, 'static', 'build'), { recursive: true, force: true });
await mkdir(outdir, { recursive: true });

// Monaco's workers: classic scripts, one file each.
const workers = await esbuild.build({
  ...common,
  entryPoints: {
    'editor.worker': 'monaco-editor/esm/vs/editor/editor.worker.js',
    'json.worker': 'monaco-editor/esm/vs/language/json/json.worker.js',
    'graphql.worker': 'monaco-graphql/esm/graphql.worker.js',
  },
  format: 'iife',
  entryNames: '[name]-[hash]',
});
const w = outputsByName(workers, '.js');
const workerFiles = { editor: w['editor.worker'], json: w['json.worker'], graphql: w['graphql.worker'] };
for (const [label, file] of Object.entries(workerFiles)) {
  if (!file) throw new Error(`build: the ${label} worker was not produced`);
}

// The page's script and stylesheet (CSS imported by the sources and by Monaco).
const page = await esbuild.build({
  ...common,
  entryPoints: { graphiql: 'frontend/graphiql.jsx' },
  format: 'iife',
  jsx: 'automatic',
  entryNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  loader: { '.ttf': 'file', '.woff': 'file', '.woff2': 'file', '.svg': 'file' },
  define: { ...common.define, __RECALLQL_WORKERS__: JSON.stringify(workerFiles) },
});
const js = outputsByName(page, '.js').graphiql;
const cssBundle = Object.values(page.metafile.outputs).find((o) => o.entryPoint && o.cssBundle)?.cssBundle;
const css = cssBundle && path.basename(cssBundle);
if (!js || !css) throw new Error('build: the GraphiQL script or stylesheet was not produced');

const template = await readFile(path.join(web, 'frontend', 'graphiql.html'), 'utf8');
const html = template.replace('{{css}}', `${publicPath}/${css}`).replace('{{js}}', `${publicPath}/${js}`);
await writeFile(path.join(outdir, 'index.html'), html);

const bytes = Object.values({ ...workers.metafile.outputs, ...page.metafile.outputs }).reduce(
  (sum, o) => sum + o.bytes,
  0,
);
console.log(`build: GraphiQL page in ${path.relative(web, outdir)}/ (${(bytes / 1e6).toFixed(1)} MB)`);
