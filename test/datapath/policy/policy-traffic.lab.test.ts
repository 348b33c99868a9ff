/**
 * Service traffic policy with real traffic: a client and a node in network
 * namespaces, the whole policy spine on the node (lab/policy-node.ts:
 * manifests → pipeline → table → reconciler → BPF maps → tc ingress), curl
 * and ping from the client. Allowed sources connect, others time out
 * (dropped, not refused), IPv4 and IPv6; Neighbor Discovery keeps working;
 * a bad file changes nothing; and a continuous probe loses nothing while the
 * policy is replaced again and again. Then: two services sharing an IP each
 * keep their own policy; `icmps` echo rules (ping passes, ports do not);
 * fragmented UDP datagrams (kernel-fragmented, IPv4 and IPv6) decided by
 * their first fragment; TCP SYNs behind IPv6 hop-by-hop and destination
 * options headers (scapy, test/tools/policy_ext6.py) decided by their port;
 * a named port resolved against the service's targetPort names; sources
 * from a CiliumCIDRGroup (cidrGroupRef) with an except.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Lab, waitFor, type Host, type LabProcess } from '../../../lab/lab.js';
import { labSkipReason } from '../../helpers/lab-tools.js';

const VIP4 = '198.51.100.10';
const VIP6 = '2001:db8::10';
const OPEN4 = '198.51.100.11'; // on the node, in no service: never policed
const skip = labSkipReason();

const SERVICE = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels: {app: web}
  annotations: {lbipam.cilium.io/ips: "${VIP4},${VIP6}"}
spec:
  type: LoadBalancer
  ports: [{port: 8080}]
`;

const POLICY_PORTS = `${SERVICE}---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDR: [192.0.2.1/32, "2001:db8::1/128"]
    toPorts: [{ports: [{port: "8080", protocol: TCP}]}]
`;

// Two shapes that both admit 192.0.2.1 through different prefixes and rules.
const POLICY_A = `${SERVICE}---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDR: [192.0.2.0/24]
`;
const POLICY_B = `${SERVICE}---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingressDeny:
  - fromCIDR: [192.0.2.200/32]
  ingress:
  - fromCIDRSet: [{cidr: 192.0.2.0/25, except: [192.0.2.0/30]}]
  - fromCIDR: [192.0.2.1/32]
  - fromCIDR: [192.0.2.0/24]
    toPorts: [{ports: [{port: "0", protocol: ANY}]}]
  - fromEntities: [world]
    toPorts: [{ports: [{port: "9"}]}]
`;

// Two services on one IP (LB-IPAM sharing key), each with its own policy on its own port.
const SHARED = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels: {app: web}
  annotations: {lbipam.cilium.io/ips: "${VIP4}", lbipam.cilium.io/sharing-key: shop}
spec:
  type: LoadBalancer
  ports: [{port: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: shop
  labels: {app: api}
  annotations: {lbipam.cilium.io/ips: "${VIP4}", lbipam.cilium.io/sharing-key: shop}
spec:
  type: LoadBalancer
  ports: [{port: 8081}]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDR: [192.0.2.1/32]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: api-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: api}}
  ingress:
  - fromCIDR: [192.0.2.5/32]
`;

// ICMP echo from a whole range, TCP and UDP from one host each family (two ports).
const EXT = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels: {app: web}
  annotations: {lbipam.cilium.io/ips: "${VIP4},${VIP6}"}
spec:
  type: LoadBalancer
  ports: [{name: http, port: 8080}, {name: dns, port: 5353, protocol: UDP}]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDR: [192.0.2.1/32, "2001:db8::1/128"]
    toPorts: [{ports: [{port: "8080", protocol: TCP}, {port: "5353", protocol: UDP}]}]
  - fromCIDR: [192.0.2.0/24, "2001:db8::/64"]
    icmps: [{fields: [{type: EchoRequest}, {type: EchoRequest, family: IPv6}]}]
`;

// A named port: `port: http` is the service port whose targetPort is "http" (8080), not 8081.
const NAMED = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels: {app: web}
  annotations: {lbipam.cilium.io/ips: "${VIP4}"}
spec:
  type: LoadBalancer
  ports: [{name: http, port: 8080, targetPort: http}, {name: alt, port: 8081, targetPort: 8081}]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDR: [192.0.2.0/24]
    toPorts: [{ports: [{port: http, protocol: TCP}]}]
`;

// Sources from a CiliumCIDRGroup, one address carved out by except.
const GROUP = `${SERVICE}---
apiVersion: cilium.io/v2alpha1
kind: CiliumCIDRGroup
metadata: {name: office}
spec:
  externalCIDRs: [192.0.2.0/29, "2001:db8::/120"]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDRSet: [{cidrGroupRef: office, except: [192.0.2.5/32]}]
`;

// Cilium's enableDefaultDeny: {ingress: false}: the allow rule changes nothing, the deny rule still drops;
// a second policy without the switch makes the service default deny again ("enabled if any policy requests it").
const NO_DEFAULT_DENY = `${SERVICE}---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  enableDefaultDeny: {ingress: false}
  ingress:
  - fromCIDR: [192.0.2.1/32]
  ingressDeny:
  - fromCIDR: [192.0.2.5/32]
`;
const AND_STRICT = `${NO_DEFAULT_DENY}---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-strict, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDR: [192.0.2.1/32]
`;

describe('service traffic policy with real traffic', { skip }, () => {
  let lab: Lab;
  let client: Host;
  let node: Host;
  let dir: string;
  let file: string;
  let spine: LabProcess;

  const realizedCount = () => (spine.text().match(/^realized /gm) ?? []).length;
  async function apply(text: string): Promise<void> {
    const n = realizedCount();
    writeFileSync(file, text);
    spine.signal('SIGHUP');
    await waitFor(() => realizedCount() > n, { timeoutMs: 10_000, what: 'the policy to be realized', onTimeout: () => spine.text().slice(-2000) });
  }
  async function drops(): Promise<number> {
    const count = () => (spine.text().match(/^drops \d+$/gm) ?? []).length;
    const n = count();
    spine.signal('SIGUSR2');
    await waitFor(() => count() > n, { timeoutMs: 10_000, what: 'the drop counters', onTimeout: () => spine.text().slice(-2000) });
    const all = [...spine.text().matchAll(/^drops (\d+)$/gm)];
    return Number(all[all.length - 1]![1]);
  }
  /** One UDP datagram of `size` bytes to port 5353 (3000: fragmented on the 1500-byte link); the echo server's name, or '' on timeout. */
  const udpAsk = (src: string, dst: string, size: number) =>
    client.exec('/usr/bin/python3', [
      '-c',
      'import socket,sys; f=socket.AF_INET6 if ":" in sys.argv[2] else socket.AF_INET; s=socket.socket(f,socket.SOCK_DGRAM); s.bind((sys.argv[1],0)); s.settimeout(1.5); s.sendto(b"x"*int(sys.argv[3]),(sys.argv[2],5353)); print(s.recv(200).decode().split()[0])',
      src,
      dst,
      String(size),
    ]).stdout.trim();
  const synExt6 = (src: string, port: number, plain = false) => {
    const mac = (JSON.parse(node.must('ip', ['-j', 'link', 'show', 'dev', 'eth0'])) as { address: string }[])[0]!.address;
    return client.exec('/usr/bin/python3', ['test/tools/policy_ext6.py', 'eth0', mac, src, VIP6, String(port), ...(plain ? ['--plain'] : [])]).stdout.trim();
  };
  const ping = (src: string, dst: string) => client.exec('ping', ['-n', '-q', '-I', src, '-c', '1', '-W', '1', dst]).code;
  const curl = (src: string, url: string) =>
    client.exec('curl', ['-s', '-g', '--interface', src, '--connect-timeout', '1', '--max-time', '2', url]);

  before(async () => {
    lab = Lab.create({ nodes: 1, tag: 'pol' });
    client = lab.client;
    node = lab.nodes[0]!;
    client.must('ip', ['addr', 'add', '192.0.2.5/24', 'dev', 'eth0']);
    client.must('ip', ['addr', 'add', '192.0.2.3/24', 'dev', 'eth0']);
    client.must('ip', ['addr', 'add', '2001:db8::1/64', 'dev', 'eth0', 'nodad']);
    client.must('ip', ['addr', 'add', '2001:db8::5/64', 'dev', 'eth0', 'nodad']);
    node.must('ip', ['addr', 'add', `${VIP4}/32`, 'dev', 'eth0']);
    node.must('ip', ['addr', 'add', `${OPEN4}/32`, 'dev', 'eth0']);
    node.must('ip', ['addr', 'add', `${VIP6}/64`, 'dev', 'eth0', 'nodad']);
    dir = mkdtempSync(join(tmpdir(), 'herald-policy-'));
    file = join(dir, 'policy.yaml');
    writeFileSync(file, POLICY_PORTS);
    const server = node.spawn('http', 'node', ['--import', 'tsx', 'lab/http-server.ts', '--port', '8080', '--name', 'n1', '--host', '::']);
    const server2 = node.spawn('http2', 'node', ['--import', 'tsx', 'lab/http-server.ts', '--port', '8081', '--name', 'api', '--host', '::']);
    const udp = node.spawn('udp', 'node', ['--import', 'tsx', 'lab/udp-echo.ts', '--port', '5353', '--name', 'n1', '--host', '::']);
    await server.waitForOutput('listening');
    await server2.waitForOutput('listening');
    await udp.waitForOutput('listening');
    spine = node.spawn('policy', 'node', ['--import', 'tsx', 'lab/policy-node.ts', '--manifest', file, '--iface', 'eth0']);
    await spine.waitForOutput(/^realized /m, 20_000);
  });

  after(async () => {
    await lab?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('allowed sources reach the service port; other sources and ports are dropped (IPv4 and IPv6)', () => {
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).stdout, 'n1\n');
    const denied = curl('192.0.2.5', `http://${VIP4}:8080/`);
    assert.equal(denied.code, 28, `timed out (dropped, not refused): ${denied.code} ${denied.stdout}`);
    // Another port from the allowed source: dropped too (a pass would be "connection refused", code 7).
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8081/`).code, 28);
    assert.equal(curl('2001:db8::1', `http://[${VIP6}]:8080/`).stdout, 'n1\n');
    assert.equal(curl('2001:db8::5', `http://[${VIP6}]:8080/`).code, 28);
  });

  test('an IP no policy selects stays open; ARP and Neighbor Discovery are never filtered', () => {
    assert.equal(curl('192.0.2.5', `http://${OPEN4}:8080/`).stdout, 'n1\n');
    client.exec('ip', ['neigh', 'flush', 'dev', 'eth0']);
    // The connections below need fresh ARP / NDP resolution of the policed IPs.
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).stdout, 'n1\n');
    assert.equal(curl('2001:db8::1', `http://[${VIP6}]:8080/`).stdout, 'n1\n');
  });

  test('a bad policy file is rejected with a coded error and the previous revision stays enforced', async () => {
    const n = realizedCount();
    writeFileSync(file, POLICY_PORTS.replace('192.0.2.1/32', '192.0.2.1/33'));
    spine.signal('SIGHUP');
    await spine.waitForOutput('HERALD_POLICY_INVALID_CIDR');
    assert.match(spine.text(), /policy\.yaml:\d+:\d+: document 2 \(CiliumNetworkPolicy \\"shop\/web-in\\"\): HERALD_POLICY_INVALID_CIDR: spec\.ingress\[0\]\.fromCIDR\[0\]/);
    assert.equal(realizedCount(), n);
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).stdout, 'n1\n');
    assert.equal(curl('192.0.2.5', `http://${VIP4}:8080/`).code, 28);
  });

  test('replace under traffic: a continuous probe from an allowed source loses nothing', async () => {
    await apply(POLICY_A);
    const dropsBefore = await drops();
    const count = 1500;
    const probe = client.execAsync('ping', ['-n', '-q', '-I', '192.0.2.1', '-i', '0.004', '-W', '1', '-c', String(count), VIP4]);
    let replaces = 0;
    const started = Date.now();
    while (Date.now() - started < 4500) {
      await apply(replaces % 2 === 0 ? POLICY_B : POLICY_A);
      replaces++;
    }
    const r = await probe;
    const m = /(\d+) packets transmitted, (\d+) received/.exec(r.stdout);
    assert.ok(m, r.stdout);
    assert.ok(replaces >= 10, `only ${replaces} replaces during the probe`);
    const dropped = (await drops()) - dropsBefore;
    assert.equal(dropped, 0, `the policy dropped ${dropped} packets of the allowed flow during ${replaces} replaces`);
    assert.equal(Number(m[2]), Number(m[1]), `lost probes during ${replaces} replaces (policy drops: ${dropped}): ${r.stdout}`);
    // The shapes really differ: under B, ICMP from 192.0.2.3 (in the except; only a port-scoped rule covers it) is dropped; under A it passes.
    await apply(POLICY_B);
    assert.notEqual(client.exec('ping', ['-n', '-q', '-I', '192.0.2.3', '-c', '1', '-W', '1', VIP4]).code, 0);
    await apply(POLICY_A);
    assert.equal(client.exec('ping', ['-n', '-q', '-I', '192.0.2.3', '-c', '1', '-W', '1', VIP4]).code, 0);
  });

  test('two services sharing an IP each keep their own policy on their own port', async () => {
    await apply(SHARED);
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).stdout, 'n1\n', 'web admits 192.0.2.1');
    assert.equal(curl('192.0.2.5', `http://${VIP4}:8080/`).code, 28, 'web drops 192.0.2.5');
    assert.equal(curl('192.0.2.5', `http://${VIP4}:8081/`).stdout, 'api\n', 'api admits 192.0.2.5');
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8081/`).code, 28, 'api drops 192.0.2.1');
  });

  test('icmps: echo requests pass from the whole range, which reaches no port (IPv4 and IPv6)', async () => {
    await apply(EXT);
    assert.equal(ping('192.0.2.5', VIP4), 0, 'ping from the range');
    assert.equal(ping('2001:db8::5', VIP6), 0, 'ping6 from the range');
    assert.equal(curl('192.0.2.5', `http://${VIP4}:8080/`).code, 28, 'the icmps rule allows no port');
    assert.equal(curl('2001:db8::5', `http://[${VIP6}]:8080/`).code, 28);
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).stdout, 'n1\n');
  });

  test('fragmented UDP datagrams are decided by their first fragment (IPv4, and IPv6 behind its fragment header)', async () => {
    await apply(EXT);
    assert.equal(udpAsk('192.0.2.1', VIP4, 100), 'n1');
    assert.equal(udpAsk('192.0.2.1', VIP4, 3000), 'n1', 'IPv4, 3 fragments');
    assert.equal(udpAsk('2001:db8::1', VIP6, 3000), 'n1', 'IPv6, 3 fragments');
    assert.equal(udpAsk('192.0.2.5', VIP4, 3000), '', 'a source the port does not admit');
    assert.equal(udpAsk('2001:db8::5', VIP6, 3000), '');
  });

  test('IPv6 extension headers before TCP: the packet is decided by its real port and source', async () => {
    await apply(EXT);
    assert.equal(synExt6('2001:db8::1', 8080, true), 'synack', 'control: no extension headers');
    assert.equal(synExt6('2001:db8::1', 8080), 'synack', 'hop-by-hop + destination options, allowed source and port');
    assert.equal(synExt6('2001:db8::5', 8080), 'none', 'same headers, a source the port does not admit');
  });

  test('a named port admits the service port targeting that name, not the others', async () => {
    await apply(NAMED);
    assert.equal(curl('192.0.2.5', `http://${VIP4}:8080/`).stdout, 'n1\n', 'port http = 8080');
    assert.equal(curl('192.0.2.5', `http://${VIP4}:8081/`).code, 28, '8081 targets no port named http');
  });

  test('cidrGroupRef: the CiliumCIDRGroup\'s CIDRs are the sources, except carves; without the group nothing is allowed', async () => {
    await apply(GROUP);
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).stdout, 'n1\n', 'in the group');
    assert.equal(curl('2001:db8::1', `http://[${VIP6}]:8080/`).stdout, 'n1\n', 'in the group (IPv6)');
    assert.equal(curl('192.0.2.5', `http://${VIP4}:8080/`).code, 28, 'carved out by except');
    await apply(GROUP.replace(/---\napiVersion: cilium.io\/v2alpha1\nkind: CiliumCIDRGroup\n[^-]*/, ''));
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).code, 28, 'the group is gone: its rule has no sources');
  });

  test('enableDefaultDeny {ingress: false}: what no rule denies passes, the deny rule drops; another policy without it brings default deny back', async () => {
    await apply(NO_DEFAULT_DENY);
    assert.equal(curl('192.0.2.3', `http://${VIP4}:8080/`).stdout, 'n1\n', 'no rule names it: not default deny');
    assert.equal(curl('2001:db8::5', `http://[${VIP6}]:8080/`).stdout, 'n1\n', 'IPv6 too');
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).stdout, 'n1\n', 'allowed');
    assert.equal(curl('192.0.2.5', `http://${VIP4}:8080/`).code, 28, 'the deny rule still drops');
    await apply(AND_STRICT);
    assert.equal(curl('192.0.2.3', `http://${VIP4}:8080/`).code, 28, 'a policy asking for default deny: dropped');
    assert.equal(curl('192.0.2.1', `http://${VIP4}:8080/`).stdout, 'n1\n', 'allowed');
  });
});
