/**
 * Named ports: a rule's `port: http` resolves, per selected service, to the
 * service ports whose targetPort is "http" (same protocol); nothing to
 * resolve → the rule matches nothing there. Pure resolution, then the
 * pipeline regenerating a service whose ports change under such a rule.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { systemClock } from '../../../src/core/clock.js';
import { silentLogger } from '../../../src/core/logger.js';
import { StateDB, type RWTable } from '../../../src/core/statedb/index.js';
import { evaluate } from '../../../src/controlplane/policy/evaluate.js';
import { toPrefix, type RuleSetInput } from '../../../src/controlplane/policy/intake.js';
import { PROTO, type PolicyRule } from '../../../src/controlplane/policy/model.js';
import { resolveNamedPorts } from '../../../src/controlplane/policy/named-ports.js';
import { PolicyPipeline } from '../../../src/controlplane/policy/pipeline.js';
import type { ServicePort } from '../../../src/controlplane/policy/shared.js';
import { trace } from '../../../src/controlplane/policy/trace.js';
import { servicePolicyTable, type ServicePolicyRow } from '../../../src/datapath/tables/service-policy.js';

const PORTS: ServicePort[] = [
  { proto: PROTO.TCP, port: 80, targetPort: 'http' },
  { proto: PROTO.TCP, port: 8443, targetPort: 'https' },
  { proto: PROTO.UDP, port: 53, targetPort: 'dns' },
  { proto: PROTO.TCP, port: 9000 },
];
const everyone = [{ cidr: toPrefix('0.0.0.0/0'), except: [] }];
const src = toPrefix('192.0.2.9/32').addr;

describe('named ports: resolution', () => {
  it('a name resolves to the service ports targeting it, protocol by protocol; numeric ports stay', () => {
    const rule: PolicyRule = { id: 1, verdict: 'allow', peers: everyone, ports: [{ proto: 6, lo: 9000, hi: 9000 }], namedPorts: [{ proto: 6, name: 'http' }, { proto: 17, name: 'http' }, { proto: 17, name: 'dns' }], origin: 't' };
    const [r] = resolveNamedPorts([rule], PORTS);
    assert.deepEqual(r!.ports, [{ proto: 6, lo: 9000, hi: 9000 }, { proto: 6, lo: 80, hi: 80 }, { proto: 17, lo: 53, hi: 53 }]);
    assert.equal(r!.namedPorts, undefined);
    assert.equal(evaluate([r!], { family: 4, src, proto: 6, dport: 80 }).verdict, 'allow');
    assert.equal(evaluate([r!], { family: 4, src, proto: 6, dport: 8443 }).verdict, 'deny');
  });

  it('a name the service does not target matches nothing there (not every port)', () => {
    const rule: PolicyRule = { id: 1, verdict: 'allow', peers: everyone, ports: [], namedPorts: [{ proto: 6, name: 'grpc' }], origin: 't' };
    const [r] = resolveNamedPorts([rule], PORTS);
    assert.deepEqual(r!.ports, []);
    for (const p of PORTS) assert.equal(evaluate([r!], { family: 4, src, proto: p.proto, dport: p.port }).verdict, 'deny');
  });
});

describe('named ports: the pipeline', () => {
  it('a service is regenerated when the port its rule names moves', async () => {
    const db = new StateDB([servicePolicyTable]);
    const p = new PolicyPipeline({ db, table: servicePolicyTable as RWTable<ServicePolicyRow>, clock: systemClock, log: silentLogger });
    const rows = () => db.readTxn().list(servicePolicyTable);
    const svc = (ports: ServicePort[]) => ({ service: 'shop/web', namespace: 'shop', labels: { app: 'web' }, ips: ['198.51.100.10'], ports });
    const set: RuleSetInput = {
      key: 'CiliumNetworkPolicy/shop/web-in',
      rules: [{ verdict: 'allow', peers: everyone, ports: [], namedPorts: [{ proto: 6, name: 'http' }], selection: { kind: 'labels', namespace: 'shop', selector: { matchLabels: { app: 'web' }, matchExpressions: [] } }, origin: 'CiliumNetworkPolicy shop/web-in spec.ingress[0]' }],
    };
    await p.submit({ kind: 'services', upsert: [svc(PORTS)] });
    await p.submit({ kind: 'rules', sets: [set] });
    const tcp = (dport: number) => trace(rows(), '198.51.100.10', { family: 4, src, proto: 6, dport }).verdict;
    assert.equal(tcp(80), 'allow');
    assert.equal(tcp(8080), 'deny');
    const r = await p.submit({ kind: 'services', upsert: [svc([{ proto: 6, port: 8080, targetPort: 'http' }])] });
    assert.deepEqual(r.regenerated, ['shop/web']);
    assert.equal(tcp(8080), 'allow');
    assert.equal(tcp(80), 'deny');
  });
});
