/**
 * Which services a rule selects (selection.ts: the endpoint selector
 * semantics and the incremental SelectionIndex) and what a service's rules
 * compile to (compile.ts: the per-prefix table, its size limit, equality of
 * compiled policies), case by case through the modules' public API.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compiledEqual, compilePolicy, familyWidth, MAX_L4_ENTRIES, toPrefixEntries, type CompiledPolicy, type L4Entry } from '../../../src/controlplane/policy/compile.js';
import { toPrefix, type EndpointSelectorLike, type Selection } from '../../../src/controlplane/policy/intake.js';
import { PROTO, prefixKey, type PolicyRule, type PortRange } from '../../../src/controlplane/policy/model.js';
import { isHeraldError } from '../../../src/core/errors.js';
import { endpointSelectorMatches, selects, SelectionIndex, type ServiceInfo } from '../../../src/controlplane/policy/selection.js';

type Expr = EndpointSelectorLike['matchExpressions'][number];

function sel(matchLabels: Record<string, string> = {}, matchExpressions: Expr[] = []): EndpointSelectorLike {
  return { matchLabels, matchExpressions };
}

function svcInfo(ns: string, name: string, labels: Record<string, string> = {}): ServiceInfo {
  return {
    service: `${ns}/${name}`,
    namespace: ns,
    labels: { ...labels, 'io.kubernetes.service.namespace': ns, 'io.kubernetes.service.name': name },
    ips: ['192.0.2.10'],
  };
}

interface TestRule {
  readonly id: number;
  readonly selection: Selection;
}

const byLabels = (id: number, selector: EndpointSelectorLike, namespace?: string): TestRule => ({
  id,
  selection: { kind: 'labels', ...(namespace !== undefined ? { namespace } : {}), selector },
});
const byService = (id: number, service: string): TestRule => ({ id, selection: { kind: 'service', service } });

const ids = (rules: ReadonlySet<TestRule>) => [...rules].map((r) => r.id).sort((a, b) => a - b);

describe('endpoint selectors', () => {
  it('matchLabels keys with a k8s: or any: source prefix match the bare label key (as Cilium label sources)', () => {
    const labels = { app: 'web' };
    assert.equal(endpointSelectorMatches(sel({ 'k8s:app': 'web' }), labels), true);
    assert.equal(endpointSelectorMatches(sel({ 'any:app': 'web' }), labels), true);
    assert.equal(endpointSelectorMatches(sel({ 'k8s:app': 'db' }), labels), false);
    assert.equal(endpointSelectorMatches(sel({ app: 'web' }), labels), true);
  });

  it('only the k8s: and any: prefixes are dropped: another 3-letter prefix is part of the key', () => {
    assert.equal(endpointSelectorMatches(sel({ 'foo:app': 'web' }), { app: 'web' }), false);
    assert.equal(endpointSelectorMatches(sel({ 'foo:app': 'web' }), { 'foo:app': 'web' }), true);
    // A prefix-looking text later in the key is not a source prefix.
    assert.equal(endpointSelectorMatches(sel({ 'x.k8s:app': 'web' }), { app: 'web' }), false);
  });

  it('matchExpressions keys drop the source prefix too', () => {
    const labels = { app: 'web' };
    assert.equal(endpointSelectorMatches(sel({}, [{ key: 'k8s:app', operator: 'In', values: ['web'] }]), labels), true);
    assert.equal(endpointSelectorMatches(sel({}, [{ key: 'any:app', operator: 'Exists' }]), labels), true);
    assert.equal(endpointSelectorMatches(sel({}, [{ key: 'foo:app', operator: 'Exists' }]), labels), false);
  });

  it('In: the label must be present with one of the listed values', () => {
    const e: Expr = { key: 'tier', operator: 'In', values: ['fe', 'be'] };
    assert.equal(endpointSelectorMatches(sel({}, [e]), { tier: 'fe' }), true);
    assert.equal(endpointSelectorMatches(sel({}, [e]), { tier: 'be' }), true);
    assert.equal(endpointSelectorMatches(sel({}, [e]), { tier: 'db' }), false, 'value not listed');
    assert.equal(endpointSelectorMatches(sel({}, [e]), { app: 'fe' }), false, 'label missing');
  });

  it('In with no values list matches nothing', () => {
    const e: Expr = { key: 'tier', operator: 'In' };
    assert.equal(endpointSelectorMatches(sel({}, [e]), { tier: 'fe' }), false);
    assert.equal(endpointSelectorMatches(sel({}, [e]), { tier: '' }), false);
    assert.equal(endpointSelectorMatches(sel({}, [e]), {}), false);
  });

  it('NotIn: a missing label or an unlisted value matches; a listed value does not', () => {
    const e: Expr = { key: 'tier', operator: 'NotIn', values: ['db'] };
    assert.equal(endpointSelectorMatches(sel({}, [e]), { tier: 'db' }), false);
    assert.equal(endpointSelectorMatches(sel({}, [e]), { tier: 'fe' }), true);
    assert.equal(endpointSelectorMatches(sel({}, [e]), { app: 'db' }), true, 'label missing');
    assert.equal(endpointSelectorMatches(sel({}, [{ key: 'tier', operator: 'NotIn' }]), { tier: 'db' }), true, 'no values: excludes nothing');
  });

  it('Exists / DoesNotExist look at the key only, whatever its value (even empty)', () => {
    const exists: Expr = { key: 'tier', operator: 'Exists' };
    const absent: Expr = { key: 'tier', operator: 'DoesNotExist' };
    assert.equal(endpointSelectorMatches(sel({}, [exists]), { tier: '' }), true);
    assert.equal(endpointSelectorMatches(sel({}, [exists]), { app: 'x' }), false);
    assert.equal(endpointSelectorMatches(sel({}, [absent]), { tier: '' }), false);
    assert.equal(endpointSelectorMatches(sel({}, [absent]), { app: 'x' }), true);
  });

  it('every expression and every label must hold (AND), in any order', () => {
    const exprs: Expr[] = [
      { key: 'tier', operator: 'In', values: ['fe'] },
      { key: 'canary', operator: 'DoesNotExist' },
      { key: 'app', operator: 'Exists' },
    ];
    assert.equal(endpointSelectorMatches(sel({ team: 'a' }, exprs), { team: 'a', tier: 'fe', app: 'x' }), true);
    assert.equal(endpointSelectorMatches(sel({ team: 'a' }, exprs), { team: 'a', tier: 'fe', app: 'x', canary: '1' }), false);
    assert.equal(endpointSelectorMatches(sel({ team: 'a' }, exprs), { team: 'a', tier: 'fe' }), false);
    assert.equal(endpointSelectorMatches(sel({ team: 'b' }, exprs), { team: 'a', tier: 'fe', app: 'x' }), false);
    assert.equal(endpointSelectorMatches(sel({}, [...exprs].reverse()), { tier: 'be', app: 'x' }), false);
  });

  it('an empty selector matches everything', () => {
    assert.equal(endpointSelectorMatches(sel(), {}), true);
    assert.equal(endpointSelectorMatches(sel(), { app: 'web' }), true);
  });
});

describe('selects', () => {
  const web = svcInfo('shop', 'web', { app: 'web' });

  it('a label selection selects a service of its namespace whose labels match', () => {
    assert.equal(selects({ kind: 'labels', namespace: 'shop', selector: sel({ app: 'web' }) }, web), true);
    assert.equal(selects({ kind: 'labels', namespace: 'shop', selector: sel({ app: 'db' }) }, web), false);
  });

  it('a label selection with a namespace never selects in another namespace; without one (CCNP) it selects in any', () => {
    assert.equal(selects({ kind: 'labels', namespace: 'other', selector: sel({ app: 'web' }) }, web), false);
    assert.equal(selects({ kind: 'labels', selector: sel({ app: 'web' }) }, web), true);
  });

  it('a service selection selects exactly its service', () => {
    assert.equal(selects({ kind: 'service', service: 'shop/web' }, web), true);
    assert.equal(selects({ kind: 'service', service: 'shop/db' }, web), false);
  });
});

describe('SelectionIndex', () => {
  it('addRule returns exactly the services the rule selects now, and they list it', () => {
    const ix = new SelectionIndex<TestRule>();
    ix.upsertService(svcInfo('shop', 'web', { app: 'web' }));
    ix.upsertService(svcInfo('shop', 'db', { app: 'db' }));
    ix.upsertService(svcInfo('other', 'web', { app: 'web' }));
    const r = byLabels(1, sel({ app: 'web' }), 'shop');
    assert.deepEqual(ix.addRule(r), ['shop/web']);
    assert.deepEqual(ix.servicesOf(r), ['shop/web']);
    assert.deepEqual(ids(ix.rulesOf('shop/web')), [1]);
    assert.deepEqual(ids(ix.rulesOf('shop/db')), []);
    assert.deepEqual(ids(ix.rulesOf('other/web')), []);
  });

  it('a rule selecting nothing yet: addRule returns no service', () => {
    const ix = new SelectionIndex<TestRule>();
    assert.deepEqual(ix.addRule(byLabels(1, sel({ app: 'web' }))), []);
    assert.deepEqual(ix.addRule(byService(2, 'shop/web')), []);
    assert.deepEqual(ix.addRule(byLabels(3, sel({}, [{ key: 'app', operator: 'Exists' }]))), []);
  });

  it('a selector without matchLabels (namespace only, or expressions only) selects the services already there', () => {
    const ix = new SelectionIndex<TestRule>();
    ix.upsertService(svcInfo('shop', 'web', { app: 'web' }));
    ix.upsertService(svcInfo('shop', 'db', { app: 'db' }));
    ix.upsertService(svcInfo('other', 'x', {}));
    assert.deepEqual(ix.addRule(byLabels(1, sel(), 'shop')).sort(), ['shop/db', 'shop/web']);
    assert.deepEqual(ix.addRule(byLabels(2, sel({}, [{ key: 'app', operator: 'In', values: ['web', 'x'] }]))), ['shop/web']);
    assert.deepEqual(ids(ix.rulesOf('shop/web')), [1, 2]);
    assert.deepEqual(ids(ix.rulesOf('other/x')), []);
  });

  it('a service arriving after the rules gets exactly the rules selecting it: by first label, by name, and selectors without labels', () => {
    const ix = new SelectionIndex<TestRule>();
    ix.addRule(byLabels(1, sel({ app: 'web' }), 'shop'));
    ix.addRule(byLabels(2, sel({ app: 'web', tier: 'db' }), 'shop')); // first label matches, the second does not
    ix.addRule(byLabels(3, sel(), 'shop'));
    ix.addRule(byLabels(4, sel(), 'other')); // scanned, but another namespace
    ix.addRule(byLabels(5, sel({}, [{ key: 'tier', operator: 'DoesNotExist' }])));
    ix.addRule(byService(6, 'shop/web'));
    ix.addRule(byService(7, 'shop/db'));
    ix.addRule(byLabels(8, sel({ 'k8s:app': 'web' })));
    ix.upsertService(svcInfo('shop', 'web', { app: 'web', tier: 'fe' }));
    assert.deepEqual(ids(ix.rulesOf('shop/web')), [1, 3, 6, 8]);
  });

  it('re-labelling a service re-evaluates its rules, and the old labels no longer make it a candidate', () => {
    const ix = new SelectionIndex<TestRule>();
    const r = byLabels(1, sel({ app: 'web' }), 'shop');
    ix.addRule(r);
    ix.upsertService(svcInfo('shop', 'web', { app: 'web' }));
    assert.deepEqual(ids(ix.rulesOf('shop/web')), [1]);
    ix.upsertService(svcInfo('shop', 'web', { app: 'api' }));
    assert.deepEqual(ids(ix.rulesOf('shop/web')), []);
    assert.deepEqual(ix.servicesOf(r), []);
    assert.deepEqual(ix.removeRule(r), []);
    assert.equal(ix.service('shop/web')?.labels.app, 'api');
  });

  it('removeService forgets the service: no info, no rules, never selected again', () => {
    const ix = new SelectionIndex<TestRule>();
    const r = byLabels(1, sel({ app: 'web' }));
    ix.addRule(r);
    ix.upsertService(svcInfo('shop', 'web', { app: 'web' }));
    ix.upsertService(svcInfo('shop', 'db', { app: 'db' }));
    ix.removeService('shop/web');
    assert.equal(ix.service('shop/web'), undefined);
    assert.deepEqual([...ix.allServices()].map((s) => s.service), ['shop/db']);
    assert.deepEqual(ids(ix.rulesOf('shop/web')), []);
    assert.deepEqual(ix.servicesOf(r), []);
    assert.deepEqual(ix.addRule(byLabels(2, sel({ app: 'web' }))), []);
    assert.deepEqual(ix.addRule(byLabels(3, sel())), ['shop/db']);
    assert.deepEqual(ix.removeRule(r), []);
    ix.removeService('shop/none'); // unknown: nothing to do
    assert.deepEqual([...ix.allServices()].map((s) => s.service), ['shop/db']);
  });

  it('allServices lists every known service once, with its current info', () => {
    const ix = new SelectionIndex<TestRule>();
    assert.deepEqual([...ix.allServices()], []);
    ix.upsertService(svcInfo('shop', 'web', { app: 'web' }));
    ix.upsertService(svcInfo('shop', 'db'));
    ix.upsertService(svcInfo('shop', 'web', { app: 'v2' }));
    const all = [...ix.allServices()].sort((a, b) => a.service.localeCompare(b.service));
    assert.deepEqual(
      all.map((s) => [s.service, s.labels.app]),
      [
        ['shop/db', undefined],
        ['shop/web', 'v2'],
      ],
    );
  });

  it('removeRule returns exactly the services it selected, which then no longer list it', () => {
    const ix = new SelectionIndex<TestRule>();
    ix.upsertService(svcInfo('shop', 'web', { app: 'web' }));
    ix.upsertService(svcInfo('shop', 'db', { app: 'db' }));
    const byApp = byLabels(1, sel({ app: 'web' }));
    const scan = byLabels(2, sel({}, [{ key: 'app', operator: 'Exists' }]), 'shop');
    const named = byService(3, 'shop/db');
    for (const r of [byApp, scan, named]) ix.addRule(r);
    assert.deepEqual(ix.removeRule(byApp), ['shop/web']);
    assert.deepEqual(ix.removeRule(scan).sort(), ['shop/db', 'shop/web']);
    assert.deepEqual(ix.removeRule(named), ['shop/db']);
    assert.deepEqual(ids(ix.rulesOf('shop/web')), []);
    assert.deepEqual(ids(ix.rulesOf('shop/db')), []);
    // Removed rules are gone from the index: a new service does not pick them up.
    ix.upsertService(svcInfo('shop', 'api', { app: 'web' }));
    assert.deepEqual(ids(ix.rulesOf('shop/api')), []);
  });

  it('rulesOf an unknown service is empty', () => {
    const ix = new SelectionIndex<TestRule>();
    assert.equal(ix.rulesOf('shop/none').size, 0);
  });
});


/** A rule from `cidr` or `[cidr, excepts]` peers; no ports: every packet. */
function pRule(id: number, verdict: 'allow' | 'deny', cidrs: (string | [string, string[]])[], ports?: PortRange[]): PolicyRule {
  return {
    id,
    verdict,
    peers: cidrs.map((c) => (typeof c === 'string' ? { cidr: toPrefix(c), except: [] } : { cidr: toPrefix(c[0]), except: c[1].map(toPrefix) })),
    ...(ports ? { ports } : {}),
    origin: 'test',
  };
}

