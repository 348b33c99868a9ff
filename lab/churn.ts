/**
 * Service churn for the fault labs and benchmarks: 1,000 IPv6 Services in 10
 * files of 100 (etcd's 128-operation transactions), applied and deleted with
 * `herald apply|delete -f`, round after round.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sleep } from './lab.js';

/** Writes the churn's pool and its 10 files of 100 Services into `dir`. */
export function writeChurnFiles(dir: string): { pool: string; files: string[] } {
  const pool = join(dir, 'churn-pool.yaml');
  writeFileSync(pool, 'apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata: { name: churn-pool }\nspec:\n  blocks: [{ cidr: 2001:db8:c::/108 }]\n');
  const svc = (i: number) => `---\napiVersion: v1\nkind: Service\nmetadata: { name: churn-${i}, namespace: churn }\nspec:\n  type: LoadBalancer\n  ipFamilies: [IPv6]\n  ports: [{ port: 80 }]\n`;
  const files = Array.from({ length: 10 }, (_, f) => {
    const file = join(dir, `churn-${f}.yaml`);
    writeFileSync(file, Array.from({ length: 100 }, (_, i) => svc(f * 100 + i)).join(''));
    return file;
  });
  return { pool, files };
}

/** Applies every file, waits 1 s, deletes every file, waits 1 s — until `durationMs` has passed; the rounds done. */
export async function churnRounds(files: readonly string[], durationMs: number, herald: (verb: 'apply' | 'delete', file: string) => Promise<void>): Promise<number> {
  const until = Date.now() + durationMs;
  let rounds = 0;
  while (Date.now() < until) {
    for (const f of files) await herald('apply', f);
    await sleep(1000);
    for (const f of files) await herald('delete', f);
    await sleep(1000);
    rounds++;
  }
  return rounds;
}
