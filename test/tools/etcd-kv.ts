/**
 * A minimal etcd key tool for lab tests (Debian ships no etcdctl with etcd
 * 3.4's server package): run inside a lab host to inject hostile store
 * contents — keys without a lease, garbage values.
 *
 *   etcd-kv.ts <endpoint> put <key> <value>     (no lease)
 *   etcd-kv.ts <endpoint> get <key>             → JSON {value, lease} or null
 */
import { Etcd3 } from 'etcd3';

const [endpoint, op, key, value] = process.argv.slice(2);
if (!endpoint || !op || !key) {
  process.stderr.write('usage: etcd-kv.ts <endpoint> put|get <key> [value]\n');
  process.exit(2);
}
const client = new Etcd3({ hosts: [endpoint] });
try {
  if (op === 'put') {
    await client.put(key).value(value ?? '');
  } else if (op === 'get') {
    const res = await client.get(key).exec();
    const kv = res.kvs[0];
    process.stdout.write(JSON.stringify(kv ? { value: kv.value.toString(), lease: String(kv.lease) } : null) + '\n');
  } else {
    throw new Error(`unknown op ${op}`);
  }
} finally {
  client.close();
}
