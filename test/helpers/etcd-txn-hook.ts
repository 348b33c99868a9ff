/** Fault injection for tests against a real etcd: one transaction of a session's client, changed on its way out. */
import type { EtcdSession } from '../../src/store/etcd/session.js';

/**
 * The session's next transaction whose first compare is on `target` (`'Value'`
 * for a fenced allocation-state write, `'Create'` for an election) first runs
 * `before` — a change behind the caller's back — then fails with `fail` or
 * commits. Later transactions go through untouched.
 */
export function beforeNextTxn(session: EtcdSession, target: string, o: { before?: () => Promise<unknown>; fail?: Error }): void {
  const client = session.client;
  const realIf = client.if.bind(client);
  let armed = true;
  (client as { if: typeof client.if }).if = ((...args: Parameters<typeof client.if>) => {
    const tx = realIf(...args);
    if (armed && args[1] === target) {
      armed = false;
      const commit = tx.commit.bind(tx);
      tx.commit = async () => {
        await o.before?.();
        if (o.fail) throw o.fail;
        return commit();
      };
    }
    return tx;
  }) as typeof client.if;
}
