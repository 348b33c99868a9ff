/**
 * Reading and writing intent in etcd (layout: stored-manifest.ts). Used by
 * the etcd intent source (reads) and `herald apply` / `herald delete` (writes).
 *
 * A write is one transaction guarded per key by the revision it was compared
 * against, so the per-object result (created / configured / unchanged /
 * deleted) is exactly what happened; a concurrent change to one of the keys
 * makes the transaction fail, and it is recomputed and retried.
 */
import type { Etcd3 } from 'etcd3';
import { HeraldError } from '../../core/errors.js';
import type { StoredManifest } from './stored-manifest.js';
import { byString } from '../../core/order.js';

export interface StoredKv {
  readonly key: string;
  /** '' when the value is over `maxValueBytes` (it is then not decoded at all). */
  readonly value: string;
  /** Size of the stored value in bytes. */
  readonly bytes: number;
  readonly modRevision: number;
}

export interface StoreListing {
  /** The store revision the listing reflects. */
  readonly revision: number;
  /** Sorted by key. */
  readonly kvs: readonly StoredKv[];
}

/**
 * Everything under `prefix` in one range read (one revision). Values over
 * `maxValueBytes` are left undecoded (value '', with their size).
 */
export async function listManifests(client: Etcd3, prefix: string, maxValueBytes = Number.POSITIVE_INFINITY): Promise<StoreListing> {
  const res = await client.getAll().prefix(prefix).exec();
  const kvs = res.kvs
    .map((kv) => ({
      key: kv.key.toString('utf8'),
      value: kv.value.length > maxValueBytes ? '' : kv.value.toString('utf8'),
      bytes: kv.value.length,
      modRevision: Number(kv.mod_revision),
    }))
    .sort(byString((kv) => kv.key));
  return { revision: Number(res.header.revision), kvs };
}

export type StoreResult = 'created' | 'configured' | 'unchanged' | 'deleted' | 'not found';

export interface StoreChange {
  readonly ref: string;
  readonly key: string;
  readonly result: StoreResult;
}

export interface WriteOptions {
  /** Attempts when a key changed between the read and the transaction. */
  readonly attempts?: number;
}

/**
 * `apply`: puts every object whose stored value differs; `delete`: deletes
 * every object that exists. One transaction for all of them (etcd's
 * --max-txn-ops, 128 by default, bounds how many objects one call can write).
 * Results are in the order of `items`.
 */
export async function writeManifests(
  client: Etcd3,
  prefix: string,
  items: readonly StoredManifest[],
  mode: 'apply' | 'delete',
  opts: WriteOptions = {},
): Promise<StoreChange[]> {
  const attempts = opts.attempts ?? 5;
  const unique = [...new Map(items.map((i) => [i.key, i])).values()];
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const { kvs } = await listManifests(client, prefix);
    const current = new Map(kvs.map((kv) => [kv.key, kv]));
    const results = new Map<string, StoreResult>();
    const guarded: { key: string; modRevision: number }[] = [];
    const ops = [];
    for (const item of unique) {
      const kv = current.get(item.key);
      if (mode === 'apply') {
        if (kv?.value === item.value) {
          results.set(item.key, 'unchanged');
          continue;
        }
        results.set(item.key, kv ? 'configured' : 'created');
        ops.push(client.put(item.key).value(item.value));
      } else {
        if (!kv) {
          results.set(item.key, 'not found');
          continue;
        }
        results.set(item.key, 'deleted');
        ops.push(client.delete().key(item.key));
      }
      guarded.push({ key: item.key, modRevision: kv?.modRevision ?? 0 });
    }
    const changes = items.map((i) => ({ ref: i.ref, key: i.key, result: results.get(i.key) ?? 'unchanged' }));
    const [first, ...rest] = guarded;
    if (!first) return changes;
    // mod_revision of an absent key compares as 0.
    const txn = client.if(first.key, 'Mod', '==', first.modRevision);
    for (const g of rest) txn.and(g.key, 'Mod', '==', g.modRevision);
    const res = await txn.then(...ops).commit();
    if (res.succeeded) return changes;
  }
  throw new HeraldError('HERALD_STORE', `the objects kept changing in etcd while being written (${attempts} attempts); nothing more was written`);
}
