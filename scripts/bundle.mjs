// Bundles the compiled CLI (dist/cli/main.js and what it imports) into one
// CommonJS file, dist/bundle/main.cjs, plus V8's code cache for it
// (main.cjs.cache), which bin/herald loads. Why: Node's ESM loader pays per
// module (the agent imports about 300; zod alone is 95 files), and Node 20
// has no compile cache for modules; a script compiled through vm.Script can
// be given V8's cached code, so the agent's ~650 kB of JavaScript is not
// parsed and compiled again at every start. Commands stay lazy: esbuild turns
// each `import('./commands/x.js')` into a module initialised on first use.
//
// Same code, same behaviour: every `import.meta.url` in a bundled file is
// rewritten to that file's own URL under dist/ (so the BPF object, the parse
// worker and package.json are found where they always were), and packages
// with native parts or files read at run time stay external (require()d).
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { dirname, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = resolve(root, 'dist');
const outdir = resolve(dist, 'bundle');
const outfile = resolve(outdir, 'main.cjs');

/** `import.meta.url` of each dist/ file as that file's URL (found from the bundle's __dirname). */
const keepModuleUrls = {
  name: 'keep-module-urls',
  setup(b) {
    // herald's own compiled files only (packages' dist/ folders are not ours to rewrite).
    const ours = new RegExp(`^${dist.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/.*\\.js$`);
    b.onLoad({ filter: ours }, async (args) => {
      const text = await readFile(args.path, 'utf8');
      if (!text.includes('import.meta')) return undefined;
      const rel = relative(outdir, args.path).split('\\').join('/');
      const url = `require("node:url").pathToFileURL(require("node:path").resolve(__dirname, ${JSON.stringify(rel)})).href`;
      // import.meta.resolve only serves the sources run under tsx (worker-parser.ts), never a bundle.
      return { contents: text.replaceAll('import.meta.url', url).replaceAll('import.meta.resolve(', 'require.resolve('), loader: 'js' };
    });
  },
};

/**
 * zod's `z.locales` namespace pulls in every language's error messages (about
 * 250 kB, a third of the agent's code); herald reports in English only (zod's
 * default, which zod imports directly), so the namespace holds `en` alone.
 */
const englishOnly = {
  name: 'zod-english-only',
  setup(b) {
    b.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) =>
      /[\\/]zod[\\/]v4[\\/](classic|core)$/.test(args.resolveDir) ? { path: resolve(args.resolveDir, '../locales/english-only'), namespace: 'zod-locales' } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'zod-locales' }, (args) => ({
      contents: "export { default as en } from './en.js';",
      resolveDir: dirname(args.path),
      loader: 'js',
    }));
  },
};

/**
 * @kubernetes/client-node (ESM only, ~15 MB bundled) is needed by Kubernetes
 * agents alone: it is bundled into its own CommonJS file, and the main bundle
 * require()s that file on first use (esbuild turns the dynamic import of an
 * external into a require), so every other start loads none of it.
 */
const KUBE_CLIENT = './kube-client-node.cjs';
const kubeClientApart = {
  name: 'kube-client-apart',
  setup(b) {
    // A dynamic import() of an external stays an import(), which a vm.Script cannot do on Node 20:
    // a small CommonJS shim inside the bundle require()s the file instead, on first use.
    b.onResolve({ filter: /^@kubernetes\/client-node$/ }, () => ({ path: 'client-node', namespace: 'kube-client-apart' }));
    b.onLoad({ filter: /.*/, namespace: 'kube-client-apart' }, () => ({ contents: `module.exports = require(${JSON.stringify(KUBE_CLIENT)});`, loader: 'js' }));
    b.onResolve({ filter: /kube-client-node\.cjs$/ }, () => ({ path: KUBE_CLIENT, external: true }));
  },
};

await rm(outdir, { recursive: true, force: true });
await build({
  entryPoints: [fileURLToPath(import.meta.resolve('@kubernetes/client-node'))],
  outfile: resolve(outdir, KUBE_CLIENT),
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  minifySyntax: true,
  keepNames: true,
  logLevel: 'error',
});
const result = await build({
  metafile: process.argv.includes('--analyze'),
  entryPoints: [resolve(dist, 'cli/main.js')],
  outfile,
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  // Native code (koffi, netlink), files read at run time (etcd3's gRPC protos), opt-in (prom-client).
  // tsx: only named in worker-parser's path for the sources run under tsx.
  external: ['koffi', 'netlink', 'netlink/*', 'etcd3', 'prom-client', 'tsx/*'],
  plugins: [keepModuleUrls, englishOnly, kubeClientApart],
  sourcemap: true,
  // Syntax only: identifiers and line breaks kept, so an operator's stack
  // trace names real functions at readable lines (the code cache makes the
  // extra bytes nearly free at start).
  minifySyntax: true,
  keepNames: true,
  logLevel: 'warning',
});
if (result.metafile) {
  const { analyzeMetafile } = await import('esbuild');
  console.log(await analyzeMetafile(result.metafile));
}

// The cluster view's page script (web/view/, plain TypeScript modules): one
// browser file, dist/view/app.js, which the agent serves (src/api/view/server.ts).
await build({
  entryPoints: [resolve(root, 'web/view/main.ts')],
  outfile: resolve(dist, 'view/app.js'),
  bundle: true,
  format: 'iife',
  platform: 'browser',
  target: 'es2022',
  minify: true,
  sourcemap: true,
  logLevel: 'warning',
});

// The code cache: V8's compiled code for the bundle after the agent command's
// modules have been initialised (`herald agent --help`), written by bin/herald
// on exit. A cache V8 refuses (another Node version or V8 flags) is ignored.
const warm = spawnSync(process.execPath, [resolve(root, 'bin/herald'), 'agent', '--help'], {
  env: { ...process.env, HERALD_WRITE_CODE_CACHE: '1' },
  stdio: ['ignore', 'ignore', 'inherit'],
});
if (warm.status !== 0) throw new Error(`bundle: writing the code cache failed (exit ${warm.status})`);