/** n single TCP ports from `base`. */
const tcpPorts = (n: number, base = 1000): PortRange[] => Array.from({ length: n }, (_, i) => ({ proto: PROTO.TCP, lo: base + i, hi: base + i }));

const entriesAt = (c: CompiledPolicy, cidr: string) => c.get(prefixKey(toPrefix(cidr)))?.entries;

describe('compilePolicy: the per-prefix entry limit', () => {
  it('one rule with exactly MAX_L4_ENTRIES ports compiles; one more is refused, naming the service', () => {
    const c = compilePolicy([pRule(1, 'allow', ['192.0.2.0/24', '198.51.100.0/24'], tcpPorts(MAX_L4_ENTRIES))], 'shop/web');
    assert.equal(entriesAt(c, '192.0.2.0/24')?.length, MAX_L4_ENTRIES);
    assert.equal(entriesAt(c, '198.51.100.0/24')?.length, MAX_L4_ENTRIES);
    assert.throws(
      () => compilePolicy([pRule(1, 'allow', ['192.0.2.0/24'], tcpPorts(MAX_L4_ENTRIES + 1))], 'shop/web'),
      (e) => isHeraldError(e, 'HERALD_POLICY_TOO_COMPLEX') && /^shop\/web: source 192\.0\.2\.0\/24 is matched by 17 port entries/.test(e.message),
    );
  });

  it('without a service name the error says "service"', () => {
    assert.throws(
      () => compilePolicy([pRule(1, 'allow', ['192.0.2.0/24'], tcpPorts(MAX_L4_ENTRIES + 1))]),
      (e) => isHeraldError(e, 'HERALD_POLICY_TOO_COMPLEX') && /^service: source 192\.0\.2\.0\/24 /.test(e.message),
    );
  });

  it('a rule with no peers matches no source: it compiles to nothing however many ports it lists', () => {
    assert.equal(compilePolicy([pRule(1, 'allow', [], tcpPorts(MAX_L4_ENTRIES + 4))], 'shop/web').size, 0);
  });

  it('several rules whose entries add up on one prefix: exactly MAX_L4_ENTRIES compiles, one more is refused for that prefix', () => {
    const half = MAX_L4_ENTRIES / 2;
    const fits = [pRule(1, 'allow', ['192.0.2.0/24'], tcpPorts(half)), pRule(2, 'deny', ['192.0.2.0/25'], tcpPorts(half, 2000))];
    const c = compilePolicy(fits, 'shop/web');
    assert.equal(entriesAt(c, '192.0.2.0/24')?.length, half, 'the /24 outside the /25 only gets the allow');
    const inner = entriesAt(c, '192.0.2.0/25')!;
    assert.equal(inner.length, MAX_L4_ENTRIES);
    assert.deepEqual([...new Set(inner.map((e) => e.rule))], [2, 1], 'deny entries first');
    const over = [pRule(1, 'allow', ['192.0.2.0/24'], tcpPorts(half)), pRule(2, 'deny', ['192.0.2.0/25'], tcpPorts(half + 1, 2000))];
    assert.throws(
      () => compilePolicy(over, 'shop/web'),
      (e) => isHeraldError(e, 'HERALD_POLICY_TOO_COMPLEX') && /^shop\/web: source 192\.0\.2\.0\/25 is matched by 17 port entries/.test(e.message),
    );
  });

  it('one rule with an except goes through the general walk and is held to the same limit', () => {
    assert.throws(
      () => compilePolicy([pRule(1, 'allow', [['192.0.2.0/24', ['192.0.2.0/28']]], tcpPorts(MAX_L4_ENTRIES + 1))], 'shop/web'),
      (e) => isHeraldError(e, 'HERALD_POLICY_TOO_COMPLEX'),
    );
    const c = compilePolicy([pRule(1, 'allow', [['192.0.2.0/24', ['192.0.2.0/28']]], tcpPorts(MAX_L4_ENTRIES))], 'shop/web');
    assert.equal(entriesAt(c, '192.0.2.0/24')?.length, MAX_L4_ENTRIES);
    assert.deepEqual(entriesAt(c, '192.0.2.0/28'), [], 'the except is stored, with no entries');
  });
});

