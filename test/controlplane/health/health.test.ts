/**
 * Health checks of a node's own backends (issue 17, "health checks for
 * plain-host backends"): the annotations, the targets, the rise/fall state
 * machine, and the prober against real sockets on loopback.
 */
import assert from 'node:assert/strict';
import { createServer as createHttp } from 'node:http';
import { createServer as createTcp, type AddressInfo } from 'node:net';
import { test } from 'node:test';
import { computeBgpDesired } from '../../../src/controlplane/bgp/desired.js';
import { healthTargets, initialHealth, nextHealth, type HealthState } from '../../../src/controlplane/health/targets.js';
import { parseHealthCheck } from '../../../src/intent/health-check.js';
import { parseManifests } from '../../../src/intent/index.js';
import { NetBackendProber } from '../../../src/os/health-probe.js';

test('annotations: defaults, every field, and a precise issue per bad value (nothing half-taken)', () => {
  assert.deepEqual(parseHealthCheck({}), { issues: [] });
  assert.deepEqual(parseHealthCheck({ 'herald.io/health-check': 'tcp' }).spec, { type: 'tcp', path: '/', intervalMs: 2000, timeoutMs: 1000, rise: 2, fall: 3 });
  assert.deepEqual(
    parseHealthCheck({ 'herald.io/health-check': 'http', 'herald.io/health-check-port': '8081', 'herald.io/health-check-path': '/healthz', 'herald.io/health-check-interval': '200ms', 'herald.io/health-check-timeout': '100ms', 'herald.io/health-check-rise': '1', 'herald.io/health-check-fall': '2' }).spec,
    { type: 'http', port: 8081, path: '/healthz', intervalMs: 200, timeoutMs: 100, rise: 1, fall: 2 },
  );
  // A short interval lowers the default timeout with it.
  assert.equal(parseHealthCheck({ 'herald.io/health-check': 'tcp', 'herald.io/health-check-interval': '300ms' }).spec?.timeoutMs, 300);
  const bad = (a: Record<string, string>) => parseHealthCheck(a).issues.map((i) => `${i.key}: ${i.message}`);
  assert.deepEqual(bad({ 'herald.io/health-check': 'icmp' }), ['herald.io/health-check: "icmp" is not a health check type: tcp or http']);
  assert.deepEqual(bad({ 'herald.io/health-check': 'http', 'herald.io/health-check-port': '0', 'herald.io/health-check-rise': 'two', 'herald.io/health-check-interval': '2 s', 'herald.io/health-check-path': 'healthz' }), [
    'herald.io/health-check-port: "0" is not a whole number from 1 to 65535',
    'herald.io/health-check-path: "healthz" is not an absolute request path (starts with /, printable, no spaces)',
    'herald.io/health-check-interval: "2 s" is not a duration from 50ms to 3600s (e.g. 500ms, 2s)',
    'herald.io/health-check-rise: "two" is not a whole number from 1 to 100',
  ]);
  assert.deepEqual(bad({ 'herald.io/health-check': 'tcp', 'herald.io/health-check-timeout': '3s' }), ['herald.io/health-check-timeout: timeout 3000ms is longer than the interval 2000ms']);
  assert.deepEqual(bad({ 'herald.io/health-check-fall': '3' }), ['herald.io/health-check-fall: has no effect without herald.io/health-check: tcp or http']);
  assert.deepEqual(bad({ 'herald.io/health-check': 'tcp', 'herald.io/health-check-treshold': '3' }), [
    'herald.io/health-check-treshold: unknown health check annotation (known: herald.io/health-check, herald.io/health-check-port, herald.io/health-check-path, herald.io/health-check-interval, herald.io/health-check-timeout, herald.io/health-check-rise, herald.io/health-check-fall)',
  ]);
  assert.equal(parseHealthCheck({ 'herald.io/health-check': 'icmp', 'herald.io/health-check-fall': '3' }).spec, undefined);
});

const manifests = (annotations: string, port = '') => `apiVersion: v1
kind: Service
metadata: { name: web, namespace: default, annotations: { ${annotations} } }
spec: { type: LoadBalancer, ports: [{ port: 80, targetPort: 8080 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-1, namespace: default, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
${port}
endpoints:
- { addresses: [192.0.2.21], nodeName: node-a }
- { addresses: [192.0.2.22], nodeName: node-b }
`;

test('a bad health check annotation is a precise error naming the Service and the key; nothing is applied', () => {
  const load = parseManifests(manifests('"herald.io/health-check": udp'), 'f.yaml');
  assert.equal(load.snapshot, undefined);
  assert.match(load.errors.map((e) => `${e.path} ${e.message}`).join('\n'), /metadata\.annotations\["herald\.io\/health-check"\] "udp" is not a health check type: tcp or http/);
});

