/**
 * Objects of kinds herald does not read (issue 18) are other controllers'
 * business: the publisher logs one info line per kind for each new input
 * (with the count), not one per object, and nothing again for the same input.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Logger } from '../../../src/core/logger.js';
import { parseManifests } from '../../../src/intent/index.js';
import { SnapshotPublisher } from '../../../src/intent/sources/publisher.js';

const MIXED = `
apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: pool }
spec: { blocks: [{ cidr: 198.51.100.0/28 }] }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: a, namespace: default }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: b, namespace: default }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: c, namespace: default }
---
apiVersion: cilium.io/v2
kind: CiliumEgressGatewayPolicy
metadata: { name: egress }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: cm, namespace: default }
`;

function recorder() {
  const infos: { obj: Record<string, unknown>; msg: string }[] = [];
  const log: Logger = {
    debug() {},
    info: (obj, msg) => infos.push({ obj: obj as Record<string, unknown>, msg: msg ?? '' }),
    warn() {},
    error() {},
    child: () => log,
  };
  return { infos, log };
}

test('ignored kinds: one info line per kind with its count, and none again for the same input', async () => {
  const { infos, log } = recorder();
  const snapshots: unknown[] = [];
  const publisher = new SnapshotPublisher({ onSnapshot: (s) => snapshots.push(s), onError: () => assert.fail('no error expected') }, log);
  assert.equal(await publisher.offer('h1', () => parseManifests(MIXED, 'mixed.yaml')), 'published');
  assert.equal(snapshots.length, 1, 'what herald reads is still loaded');
  const ignored = infos.filter((l) => l.msg === 'ignoring objects of a kind herald does not read');
  assert.deepEqual(
    ignored.map((l) => [l.obj.kind, l.obj.count, l.obj.apiVersion, l.obj.firstAt]).sort(),
    [
      ['CiliumEgressGatewayPolicy', 1, 'cilium.io/v2', 'mixed.yaml'],
      ['ConfigMap', 1, 'v1', 'mixed.yaml'],
      ['Deployment', 3, 'apps/v1', 'mixed.yaml'],
    ],
    'three Deployments are one line',
  );

  assert.equal(await publisher.offer('h1', () => assert.fail('the same input is not read again')), 'same');
  assert.equal(infos.filter((l) => l.msg.startsWith('ignoring')).length, 3, 'nothing logged for the same input');

  // A new input is looked at afresh: its ignored kinds are reported again, still one line per kind.
  assert.equal(await publisher.offer('h2', () => parseManifests(`${MIXED}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: { name: d, namespace: default }\n`, 'mixed.yaml')), 'published');
  const second = infos.filter((l) => l.msg.startsWith('ignoring')).slice(3);
  assert.deepEqual(second.map((l) => [l.obj.kind, l.obj.count]).sort(), [
    ['CiliumEgressGatewayPolicy', 1],
    ['ConfigMap', 1],
    ['Deployment', 4],
  ]);
});