describe('compilePolicy: general walk', () => {
  it('an except excludes only its own block: the same rule matching through another block still applies', () => {
    const r = pRule(1, 'allow', [['192.0.2.0/24', ['192.0.2.0/28']], '192.0.2.0/26'], [{ proto: PROTO.TCP, lo: 80, hi: 80 }]);
    const c = compilePolicy([r, pRule(2, 'deny', ['203.0.113.0/24'])]);
    assert.deepEqual(entriesAt(c, '192.0.2.0/28')?.map((e) => e.rule), [1], 'inside /26, which has no except');
    assert.deepEqual(entriesAt(c, '192.0.2.0/24')?.map((e) => e.rule), [1]);
  });

  it('IPv4 and IPv6 prefixes of the same length never act as each other\'s ancestors', () => {
    const c = compilePolicy([pRule(1, 'deny', ['0.0.0.0/0']), pRule(2, 'allow', ['::/0', '2001:db8::/32'])]);
    assert.deepEqual(entriesAt(c, '0.0.0.0/0')?.map((e) => e.rule), [1]);
    assert.deepEqual(entriesAt(c, '::/0')?.map((e) => e.rule), [2]);
    assert.deepEqual(entriesAt(c, '2001:db8::/32')?.map((e) => e.rule), [2]);
  });
});

