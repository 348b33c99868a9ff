/**
 * A minimal etcd key tool for bench/faults, run inside a lab host (the lab's
 * etcd is reachable only from its namespaces): writes a key without a lease,
 * and removes it again so the next trial starts from a clean store.
 *
 *   etcd-keys.ts <endpoint> put <key> <value>     (no lease)
 *   etcd-keys.ts <endpoint> del <key>
 */
import { Etcd3 } from 'etcd3';

const [endpoint, op, key, value] = process.argv.slice(2);
if (!endpoint || !op || !key) {
  process.stderr.write('usage: etcd-keys.ts <endpoint> put|del <key> [value]\n');
  process.exit(2);
}
const client = new Etcd3({ hosts: [endpoint] });
try {
  if (op === 'put') await client.put(key).value(value ?? '');
  else if (op === 'del') await client.delete().key(key);
  else throw new Error(`unknown op ${op}`);
} finally {
  client.close();
}
