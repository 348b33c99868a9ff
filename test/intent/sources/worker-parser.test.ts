/**
 * Where manifests are parsed: small, alias-free input on the caller's thread
 * (no worker start, no second load of yaml and zod), the rest in a worker;
 * either way the same load comes back.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { manifestLimitDefaults } from '../../../src/intent/limits.js';
import type { ParseJob } from '../../../src/intent/sources/parse-job.js';
import { isInlineJob, parseInWorker, parseManifestJob } from '../../../src/intent/sources/worker-parser.js';

const pool = (name: string) => `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: ${name} }
spec:
  blocks: [{ cidr: 198.51.100.0/28 }]
`;
const files = (...texts: string[]): ParseJob => ({ kind: 'files', files: texts.map((text, i) => ({ file: `f${i}.yaml`, text })), ioErrors: [], limits: manifestLimitDefaults });

test('small alias-free input is inline; too many bytes in total, or any alias, goes to a worker', () => {
  assert.equal(isInlineJob(files(pool('a'), pool('b'))), true);
  assert.equal(isInlineJob(files(pool('a'), pool('b')), pool('a').length + 10), false, 'the total counts, not each file');
  assert.equal(isInlineJob(files(`${pool('a')}  x: &k { a: 1 }\n  y: *k\n`)), false);
  assert.equal(isInlineJob(files(`${pool('a')}metadata2: { note: "*.example.com" }\n`)), true, 'a star in a string is no alias');
  assert.equal(isInlineJob({ kind: 'stored', prefix: '/p/', kvs: [{ key: '/p/a', value: '*x' }], ioErrors: [], limits: manifestLimitDefaults }), false);
});

test('the inline parse gives the same load as the worker', async () => {
  const job = files(pool('a'), `${pool('b')}---\nkind: Nope\n`, 'not: [valid');
  const inline = await parseManifestJob(job);
  const worker = await parseInWorker(job);
  assert.deepEqual(inline, worker);
  assert.equal(inline.objects.length, 2);
  assert.ok(inline.errors.length > 0);
});

test('a stopped source parses nothing inline', async () => {
  const ac = new AbortController();
  ac.abort();
  const load = await parseManifestJob(files(pool('a')), { signal: ac.signal });
  assert.equal(load.objects.length, 0);
  assert.match(load.errors[0]!.message, /shutting down/);
});
