import assert from 'node:assert/strict';
import { test } from 'node:test';
import { arpRequest, buildArpFrame, gratuitousReply, gratuitousRequest, parseArpFrame } from '../../src/net/arp.js';

const MAC = '02:00:5e:00:53:0a';

test('the RFC 5227 announcement is a broadcast request with sender = target = the IP', () => {
  const f = gratuitousRequest(MAC, '198.51.100.7');
  assert.equal(f.length, 42);
  assert.equal(f.subarray(0, 6).toString('hex'), 'ffffffffffff');
  assert.equal(f.subarray(6, 12).toString('hex'), '02005e00530a');
  assert.equal(f.readUInt16BE(12), 0x0806);
  // htype 1, ptype 0x0800, hlen 6, plen 4, op 1
  assert.equal(f.subarray(14, 22).toString('hex'), '0001080006040001');
  assert.equal(f.subarray(22, 28).toString('hex'), '02005e00530a');
  assert.equal(f.subarray(28, 32).toString('hex'), 'c6336407');
  assert.equal(f.subarray(32, 38).toString('hex'), '000000000000');
  assert.equal(f.subarray(38, 42).toString('hex'), 'c6336407');
});

test('the reply form is a broadcast reply with THA broadcast', () => {
  const p = parseArpFrame(gratuitousReply(MAC, '198.51.100.7'))!;
  assert.deepEqual(
    { op: p.op, ethDst: p.ethDst, sha: p.sha, spa: p.spa, tha: p.tha, tpa: p.tpa },
    { op: 2, ethDst: 'ff:ff:ff:ff:ff:ff', sha: MAC, spa: '198.51.100.7', tha: 'ff:ff:ff:ff:ff:ff', tpa: '198.51.100.7' },
  );
});

test('parseArpFrame round-trips a request and rejects other frames', () => {
  const req = arpRequest({ srcMac: MAC, srcIp: '192.0.2.1', targetIp: '198.51.100.1' });
  assert.equal(parseArpFrame(req)?.tpa, '198.51.100.1');
  assert.equal(parseArpFrame(req.subarray(0, 41)), undefined, 'truncated');
  const wrongProto = buildArpFrame({ ...parseArpFrame(req)!, ptype: 0x86dd });
  assert.equal(parseArpFrame(wrongProto), undefined);
  const ipv6 = Buffer.from(req);
  ipv6.writeUInt16BE(0x86dd, 12);
  assert.equal(parseArpFrame(ipv6), undefined);
});

test('builders reject bad addresses with a precise error', () => {
  assert.throws(() => gratuitousRequest('02:00:5e:00:53', '198.51.100.7'), /not a MAC address/);
  assert.throws(() => gratuitousRequest(MAC, '198.51.100.700'), /not an IPv4 address/);
});
