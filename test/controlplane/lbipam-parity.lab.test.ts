/**
 * Cases of Cilium's LB-IPAM test suite (cilium:operator/pkg/lbipam/
 * lbipam_test.go) as scenarios against a real agent: manifests in a watched
 * directory, results read from `herald status --json`. The agent runs with
 * `--lb-classes io.cilium/l2-announcer`, so every served Service names that
 * class (TestRequiredLBClass). Documentation addresses only.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import { HERALD, labSkipReason, startAgentReady, waitFor } from '../helpers/lab-tools.js';

const CLASS = 'io.cilium/l2-announcer';
const POOL = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: parity-pool }
spec:
  blocks:
  - cidr: 198.51.100.0/24
`;

interface SvcOpts {
  annotations?: Record<string, string>;
  ports?: { port: number; protocol?: string }[];
  lbClass?: string | null;
  extraSpec?: string;
}

function service(name: string, o: SvcOpts = {}): string {
  const annotations = Object.entries(o.annotations ?? {})
    .map(([k, v]) => `    ${JSON.stringify(k)}: ${JSON.stringify(v)}`)
    .join('\n');
  const ports = (o.ports ?? [{ port: 80 }]).map((p, i) => `  - { name: p${i}, port: ${p.port}, protocol: ${p.protocol ?? 'TCP'} }`).join('\n');
  const cls = o.lbClass === null ? '' : `  loadBalancerClass: ${o.lbClass ?? CLASS}\n`;
  return `apiVersion: v1
kind: Service
metadata:
  name: ${name}
  namespace: default
${annotations ? `  annotations:\n${annotations}\n` : ''}spec:
  type: LoadBalancer
${cls}${o.extraSpec ?? ''}  ports:
${ports}
`;
}

interface Status {
  services: Array<{ service: string; ingress: string[]; condition: { status: string; reason: string; message: string }; warnings?: string[] }>;
}

describe('LB-IPAM parity with Cilium against a real agent (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let node: Host;
  let agent: LabProcess;
  let dir: string;

  const status = (): Status => JSON.parse(node.must(HERALD, ['status', '--json', '--status-socket', node.statusSocket])) as Status;
  const svc = (name: string) => status().services.find((s) => s.service === `default/${name}`);
  const write = (file: string, text: string): void => {
    writeFileSync(join(dir, `${file}.tmp`), text);
    renameSync(join(dir, `${file}.tmp`), join(dir, file));
  };
  /** Waits until the service has `count` ingress IPs, and returns them. */
  const ingressOf = async (name: string, count = 1): Promise<string[]> => {
    await waitFor(() => (svc(name)?.ingress.length ?? 0) === count, { what: `${name} to get ${count} IP(s)`, timeoutMs: 20_000, onTimeout: () => JSON.stringify(status().services) });
    return svc(name)!.ingress;
  };

  before(async () => {
    lab = Lab.create({ nodes: 1, tag: 'lbp' });
    node = lab.nodes[0]!;
    dir = mkdtempSync(join(tmpdir(), 'herald-lbipam-parity-'));
    write('pool.yaml', POOL);
    agent = await startAgentReady(node, ['--manifests', dir, '--lb-classes', CLASS]);
  });

  after(async () => {
    await agent?.stop();
    await lab?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  // mirrors TestRequiredLBClass
  test('with --lb-classes, a class-less Service is left alone until it names a listed class', async () => {
    write('plain.yaml', service('plain', { lbClass: null }));
    write('marker.yaml', service('marker', { ports: [{ port: 9 }] }));
    await ingressOf('marker');
    assert.equal(svc('plain'), undefined, 'a class-less service is not served');
    write('plain.yaml', service('plain'));
    assert.equal((await ingressOf('plain')).length, 1);
    unlinkSync(join(dir, 'plain.yaml'));
    unlinkSync(join(dir, 'marker.yaml'));
    await waitFor(() => svc('marker') === undefined && svc('plain') === undefined, { what: 'deleted services to go', timeoutMs: 20_000 });
  });

  // mirrors TestSharedServiceUpdatedSharingKey, and the oldest-first offer of a key's IPs
  test("a joining service gets the sharing key's oldest IP; same port+protocol needs another", async () => {
    write('a.yaml', service('share-a', { annotations: { 'lbipam.cilium.io/sharing-key': 'k', 'lbipam.cilium.io/ips': '198.51.100.200' } }));
    assert.deepEqual(await ingressOf('share-a'), ['198.51.100.200']);
    write('b.yaml', service('share-b', { annotations: { 'lbipam.cilium.io/sharing-key': 'k' } }));
    const b = await ingressOf('share-b');
    assert.notDeepEqual(b, ['198.51.100.200'], 'same port and protocol cannot share');
    write('c.yaml', service('share-c', { annotations: { 'lbipam.cilium.io/sharing-key': 'k' }, ports: [{ port: 443 }] }));
    assert.deepEqual(await ingressOf('share-c'), ['198.51.100.200'], 'the oldest IP of the key, not the lowest');
    // Changing the key moves c away (TestSharedServiceUpdatedSharingKey).
    write('c.yaml', service('share-c', { annotations: { 'lbipam.cilium.io/sharing-key': 'other' }, ports: [{ port: 443 }] }));
    await waitFor(() => { const ip = svc('share-c')?.ingress; return ip !== undefined && ip.length === 1 && ip[0] !== '198.51.100.200' && ip[0] !== b[0]; }, { what: 'share-c to move to its own IP', timeoutMs: 20_000 });
    assert.deepEqual(svc('share-a')?.ingress, ['198.51.100.200']);
  });

  test('the same port with another protocol shares (Cilium >= 1.17)', async () => {
    write('dns-tcp.yaml', service('dns-tcp', { annotations: { 'lbipam.cilium.io/sharing-key': 'dns' }, ports: [{ port: 53, protocol: 'TCP' }] }));
    const tcp = await ingressOf('dns-tcp');
    write('dns-udp.yaml', service('dns-udp', { annotations: { 'lbipam.cilium.io/sharing-key': 'dns' }, ports: [{ port: 53, protocol: 'UDP' }] }));
    assert.deepEqual(await ingressOf('dns-udp'), tcp);
  });

  // mirrors TestIsCompatibleReasons ("local policy and selectors differ with the opt-in on both")
  test('sharing-permit-different-pods on both lets ETP=Local services with different selectors share', async () => {
    const permit = { 'lbipam.cilium.io/sharing-key': 'local', 'lbipam.cilium.io/sharing-permit-different-pods': 'true' };
    const local = (app: string) => `  externalTrafficPolicy: Local\n  selector: { app: ${app} }\n`;
    write('l1.yaml', service('local-1', { annotations: permit, extraSpec: local('one') }));
    const ip = await ingressOf('local-1');
    write('l2.yaml', service('local-2', { annotations: permit, ports: [{ port: 81 }], extraSpec: local('two') }));
    assert.deepEqual(await ingressOf('local-2'), ip);
    write('l3.yaml', service('local-3', { annotations: { 'lbipam.cilium.io/sharing-key': 'local' }, ports: [{ port: 82 }], extraSpec: local('three') }));
    const l3 = await ingressOf('local-3');
    assert.notDeepEqual(l3, ip, 'without the opt-in on both, different selectors do not share');
  });

  // mirrors TestLBIPAM_serviceIPFamilyRequest (PreferDual, both families enabled) against a pool of one family
  test('PreferDualStack against an IPv4-only pool: the IPv4 address, condition False / no_pool', async () => {
    write('dual.yaml', service('dual', { ports: [{ port: 8080 }], extraSpec: '  ipFamilyPolicy: PreferDualStack\n' }));
    await ingressOf('dual');
    await waitFor(() => svc('dual')?.condition.reason === 'no_pool', { what: 'no_pool on dual', timeoutMs: 20_000 });
    assert.equal(svc('dual')?.condition.status, 'False');
    assert.match(svc('dual')!.condition.message, /IPv6/);
  });

  test('an io.cilium/* annotation herald does not implement is a warning in status and in validate', async () => {
    write('mesh.yaml', service('mesh', { ports: [{ port: 8443 }], annotations: { 'io.cilium/global-service': 'true' } }));
    await ingressOf('mesh');
    assert.deepEqual(svc('mesh')?.warnings, ['io.cilium/global-service: ignored: cluster mesh global services are not implemented (service.cilium.io/global)']);
    const human = node.must(HERALD, ['status', '--status-socket', node.statusSocket]);
    assert.match(human, /warning: default\/mesh: io\.cilium\/global-service: ignored/);
    const validate = node.must(HERALD, ['validate', join(dir, 'mesh.yaml')]);
    assert.match(validate, /warning: metadata\.annotations\["io\.cilium\/global-service"\]: ignored/);
    assert.match(validate, /ok, 1 warning/);
  });
});
