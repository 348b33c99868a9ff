/**
 * The cluster view's share of etcd, against a real etcd (loopback): events
 * stored per node with the store revision as id (every agent the same
 * timeline), re-read by a new instance with the same ids, bounded per node;
 * node cards on the agent's lease, written only when changed; hostile values
 * ignored; the view re-reads and follows again after a store outage.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { waitFor } from '../../lab/lab.js';
import { systemClock } from '../../src/core/clock.js';
import type { ClusterEvent } from '../../src/core/events.js';
import { silentLogger, type Logger } from '../../src/core/logger.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { EtcdViewStore, viewStoreDefaults, type ViewStoreOptions } from '../../src/store/etcd/view-store.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';
import { recordingLogger } from '../helpers/recording-logger.js';

describe('etcd view store: the cluster timeline and node cards', () => {
  const real = useRealEtcd('view');
  const freshPrefix = real.freshPrefix;
  const session = (prefix: string, start = true): Promise<EtcdSession> => real.session(prefix, { start });

  async function view(s: EtcdSession, node: string, opts: ViewStoreOptions = viewStoreDefaults, log: Logger = silentLogger): Promise<EtcdViewStore> {
    const v = new EtcdViewStore(s, node, log, opts);
    real.own(v);
    await v.start();
    return v;
  }

  const brief = (events: readonly ClusterEvent[]) => events.map((e) => ({ id: e.id, node: e.node, kind: e.kind }));
  const keysUnder = async (p: string) => (await real.raw.getAll().prefix(p).exec()).kvs.map((kv) => ({ key: kv.key.toString(), rev: Number(kv.mod_revision), lease: String(kv.lease), value: kv.value.toString() }));

  test('an event is stored under its node with a padded sequence; its id is its key revision; every agent sees one timeline in the same order', async () => {
    const prefix = freshPrefix();
    const a = await view(await session(prefix), 'a');
    const b = await view(await session(prefix), 'b');
    assert.equal(a.journalPrefix, `${prefix}view/events/a/`);
    await a.record({ kind: 'node-started', version: '1.2.3' });
    await b.record({ kind: 'intent-accepted' });
    await a.record({ kind: 'allocated', service: 'default/web', ip: '192.0.2.10' });
    await waitFor(() => a.ring.list().length === 3 && b.ring.list().length === 3, { what: 'both rings to hold three events' });
    const stored = await keysUnder(`${prefix}view/events/`);
    assert.equal(stored.length, 3);
    for (const kv of stored) {
      assert.match(kv.key, new RegExp(`^${prefix}view/events/[ab]/\\d{20}$`));
      assert.equal(kv.lease, '0', 'events outlive the agent: no lease');
      assert.equal(typeof (JSON.parse(kv.value) as { at: unknown }).at, 'string');
    }
    const byRev = [...stored].sort((x, y) => x.rev - y.rev);
    const expected = [
      { id: byRev[0]!.rev, node: 'a', kind: 'node-started' },
      { id: byRev[1]!.rev, node: 'b', kind: 'intent-accepted' },
      { id: byRev[2]!.rev, node: 'a', kind: 'allocated' },
    ];
    assert.deepEqual(brief(a.ring.list()), expected);
    assert.deepEqual(brief(b.ring.list()), expected);
    const allocated = a.ring.list()[2] as ClusterEvent & { service: string; ip: string };
    assert.deepEqual([allocated.service, allocated.ip], ['default/web', '192.0.2.10']);
    assert.ok(Date.parse(allocated.at) > 0);
    const [first, second] = stored.filter((kv) => kv.key.includes('/events/a/')).map((kv) => kv.key);
    assert.ok(first! < second!, "one agent's keys sort in the order it wrote them");
    // The store lists keys by name (a's, then b's); a new instance still reads them in revision order.
    const c = await view(await session(prefix), 'c');
    assert.deepEqual(brief(c.ring.list()), expected);
  });

  test('a new instance re-reads the timeline with the same ids, and continues its sequence after the stored keys', async () => {
    const prefix = freshPrefix();
    const s = await session(prefix);
    const a = await view(s, 'a');
    await a.record({ kind: 'node-started', version: '1' });
    await a.record({ kind: 'node-stopping' });
    await waitFor(() => a.ring.list().length === 2, { what: 'two events' });
    const before = brief(a.ring.list());
    a.dispose();
    // A key from a sequence far ahead of the clock (e.g. written by a host whose clock ran fast).
    const ahead = Date.now() * 1000 + 1e12;
    await real.raw.put(`${prefix}view/events/a/${String(ahead).padStart(20, '0')}`).value(JSON.stringify({ kind: 'intent-accepted', at: new Date().toISOString() }));
    const again = await view(s, 'a');
    assert.deepEqual(brief(again.ring.list()).slice(0, 2), before);
    assert.equal(again.ring.list().length, 3);
    await again.record({ kind: 'node-started', version: '2' });
    const keys = (await keysUnder(`${prefix}view/events/a/`)).map((kv) => kv.key).sort();
    assert.equal(keys.at(-1), `${prefix}view/events/a/${String(ahead + 1).padStart(20, '0')}`);
  });

  test('a fresh node numbers its events from the clock (µs); a non-numeric key of its own does not break the sequence', async () => {
    const prefix = freshPrefix();
    const s = await session(prefix);
    const fresh = await view(s, 'f');
    const before = Date.now() * 1000;
    await fresh.record({ kind: 'node-started', version: '1' });
    const [k] = (await keysUnder(`${prefix}view/events/f/`)).map((kv) => kv.key);
    assert.ok(Number(k!.split('/').pop()) >= before, `${k} numbered from the clock`);
    await real.raw.put(`${prefix}view/events/j/junk`).value(JSON.stringify({ kind: 'intent-accepted' }));
    const j = await view(s, 'j');
    await j.record({ kind: 'node-started', version: '1' });
    const keys = (await keysUnder(`${prefix}view/events/j/`)).map((kv) => kv.key.split('/').pop()!);
    assert.equal(keys.length, 2);
    assert.ok(keys.some((x) => /^\d{20}$/.test(x)), keys.join());
  });

  test('node listeners hear of cards only (not of events, nor of old events deleted), and not after unsubscribing', async () => {
    const prefix = freshPrefix();
    const a = await view(await session(prefix), 'a', { perNode: 1, writeTimeoutMs: 5000 });
    const b = await view(await session(prefix), 'b');
    let notified = 0;
    const off = b.onNodes(() => notified++);
    real.own({ dispose: off });
    for (let i = 0; i < 3; i++) await a.record({ kind: 'intent-accepted' });
    // Apart from the card (one watch batch may carry both): the events and their deletions alone notify nobody.
    await waitFor(() => b.ring.list().length === 3, { what: 'b to see the events' });
    await new Promise((r) => setTimeout(r, 300)); // the last deletion delivered too
    assert.equal(notified, 0, 'events and deleted events are no node change');
    const card = { version: '1', startedAt: '', interfaces: [], owned: 1 };
    await a.publishCard(card);
    await waitFor(() => b.nodes().get('a')?.owned === 1, { what: "b to see a's card (after the events and their deletions)" });
    assert.equal(b.ring.list().length, 3);
    assert.equal(notified, 1, 'one notice: the card');
    off();
    await a.publishCard({ ...card, owned: 2 });
    await waitFor(() => b.nodes().get('a')?.owned === 2, { what: 'the changed card' });
    assert.equal(notified, 1, 'unsubscribed');
  });

  test('a card that cannot be stored is a debug line, not a throw, and is tried again next time', async () => {
    const prefix = freshPrefix();
    const s = await session(prefix);
    const log = recordingLogger();
    const v = await view(s, 'a', viewStoreDefaults, log);
    s.dispose(); // its clients closed; the session still counts itself live
    const card = { version: '1', startedAt: '', interfaces: [], owned: 0 };
    await v.publishCard(card);
    await v.publishCard(card);
    assert.deepEqual(log.lines.map((l) => [l.level, l.msg]), [
      ['debug', 'cluster view: publishing the node card failed'],
      ['debug', 'cluster view: publishing the node card failed'],
    ]);
    assert.equal(typeof log.lines[0]!.obj.err, 'string');
  });

  test('a store that cannot be read at start is a warning, and the read is tried again every second', async () => {
    const s = new EtcdSession({ endpoints: [`unix://${real.etcd.dataDir}/no-such.sock`], prefix: freshPrefix(), ttlSeconds: 3, keepaliveMs: 500, marginMs: 500 }, { clock: systemClock, log: silentLogger });
    real.own(s);
    const log = recordingLogger();
    await view(s, 'a', viewStoreDefaults, log);
    assert.deepEqual(log.lines.map((l) => [l.level, l.msg]), [['warn', 'cluster view: reading the store failed; retrying']]);
    assert.equal(typeof log.lines[0]!.obj.err, 'string');
    await waitFor(() => log.lines.length === 2, { what: 'the read tried again' });
  });

  test('disposed while the store cannot be read: the retries stop', async () => {
    const s = new EtcdSession({ endpoints: [`unix://${real.etcd.dataDir}/no-such.sock`], prefix: freshPrefix(), ttlSeconds: 3, keepaliveMs: 500, marginMs: 500 }, { clock: systemClock, log: silentLogger });
    real.own(s);
    const log = recordingLogger();
    const v = await view(s, 'a', viewStoreDefaults, log);
    assert.equal(log.lines.length, 1, 'the first read failed');
    v.dispose();
    await new Promise((r) => setTimeout(r, 2500)); // two retry periods
    assert.equal(log.lines.length, 1, `no read after dispose: ${JSON.stringify(log.lines.map((l) => l.msg))}`);
  });

  test('at most perNode events are kept per node: the oldest are deleted, other nodes untouched', async () => {
    const prefix = freshPrefix();
    const log = recordingLogger();
    const a = await view(await session(prefix), 'a', { perNode: 3, writeTimeoutMs: 5000 }, log);
    const b = await view(await session(prefix), 'b', { perNode: 3, writeTimeoutMs: 5000 });
    await b.record({ kind: 'intent-accepted' });
    for (let i = 0; i < 5; i++) await a.record({ kind: 'allocated', service: `s${i}`, ip: `192.0.2.${i}` });
    const kept = (await keysUnder(`${prefix}view/events/a/`)).map((kv) => (JSON.parse(kv.value) as { service: string }).service);
    assert.deepEqual(kept, ['s2', 's3', 's4']);
    assert.equal((await keysUnder(`${prefix}view/events/b/`)).length, 1);
    await a.record({ kind: 'allocated', service: 's5', ip: '192.0.2.5' });
    assert.deepEqual((await keysUnder(`${prefix}view/events/a/`)).map((kv) => (JSON.parse(kv.value) as { service: string }).service), ['s3', 's4', 's5']);
    assert.deepEqual(log.lines, [], 'no write failed');
  });

  test('the node card is on the lease, written only when it changed, seen by every agent, and gone with the lease', async () => {
    const prefix = freshPrefix();
    const sa = await session(prefix);
    const a = await view(sa, 'a');
    const b = await view(await session(prefix), 'b');
    let notified = 0;
    const off = b.onNodes(() => notified++);
    real.own({ dispose: off });
    const card = { version: '1.0.0', startedAt: '2026-11-26T00:00:00.000Z', interfaces: ['eth0'], owned: 2 };
    await a.publishCard(card);
    const [kv] = await keysUnder(`${prefix}view/nodes/`);
    assert.equal(kv!.key, `${prefix}view/nodes/a`);
    assert.equal(kv!.lease, sa.leaseId);
    const stored = JSON.parse(kv!.value) as Record<string, unknown>;
    assert.deepEqual({ ...stored, updatedAt: undefined }, { ...card, node: 'a', updatedAt: undefined });
    assert.ok(Date.parse(stored.updatedAt as string) > 0);
    await waitFor(() => b.nodes().get('a')?.owned === 2, { what: "b to see a's card" });
    assert.ok(notified > 0);
    assert.deepEqual(b.nodes().get('a'), { ...stored, node: 'a' });
    await a.publishCard({ ...card });
    assert.equal((await keysUnder(`${prefix}view/nodes/`))[0]!.rev, kv!.rev, 'an unchanged card is not written again');
    await a.publishCard({ ...card, owned: 3 });
    assert.ok((await keysUnder(`${prefix}view/nodes/`))[0]!.rev > kv!.rev);
    await waitFor(() => b.nodes().get('a')?.owned === 3, { what: 'the changed card' });
    const seen = notified;
    await real.raw.leaseClient.leaseRevoke({ ID: sa.leaseId! });
    await waitFor(() => !b.nodes().has('a'), { what: "a's card to go with its lease" });
    assert.ok(notified > seen, 'listeners hear of the card going');
    off();
    await a.publishCard({ ...card, owned: 4 }); // the session has no lease now: nothing written
    assert.deepEqual(await keysUnder(`${prefix}view/nodes/`), []);
  });

  test('without a lease no card is published; after dispose nothing is recorded', async () => {
    const prefix = freshPrefix();
    const idle = await view(await session(prefix, false), 'a');
    await idle.publishCard({ version: '1', startedAt: '', interfaces: [], owned: 0 });
    assert.deepEqual(await keysUnder(`${prefix}view/`), []);
    const s = await session(prefix);
    const v = await view(s, 'b');
    v.dispose();
    await v.record({ kind: 'node-stopping' });
    await v.publishCard({ version: '1', startedAt: '', interfaces: [], owned: 0 });
    assert.deepEqual(await keysUnder(`${prefix}view/`), []);
  });

  test('oversized, non-JSON and kind-less values are ignored, at start and while following', async () => {
    const prefix = freshPrefix();
    /** A valid event of exactly `bytes` bytes. */
    const sized = (bytes: number) => {
      const bare = JSON.stringify({ kind: 'intent-accepted', pad: '' });
      return JSON.stringify({ kind: 'intent-accepted', pad: 'x'.repeat(bytes - bare.length) });
    };
    const hostile = async (tag: string) => {
      await real.raw.put(`${prefix}view/events/x/${tag}0`).value(sized(64 * 1024)); // at the bound: kept
      await real.raw.put(`${prefix}view/events/x/${tag}1`).value(sized(64 * 1024 + 1));
      await real.raw.put(`${prefix}view/events/x/${tag}2`).value('{not json');
      await real.raw.put(`${prefix}view/events/x/${tag}3`).value('{"no":"kind"}');
      await real.raw.put(`${prefix}view/events/x/${tag}4`).value('null');
      await real.raw.put(`${prefix}view/events/x/${tag}6`).value('7');
      await real.raw.put(`${prefix}view/events/x/${tag}7`).value('"node-stopping"');
      await real.raw.put(`${prefix}view/events/x/${tag}8`).value('{"kind":7}');
      await real.raw.put(`${prefix}view/other-${tag}`).value(JSON.stringify({ kind: 'intent-accepted', owned: 1 })); // neither an event nor a card
      await real.raw.put(`${prefix}view/events/x/${tag}5`).value(JSON.stringify({ kind: 'node-stopping', at: 7 }));
      await real.raw.put(`${prefix}view/nodes/bad-${tag}`).value('{not json');
      await real.raw.put(`${prefix}view/nodes/null-${tag}`).value('null');
      await real.raw.put(`${prefix}view/nodes/num-${tag}`).value('7');
      await real.raw.put(`${prefix}view/nodes/big-${tag}`).value(JSON.stringify({ pad: 'x'.repeat(64 * 1024) }));
      await real.raw.put(`${prefix}view/nodes/ok-${tag}`).value(JSON.stringify({ owned: 1, node: 'spoofed' }));
    };
    await hostile('a');
    const v = await view(await session(prefix), 'me');
    const check = (tag: string, count: number) => {
      const events = v.ring.list();
      assert.deepEqual(events.map((e) => e.kind), Array.from({ length: count }, () => ['intent-accepted', 'node-stopping']).flat());
      const last = events.at(-1)!;
      assert.equal(last.kind, 'node-stopping');
      assert.equal(last.node, 'x');
      assert.equal(last.at, new Date(0).toISOString(), 'a missing or non-text time reads as the epoch');
      assert.deepEqual([...v.nodes().keys()].sort(), ['ok-a', ...(tag === 'b' ? ['ok-b'] : [])]);
      assert.equal(v.nodes().get(`ok-${tag}`)!.node, `ok-${tag}`, 'the key names the node, not the value');
    };
    check('a', 1);
    assert.equal(sized(64 * 1024).length, 64 * 1024);
    await hostile('b');
    await waitFor(() => v.nodes().has('ok-b') && v.ring.list().length === 4, { what: 'the valid values written while following' });
    check('b', 2);
  });

  test('a stalled store never hangs the caller: record resolves after writeTimeoutMs, and the writes land in order once it answers', async () => {
    const prefix = freshPrefix();
    const a = await view(await session(prefix), 'a', { perNode: 100, writeTimeoutMs: 300 });
    await a.record({ kind: 'node-started', version: '1' });
    real.etcd.pause();
    try {
      await a.record({ kind: 'allocated', service: 'default/one', ip: '192.0.2.1' });
      await a.record({ kind: 'allocated', service: 'default/two', ip: '192.0.2.2' });
    } finally {
      real.etcd.resume();
    }
    await waitFor(() => a.ring.list().length === 3, { timeoutMs: 15_000, what: 'the stalled writes to land' });
    assert.deepEqual(a.ring.list().map((e) => (e as { service?: string }).service), [undefined, 'default/one', 'default/two']);
  });

  test('after a store outage the view follows the store again; a failed write is a debug line, not a throw', async () => {
    const prefix = freshPrefix();
    const log = recordingLogger();
    const a = await view(await session(prefix), 'a', { perNode: 2, writeTimeoutMs: 5000 }, log);
    await a.record({ kind: 'node-started', version: '1' });
    await real.etcd.kill();
    try {
      await a.record({ kind: 'node-stopping' });
    } finally {
      await real.etcd.restart();
    }
    assert.ok(
      log.lines.some((l) => l.level === 'debug' && l.msg === 'cluster view: storing an event failed' && l.obj.kind === 'node-stopping'),
      JSON.stringify(log.lines),
    );
    const other = new Etcd3({ hosts: real.etcd.endpoint });
    try {
      await other.put(`${prefix}view/events/b/00000000000000000001`).value(JSON.stringify({ kind: 'intent-accepted', at: new Date().toISOString() }));
    } finally {
      other.close();
    }
    await waitFor(() => a.ring.list().some((e) => e.node === 'b'), { timeoutMs: 15_000, what: "the other node's event after the outage" });
    await a.record({ kind: 'intent-accepted' });
    await waitFor(() => a.ring.list().filter((e) => e.node === 'a').length === 2, { what: 'our own event after the outage' });
    // The re-read after the outage counted our stored keys afresh: both kept (perNode 2).
    assert.deepEqual((await keysUnder(`${prefix}view/events/a/`)).map((kv) => (JSON.parse(kv.value) as { kind: string }).kind), ['node-started', 'intent-accepted']);
  });
});