describe('compiledEqual', () => {
  const base = (): PolicyRule[] => [
    pRule(1, 'deny', ['192.0.2.0/24'], [{ proto: PROTO.TCP, lo: 22, hi: 22 }]),
    pRule(2, 'allow', ['198.51.100.0/24'], [{ proto: PROTO.UDP, lo: 53, hi: 54 }]),
  ];

  it('the same rules compiled twice are equal (no datapath write needed); an empty policy equals an empty one', () => {
    assert.equal(compiledEqual(compilePolicy(base()), compilePolicy(base())), true);
    assert.equal(compiledEqual(compilePolicy([]), compilePolicy([])), true);
  });

  it('a different number of prefixes, or the same number but other prefixes, is a change', () => {
    const a = compilePolicy(base());
    assert.equal(compiledEqual(a, compilePolicy([base()[0]!])), false);
    assert.equal(compiledEqual(compilePolicy([base()[0]!]), a), false);
    const moved = [base()[0]!, pRule(2, 'allow', ['203.0.113.0/24'], [{ proto: PROTO.UDP, lo: 53, hi: 54 }])];
    assert.equal(compiledEqual(a, compilePolicy(moved)), false);
  });

  it('a prefix with more or fewer entries is a change, even when the common entries agree', () => {
    const one = compilePolicy([pRule(1, 'allow', ['192.0.2.0/24'], [{ proto: PROTO.TCP, lo: 80, hi: 80 }])]);
    const two = compilePolicy([pRule(1, 'allow', ['192.0.2.0/24'], [{ proto: PROTO.TCP, lo: 80, hi: 80 }, { proto: PROTO.TCP, lo: 443, hi: 443 }])]);
    assert.equal(compiledEqual(one, two), false);
    assert.equal(compiledEqual(two, one), false);
  });

  it('any one field of any entry differing is a change', () => {
    const key = prefixKey(toPrefix('192.0.2.0/24'));
    const e0: L4Entry = { proto: PROTO.TCP, deny: false, any: false, lo: 80, hi: 80, rule: 1 };
    const e1: L4Entry = { proto: PROTO.TCP, deny: false, any: false, lo: 443, hi: 443, rule: 1 };
    const policy = (last: L4Entry): CompiledPolicy => new Map([[key, { prefix: toPrefix('192.0.2.0/24'), entries: [e0, last] }]]);
    assert.equal(compiledEqual(policy(e1), policy({ ...e1 })), true);
    const changes: Partial<L4Entry>[] = [{ proto: PROTO.UDP }, { deny: true }, { any: true }, { lo: 442 }, { hi: 444 }, { rule: 2 }];
    for (const change of changes) {
      assert.equal(compiledEqual(policy(e1), policy({ ...e1, ...change })), false, JSON.stringify(change));
    }
  });
});

describe('familyWidth / toPrefixEntries', () => {
  it('address width per family: 32 bits for IPv4, 128 for IPv6', () => {
    assert.equal(familyWidth(4), 32);
    assert.equal(familyWidth(6), 128);
  });

  it('toPrefixEntries gives one datapath entry per compiled prefix, with its entries', () => {
    const rows = toPrefixEntries(compilePolicy([pRule(1, 'allow', ['192.0.2.0/24', '2001:db8::/32'])]));
    assert.deepEqual(
      rows.map((r) => [r.family, r.len, r.addr, r.entries.length]).sort((a, b) => Number(a[0]) - Number(b[0])),
      [
        [4, 24, 0xc0000200n, 1],
        [6, 32, 0x20010db8n << 96n, 1],
      ],
    );
  });
});
