/**
 * linkHoldDecision: when a change of links holds the heartbeat (every served
 * link dark) and when it asks for a re-check (a served or formerly served
 * link back). Guards the lost-node case of Cilium #35507: a node whose port
 * returns after another took its IPs must not answer before re-checking.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { answeringLinks, linkHoldDecision, type LinkState } from '../../src/datapath/l2-responder/link-hold.js';

const link = (ifindex: number, name: string, up = true, carrier = true): LinkState => ({ ifindex, name, up, carrier });
const before = (...ls: LinkState[]) => answeringLinks(ls);

test('every served link lost carrier: hold, remembering which links were served', () => {
  const d = linkHoldDecision({ links: [link(2, 'eth0', true, false), link(3, 'eth1', true, false), link(4, 'eth2')], served: new Set([2, 3]), answeredBefore: before(link(2, 'eth0'), link(3, 'eth1'), link(4, 'eth2')), darkLinks: undefined });
  assert.equal(d.action, 'hold');
  assert.deepEqual([...(d as { darkLinks: ReadonlySet<number> }).darkLinks].sort(), [2, 3], 'only the served links');
});

test('a link administratively down counts as dark; one served link still answering is no hold', () => {
  assert.equal(linkHoldDecision({ links: [link(2, 'eth0', false, true)], served: new Set([2]), answeredBefore: before(link(2, 'eth0')), darkLinks: undefined }).action, 'hold');
  assert.equal(linkHoldDecision({ links: [link(2, 'eth0', true, false), link(3, 'eth1')], served: new Set([2, 3]), answeredBefore: before(link(2, 'eth0'), link(3, 'eth1')), darkLinks: undefined }).action, 'none');
});

test('no served link, or a hold already in force: nothing new', () => {
  assert.equal(linkHoldDecision({ links: [link(2, 'eth0', true, false)], served: new Set(), answeredBefore: before(link(2, 'eth0')), darkLinks: undefined }).action, 'none');
  assert.equal(linkHoldDecision({ links: [link(2, 'eth0', true, false)], served: new Set([2]), answeredBefore: before(link(2, 'eth0', true, false)), darkLinks: new Set([2]) }).action, 'none');
});

test('a served link regaining carrier asks for a re-check, naming the links that came back', () => {
  const d = linkHoldDecision({ links: [link(2, 'eth0'), link(3, 'eth1')], served: new Set([2, 3]), answeredBefore: before(link(2, 'eth0', true, false), link(3, 'eth1', true, false)), darkLinks: undefined });
  assert.deepEqual(d, { action: 'recheck', reason: 'eth0, eth1 regained carrier' });
});

test('a link served when all went dark counts as served while the map is empty (the control plane withdrew it)', () => {
  const d = linkHoldDecision({ links: [link(2, 'eth0')], served: new Set(), answeredBefore: before(link(2, 'eth0', true, false)), darkLinks: new Set([2]) });
  assert.deepEqual(d, { action: 'recheck', reason: 'eth0 regained carrier' });
  // Without that memory the same change is nothing.
  assert.equal(linkHoldDecision({ links: [link(2, 'eth0')], served: new Set(), answeredBefore: before(link(2, 'eth0', true, false)), darkLinks: undefined }).action, 'none');
});

test('a link that answered before, or was never seen, is no regain; nor is an unserved link', () => {
  assert.equal(linkHoldDecision({ links: [link(2, 'eth0')], served: new Set([2]), answeredBefore: before(link(2, 'eth0')), darkLinks: undefined }).action, 'none');
  assert.equal(linkHoldDecision({ links: [link(2, 'eth0')], served: new Set([2]), answeredBefore: new Map(), darkLinks: undefined }).action, 'none');
  assert.equal(linkHoldDecision({ links: [link(2, 'eth0'), link(5, 'eth9')], served: new Set([2]), answeredBefore: before(link(2, 'eth0'), link(5, 'eth9', true, false)), darkLinks: undefined }).action, 'none');
});

test('answeringLinks: up and carrier', () => {
  assert.deepEqual([...answeringLinks([link(1, 'a'), link(2, 'b', false, true), link(3, 'c', true, false)])], [[1, true], [2, false], [3, false]]);
});
