/**
 * The load balancer's map and program names and byte layouts against
 * bpf/lb.bpf.c: every name the agent opens exists in the C source, each codec
 * writes the exact bytes of its C struct and reads them back, and the small
 * helpers (protocol names, LRU eviction count) give their documented answers.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  affinity4Codec,
  affinity6Codec,
  backendCodec,
  ct4Codec,
  ct6Codec,
  ctEvictions,
  protoName,
  service4Codec,
  service6Codec,
  CT_SERVICE,
  LB_EGRESS_PROGRAM,
  LB_INGRESS_PROGRAM,
  LB_XDP_PROGRAM,
  MAP_CT4,
  MAP_CT6,
  MAP_LB4_AFFINITY,
  MAP_LB4_SERVICES,
  MAP_LB6_AFFINITY,
  MAP_LB6_SERVICES,
  MAP_LB_BACKENDS,
  MAP_LB_CONFIG,
  MAP_LB_MAGLEV,
  MAP_LB_POL_SVC_V4,
  MAP_LB_POL_SVC_V6,
  MAP_LB_STATS,
  MAP_LB_XDP_TARGETS,
  PROTO_NUMBER,
} from '../../src/datapath/lb/layout.js';
import { bpfSource, declaredMaps, entryPoint } from '../helpers/bpf-source.js';

const C_SOURCE = bpfSource('lb.bpf.c');

test('every map name is a map declared in bpf/lb.bpf.c', () => {
  const declared = declaredMaps(C_SOURCE);
  assert.ok(declared.size >= 14, 'the C source declares its maps');
  const names = [
    MAP_LB_XDP_TARGETS,
    MAP_LB_POL_SVC_V4,
    MAP_LB_POL_SVC_V6,
    MAP_LB4_SERVICES,
    MAP_LB6_SERVICES,
    MAP_LB_BACKENDS,
    MAP_LB_MAGLEV,
    MAP_CT4,
    MAP_CT6,
    MAP_LB_CONFIG,
    MAP_LB_STATS,
    MAP_LB4_AFFINITY,
    MAP_LB6_AFFINITY,
  ];
  for (const name of names) {
    assert.ok(declared.has(name), `map ${JSON.stringify(name)} declared in the C source (has ${[...declared].join(', ')})`);
  }
  assert.equal(new Set(names).size, names.length, 'distinct maps');
});

test('the program names are the tc and xdp entry points of bpf/lb.bpf.c', () => {
  for (const [sec, name] of [
    ['tc', LB_INGRESS_PROGRAM],
    ['tc', LB_EGRESS_PROGRAM],
    ['xdp', LB_XDP_PROGRAM],
  ] as const) {
    assert.ok(name.length > 0);
    assert.match(C_SOURCE, entryPoint(sec, name));
  }
  assert.notEqual(LB_INGRESS_PROGRAM, LB_EGRESS_PROGRAM);
});

test('protocol numbers and names: TCP 6, UDP 17, anything else its number', () => {
  assert.deepEqual(PROTO_NUMBER, { TCP: 6, UDP: 17 });
  assert.equal(protoName(6), 'TCP');
  assert.equal(protoName(17), 'UDP');
  assert.equal(protoName(1), '1');
  assert.equal(protoName(0), '0');
  assert.equal(protoName(58), '58');
  for (const p of ['TCP', 'UDP'] as const) assert.equal(protoName(PROTO_NUMBER[p]), p);
});

test('lb_service: id (u32 LE), backends and flags (u16 LE), affinity timeout (u32 LE), rr_next zero; 16 bytes, round trip', () => {
  const v = { id: 0x01020304, backends: 0x0506, flags: 0x0708, affinityTimeoutS: 0x0a0b0c0d };
  for (const codec of [service4Codec, service6Codec]) {
    assert.equal(codec.valueSize, 16);
    const b = codec.encodeValue(v);
    assert.equal(b.length, 16);
    assert.deepEqual([...b], [0x04, 0x03, 0x02, 0x01, 0x06, 0x05, 0x08, 0x07, 0x0d, 0x0c, 0x0b, 0x0a, 0, 0, 0, 0]);
    assert.deepEqual(codec.decodeValue(b), v);
    assert.deepEqual(codec.decodeValue(Buffer.from([0xff, 0, 0, 0, 3, 0, 2, 0, 0x10, 0x0e, 0, 0, 9, 9, 9, 9])), { id: 255, backends: 3, flags: 2, affinityTimeoutS: 3600 });
  }
  assert.equal(service4Codec.keySize, 8);
});

test('lb6_key: 16-byte VIP, port in network order at 16, proto at 18, pad zero', () => {
  const k = service6Codec.encodeKey({ vip: '2001:db8::a', port: 0x1bb, proto: 6 });
  assert.equal(k.length, 20);
  assert.deepEqual([...k.subarray(0, 2)], [0x20, 0x01]);
  assert.equal(k[15], 0x0a);
  assert.deepEqual([...k.subarray(16, 20)], [0x01, 0xbb, 6, 0]);
});

test('backend (IPv6): 16-byte address, port, family 6, flags; decodes as IPv6', () => {
  const v = { ip: '2001:db8::42', port: 8443, family: 6 as const, flags: 1 };
  const b = backendCodec.encodeValue(v);
  assert.equal(b.length, 24);
  assert.deepEqual([...b.subarray(0, 4)], [0x20, 0x01, 0x0d, 0xb8]);
  assert.equal(b[15], 0x42);
  assert.deepEqual([...b.subarray(16, 24)], [0x20, 0xfb, 6, 1, 0, 0, 0, 0]);
  assert.deepEqual(backendCodec.decodeValue(b), v);
});

test('backend (IPv4): address in the first 4 bytes, the rest of the 16 zero; a family other than 6 reads as IPv4', () => {
  const b = backendCodec.encodeValue({ ip: '10.1.2.3', port: 80, family: 4, flags: 0 });
  assert.deepEqual([...b.subarray(0, 16)], [10, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
  const odd = Buffer.from(b);
  odd[18] = 0;
  assert.deepEqual(backendCodec.decodeValue(odd), { ip: '10.1.2.3', port: 80, family: 4, flags: 0 });
});

test('ct_entry (IPv6): the NAT address takes 16 bytes at 48 and reads back as IPv6', () => {
  const e = {
    expiresNs: 0x0102030405060708n,
    packetsFwd: 10n,
    bytesFwd: 1500n,
    packetsRev: 11n,
    bytesRev: 3000n,
    backendId: 0x11223344,
    serviceId: 0x55667788,
    natAddr: '2001:db8::1:2',
    natPort: 0x1f90,
    flags: 0x0102,
    createdS: 0x0a0b0c0d,
    snatPort: 0xea60,
  };
  const b = ct6Codec.encodeValue(e);
  assert.equal(b.length, 80);
  assert.equal(ct6Codec.valueSize, 80);
  assert.deepEqual([...b.subarray(0, 8)], [8, 7, 6, 5, 4, 3, 2, 1]);
  assert.deepEqual([...b.subarray(40, 48)], [0x44, 0x33, 0x22, 0x11, 0x88, 0x77, 0x66, 0x55]);
  assert.deepEqual([...b.subarray(48, 52)], [0x20, 0x01, 0x0d, 0xb8]);
  assert.deepEqual([...b.subarray(60, 64)], [0, 1, 0, 2]);
  assert.deepEqual([...b.subarray(64, 80)], [0x1f, 0x90, 0x02, 0x01, 0x0d, 0x0c, 0x0b, 0x0a, 0xea, 0x60, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual(ct6Codec.decodeValue(b), e);
});

test('ct_entry (IPv4): the NAT address in the first 4 of its 16 bytes', () => {
  const e = { expiresNs: 1n, packetsFwd: 0n, bytesFwd: 0n, packetsRev: 0n, bytesRev: 0n, backendId: 1, serviceId: 2, natAddr: '10.0.0.9', natPort: 53, flags: 0, createdS: 0, snatPort: 0 };
  const b = ct4Codec.encodeValue(e);
  assert.deepEqual([...b.subarray(48, 64)], [10, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual(ct4Codec.decodeValue(b), e);
});

test('ct_key4 decodes IPv4 addresses from the 4-byte fields', () => {
  const key = { saddr: '192.0.2.7', daddr: '198.51.100.8', sport: 1, dport: 2, proto: 17, dir: CT_SERVICE };
  const b = ct4Codec.encodeKey(key);
  assert.deepEqual([...b], [192, 0, 2, 7, 198, 51, 100, 8, 0, 1, 0, 2, 17, 1, 0, 0]);
  assert.deepEqual(ct4Codec.decodeKey(b), key);
});

test('ctEvictions: created - deleted - user_deleted - live, never below 0', () => {
  assert.equal(ctEvictions({ ct_created: 100n, ct_deleted: 10n, ct_user_deleted: 20n }, 30), 40);
  assert.equal(ctEvictions({ ct_created: 100n, ct_deleted: 10n, ct_user_deleted: 20n }, 70), 0, 'exactly accounted: none evicted');
  assert.equal(ctEvictions({ ct_created: 100n, ct_deleted: 10n, ct_user_deleted: 20n }, 69), 1);
  assert.equal(ctEvictions({ ct_created: 100n, ct_deleted: 10n, ct_user_deleted: 20n }, 90), 0, 'flows came and went during the count: clamped to 0');
  assert.equal(ctEvictions({}, 0), 0);
  assert.equal(ctEvictions({ ct_created: 5n }, 2), 3, 'missing counters count as 0');
  assert.equal(ctEvictions({ ct_created: 50n, ct_user_deleted: 8n }, 2), 40);
  assert.equal(ctEvictions({ ct_created: 50n, ct_deleted: 8n }, 2), 40);
  assert.equal(ctEvictions({ ct_deleted: 8n }, 0), 0);
});

test('affinity_key4 / affinity_entry: client (network order), service id (u32 LE) → backend id (u32 LE), pad, last used (u64 LE)', () => {
  assert.equal(affinity4Codec.keySize, 8);
  assert.equal(affinity4Codec.valueSize, 16);
  const k = { client: '192.0.2.33', serviceId: 0x01020304 };
  const kb = affinity4Codec.encodeKey(k);
  assert.deepEqual([...kb], [192, 0, 2, 33, 4, 3, 2, 1]);
  assert.deepEqual(affinity4Codec.decodeKey(kb), k);
  const v = { backendId: 0x0a0b0c0d, lastUsedNs: 0x1122334455667788n };
  const vb = affinity4Codec.encodeValue(v);
  assert.deepEqual([...vb], [0x0d, 0x0c, 0x0b, 0x0a, 0, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
  assert.deepEqual(affinity4Codec.decodeValue(vb), v);
});

test('affinity_key6: 16-byte client, service id (u32 LE) at 16; same entry layout', () => {
  assert.equal(affinity6Codec.keySize, 20);
  assert.equal(affinity6Codec.valueSize, 16);
  const k = { client: '2001:db8::77', serviceId: 0x01020304 };
  const kb = affinity6Codec.encodeKey(k);
  assert.equal(kb.length, 20);
  assert.deepEqual([...kb.subarray(0, 4)], [0x20, 0x01, 0x0d, 0xb8]);
  assert.equal(kb[15], 0x77);
  assert.deepEqual([...kb.subarray(16, 20)], [4, 3, 2, 1]);
  assert.deepEqual(affinity6Codec.decodeKey(kb), k);
  const v = { backendId: 7, lastUsedNs: 9n };
  const vb = affinity6Codec.encodeValue(v);
  assert.deepEqual([...vb], [7, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual(affinity6Codec.decodeValue(vb), v);
});
