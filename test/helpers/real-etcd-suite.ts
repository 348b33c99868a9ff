/**
 * One real etcd per test file (describe block), shared by its tests: started
 * before the first test, stopped after the last; a raw client for looking at
 * what the code under test wrote; a fresh key prefix per test so tests never
 * see each other's keys; everything a test opens (`own`) disposed after it,
 * newest first. Call `useRealEtcd` inside a `describe`.
 */
import { after, afterEach, before } from 'node:test';
import { Etcd3 } from 'etcd3';
import { systemClock, type Clock } from '../../src/core/clock.js';
import { silentLogger, type Logger } from '../../src/core/logger.js';
import { EtcdSession, type EtcdSessionOptions } from '../../src/store/etcd/session.js';
import { startEtcd, type EtcdServer, type StartEtcdOptions } from './etcd.js';

export interface RealEtcdSuite {
  /** The server (valid inside tests and hooks). */
  readonly etcd: EtcdServer;
  /** A plain client on it, for reading and writing behind the code's back. */
  readonly raw: Etcd3;
  /** `/herald-<tag>-<pid>-<n>/`, a new one per call. */
  freshPrefix(): string;
  /** Disposes `d` after the current test (newest first). */
  own<T extends { dispose(): void }>(d: T): T;
  /** Session options on this server: short lease (3 s), keep-alive 500 ms, margin 500 ms. */
  sessionOptions(prefix: string, o?: Partial<EtcdSessionOptions>): EtcdSessionOptions;
  /** A session on `prefix` (started unless `start: false`), disposed after the test. */
  session(prefix: string, o?: { log?: Logger; clock?: Clock; start?: boolean }): Promise<EtcdSession>;
}

export function useRealEtcd(tag: string, options: StartEtcdOptions = {}): RealEtcdSuite {
  let etcd: EtcdServer | undefined;
  let raw: Etcd3 | undefined;
  let prefixN = 0;
  const open: Array<{ dispose(): void }> = [];

  before(async () => {
    etcd = await startEtcd(options);
    raw = new Etcd3({ hosts: etcd.endpoint });
  });
  afterEach(() => {
    for (const d of open.splice(0).reverse()) d.dispose();
  });
  after(async () => {
    raw?.close();
    await etcd?.stop();
  });

  const started = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error('useRealEtcd: the server is only there inside tests and hooks');
    return v;
  };
  const suite: RealEtcdSuite = {
    get etcd() {
      return started(etcd);
    },
    get raw() {
      return started(raw);
    },
    freshPrefix: () => `/herald-${tag}-${process.pid}-${prefixN++}/`,
    own: (d) => {
      open.push(d);
      return d;
    },
    sessionOptions: (prefix, o = {}) => ({ endpoints: [started(etcd).endpoint], prefix, ttlSeconds: 3, keepaliveMs: 500, marginMs: 500, ...o }),
    session: async (prefix, o = {}) => {
      const s = suite.own(new EtcdSession(suite.sessionOptions(prefix), { clock: o.clock ?? systemClock, log: o.log ?? silentLogger }));
      if (o.start !== false) await s.start();
      return s;
    },
  };
  return suite;
}