test('targets: only this node\'s endpoints of services asking for a check; the port from the annotation, the slice, then targetPort', () => {
  const snap = (a: string, p = '') => parseManifests(manifests(a, p), 'f.yaml').snapshot!;
  assert.deepEqual([...healthTargets(snap(''), 'node-a').keys()], [], 'no annotation, no check');
  assert.deepEqual([...healthTargets(snap('"herald.io/health-check": tcp'), 'node-a').values()].map((t) => [t.service, t.address, t.port]), [['default/web', '192.0.2.21', 8080]]);
  assert.deepEqual([...healthTargets(snap('"herald.io/health-check": tcp', 'ports: [{ port: 9090 }]'), 'node-a').values()].map((t) => t.port), [9090]);
  assert.deepEqual([...healthTargets(snap('"herald.io/health-check": tcp, "herald.io/health-check-port": "7070"', 'ports: [{ port: 9090 }]'), 'node-b').values()].map((t) => [t.address, t.port]), [['192.0.2.22', 7070]]);
});

test('rise and fall: up until `fall` failures in a row, down until `rise` successes in a row; a contrary result resets the count', () => {
  const run = (results: boolean[], rise = 2, fall = 3): boolean[] => {
    let s: HealthState = initialHealth;
    return results.map((ok) => (s = nextHealth(s, ok, rise, fall)).up);
  };
  assert.deepEqual(run([false, false, false]), [true, true, false]);
  assert.deepEqual(run([false, false, true, false, false, false]), [true, true, true, true, true, false], 'a pass resets the fall count');
  assert.deepEqual(run([false, false, false, true, false, true, true]), [true, true, false, false, false, false, true], 'a failure resets the rise count');
  assert.deepEqual(run([false, true], 1, 1), [false, true]);
});

test('BGP: a local backend failing its check is not ready; the route moves to the other backends or is withheld', () => {
  const intent = `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec: { bgpInstances: [{ name: i, localASN: 65000, peers: [{ name: r, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: p } }] }] }
---
apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: p }
spec: { families: [{ afi: ipv4, safi: unicast, advertisements: { matchLabels: { a: b } } }] }
---
apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: ad, labels: { a: b } }
spec: { advertisements: [{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: {} } }] }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default, annotations: { herald.io/health-check: tcp } }
spec: { type: LoadBalancer, externalTrafficPolicy: Local, ports: [{ port: 80 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-1, namespace: default, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
endpoints:
- { addresses: [192.0.2.21], nodeName: node-a }
- { addresses: [192.0.2.23], nodeName: node-a }
`;
  const snapshot = parseManifests(intent, 'f.yaml').snapshot!;
  const input = { snapshot, ingress: new Map([['default/web', ['203.0.113.5']]]), node: { name: 'node-a', labels: {} } };
  assert.deepEqual([...computeBgpDesired(input).routes.values()].map((r) => r.nextHops), [['192.0.2.21', '192.0.2.23']]);
  assert.deepEqual([...computeBgpDesired({ ...input, unhealthy: new Set(['default/web|192.0.2.21']) }).routes.values()].map((r) => r.nextHops), [['192.0.2.23']]);
  const none = computeBgpDesired({ ...input, unhealthy: new Set(['default/web|192.0.2.21', 'default/web|192.0.2.23']) });
  assert.equal(none.routes.size, 0);
  assert.deepEqual(none.withheld.map((w) => w.reason), ['no-ready-backend']);
});

test('the prober: TCP connect and HTTP status against real sockets on loopback, each bounded by its timeout', async () => {
  const prober = new NetBackendProber();
  const listen = <S extends { listen: (port: number, host: string, cb: () => void) => unknown; address: () => unknown }>(s: S) =>
    new Promise<number>((res) => s.listen(0, '127.0.0.1', () => res((s.address() as AddressInfo).port)));
  const tcp = createTcp((c) => c.end());
  const tcpPort = await listen(tcp);
  // A listener that never accepts in time: a full backlog would be racy; a server that never answers HTTP is not.
  const silent = createTcp(() => {});
  const silentPort = await listen(silent);
  const http = createHttp((req, res) => {
    res.writeHead(req.url === '/healthz' ? 200 : req.url === '/moved' ? 302 : 503, req.url === '/moved' ? { location: '/' } : {});
    res.end();
  });
  const httpPort = await listen(http);
  try {
    const p = (type: 'tcp' | 'http', port: number, path = '/') => prober.probe({ type, address: '127.0.0.1', port, path, timeoutMs: 300 });
    assert.deepEqual(await p('tcp', tcpPort), { ok: true, detail: 'connected' });
    tcp.close();
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(await p('tcp', tcpPort), { ok: false, detail: 'ECONNREFUSED' });
    assert.deepEqual(await p('http', httpPort, '/healthz'), { ok: true, detail: 'HTTP 200' });
    assert.deepEqual(await p('http', httpPort, '/moved'), { ok: true, detail: 'HTTP 302' });
    assert.deepEqual(await p('http', httpPort, '/broken'), { ok: false, detail: 'HTTP 503' });
    const t0 = Date.now();
    assert.deepEqual(await p('http', silentPort), { ok: false, detail: 'no answer within 300ms' });
    assert.ok(Date.now() - t0 < 3000);
  } finally {
    tcp.close();
    silent.close();
    http.close();
    http.closeAllConnections();
  }
});
