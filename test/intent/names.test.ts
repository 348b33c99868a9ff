import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  checkDns1035Label,
  checkDns1123Label,
  checkDns1123Subdomain,
  checkLabelValue,
  checkQualifiedName,
} from '../../src/intent/names.js';

const table: readonly [string, (s: string) => string | undefined, string[], string[]][] = [
  ['DNS-1123 label', checkDns1123Label, ['a', '0', 'shop', 'tenant-a', '1abc', 'a'.repeat(63)], ['', 'A', 'a.b', '-a', 'a-', 'a_b', 'a'.repeat(64)]],
  [
    'DNS-1123 subdomain',
    checkDns1123Subdomain,
    ['blue-pool', 'worker-1.rack-a.example', '0', 'a'.repeat(253)],
    ['', 'Blue', 'a..b', '.a', 'a.', 'a_b', 'a'.repeat(254)],
  ],
  ['DNS-1035 label', checkDns1035Label, ['web', 'a1', 'my-svc', 'a'.repeat(63)], ['', '1web', 'web.shop', 'Web', 'web-', 'a'.repeat(64)]],
  [
    'qualified name (label key)',
    checkQualifiedName,
    ['app', 'App_Name.v1', 'app.kubernetes.io/name', 'node-role.kubernetes.io/control-plane', 'io.kubernetes.service.namespace', 'a'.repeat(63)],
    ['', '/a', 'a/', 'a/b/c', 'Example.com/a', '-a', 'a b', 'a'.repeat(64), `${'a'.repeat(254)}/b`],
  ],
  ['label value', checkLabelValue, ['', 'blue', 'v1.2_3-x', 'A', 'a'.repeat(63)], [' ', '-a', 'a-', 'a b', 'a/b', 'a'.repeat(64)]],
];

describe('Kubernetes name rules', () => {
  for (const [rule, check, good, bad] of table) {
    it(`${rule}: accepts ${good.length} and rejects ${bad.length} values`, () => {
      for (const s of good) assert.equal(check(s), undefined, `should accept ${JSON.stringify(s)}`);
      for (const s of bad) assert.match(check(s) ?? '', /^invalid /, `should reject ${JSON.stringify(s)}`);
    });
  }

  it('messages name the value', () => {
    assert.equal(
      checkDns1123Label('Shop', 'namespace'),
      `invalid namespace "Shop": must be an RFC 1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)`,
    );
    assert.equal(checkQualifiedName('a/b/c'), 'invalid label key "a/b/c": at most one "/" is allowed');
  });
});
