/**
 * Starts a worker thread on a module next to the caller: from dist/ the
 * compiled `.js`; when the sources run under tsx (tests), the `.ts` through
 * tsx, loaded first inside the worker, because a worker does not inherit the
 * parent's module hooks.
 */
import { Worker, type WorkerOptions } from 'node:worker_threads';

/** `moduleJs`: the worker's compiled module, e.g. `new URL('./parse-worker.js', import.meta.url)`. */
export function startModuleWorker(moduleJs: URL, options: WorkerOptions): Worker {
  if (!import.meta.url.endsWith('.ts')) return new Worker(moduleJs, options);
  const moduleTs = new URL(moduleJs.href.replace(/\.js$/, '.ts'));
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then((m) => m.tsImport(${JSON.stringify(moduleTs.href)}, ${JSON.stringify(import.meta.url)}))`;
  return new Worker(boot, { ...options, eval: true });
}
