/**
 * herald's three tc programs attached through tcx links on a real interface
 * (a lab namespace; the kernel's hooks read back by lab/tc-attached.py):
 * whatever order they arrive in, they run in herald's order (responder,
 * policy, LB); a second attach swaps the program inside the same link; a
 * link outlives the object that made it through its pin, and a detach takes
 * the link and its pin away.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host } from '../../lab/lab.js';
import { L2ResponderProgram } from '../../src/datapath/l2-responder/program.js';
import { LbProgram, detachLb } from '../../src/datapath/lb/program.js';
import { PolicyProgram } from '../../src/datapath/policy/program.js';
import { tcAttachMode } from '../../src/os/tc-attach.js';
import { labSkipReason, tcAttached } from '../helpers/lab-tools.js';

describe('tc programs through tcx links (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let node: Host;
  let ifindex: number;
  const programs: Array<{ dispose(): void }> = [];
  const names = () => tcAttached(node, 'eth0').ingress.tcx.map((p) => p.name);

  before(() => {
    lab = Lab.create({ nodes: 1, tag: 'tcx' });
    node = lab.nodes[0]!;
    ifindex = node.ifindex('eth0');
  });

  after(async () => {
    for (const p of programs) p.dispose();
    await lab?.destroy();
  });

  test('this kernel has tcx, so herald uses it', () => {
    assert.equal(tcAttachMode(), 'tcx');
  });

  test("arriving LB, policy, responder, they run in herald's order, each through its own pinned link", () => {
    node.enter(() => {
      const lb = LbProgram.load({ pinDir: node.pinDir, ctMapSize: 4096, maglevSize: 251 });
      programs.push(lb);
      lb.attach(ifindex);
      const policy = PolicyProgram.load({ pinDir: join(node.pinDir, 'policy') });
      programs.push(policy);
      policy.attach(ifindex);
      const responder = L2ResponderProgram.load({ pinDir: node.pinDir, responderMapSize: 1024 });
      programs.push(responder);
      responder.attach(ifindex);
    });
    const hook = tcAttached(node, 'eth0');
    assert.deepEqual(names(), ['herald_l2_ingre', 'herald_policy', 'herald_lb_ingre'], JSON.stringify(hook));
    assert.deepEqual(hook.egress.tcx.map((p) => p.name), ['herald_lb_egres']);
    assert.ok(hook.ingress.tcx.every((p) => p.linkId! > 0));
    assert.deepEqual([...hook.ingress.clsBpf, ...hook.egress.clsBpf], []);
    assert.ok(existsSync(join(node.pinDir, `tcx_herald_l2_ingress_${ifindex}`)));
    assert.ok(existsSync(join(node.pinDir, 'policy', `tcx_herald_policy_${ifindex}`)));
    assert.deepEqual(readdirSync(join(node.pinDir, 'lb')).filter((f) => f.startsWith('tcx_')).sort(), [`tcx_herald_lb_egress_${ifindex}_egress`, `tcx_herald_lb_ingress_${ifindex}`]);
  });

  test('a new program (a restarted agent) takes the same link and place; the old object closed leaves it running', () => {
    const before = tcAttached(node, 'eth0').ingress.tcx;
    node.enter(() => {
      for (const p of programs.splice(0)) p.dispose(); // the old agent exits: its links stay, pinned
      const policy = PolicyProgram.load({ pinDir: join(node.pinDir, 'policy') });
      programs.push(policy);
      policy.attach(ifindex);
    });
    const now = tcAttached(node, 'eth0').ingress.tcx;
    assert.deepEqual(now.map((p) => p.name), ['herald_l2_ingre', 'herald_policy', 'herald_lb_ingre']);
    assert.equal(now[1]!.linkId, before[1]!.linkId, 'the same link');
    assert.notEqual(now[1]!.progId, before[1]!.progId, 'a new program in it');
    assert.equal(now[0]!.progId, before[0]!.progId, 'the responder untouched');
  });

  test('detaching the policy and attaching it again puts it back between the responder and the LB', () => {
    node.enter(() => {
      const policy = programs[0] as PolicyProgram;
      assert.equal(policy.detach(ifindex), true);
    });
    assert.deepEqual(names(), ['herald_l2_ingre', 'herald_lb_ingre']);
    assert.equal(existsSync(join(node.pinDir, 'policy', `tcx_herald_policy_${ifindex}`)), false, 'its pin went with it');
    node.enter(() => (programs[0] as PolicyProgram).attach(ifindex));
    assert.deepEqual(names(), ['herald_l2_ingre', 'herald_policy', 'herald_lb_ingre']);
  });

  test('detaching the LB takes both of its links and pins', () => {
    node.enter(() => detachLb(ifindex, 'eth0', node.pinDir));
    const hook = tcAttached(node, 'eth0');
    assert.deepEqual(hook.ingress.tcx.map((p) => p.name), ['herald_l2_ingre', 'herald_policy']);
    assert.deepEqual(hook.egress.tcx, []);
    assert.deepEqual(readdirSync(join(node.pinDir, 'lb')).filter((f) => f.startsWith('tcx_')), []);
  });
});
