/**
 * Inputs that can never be right are refused (issue 9): `--announce` and
 * pool blocks with unspecified, loopback, multicast or limited broadcast
 * addresses, or the whole address space, each naming the field and why.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseAnnouncement } from '../../src/controlplane/static-announcements.js';
import { isHeraldError } from '../../src/core/errors.js';
import { formatErrors } from '../../src/intent/diagnostics.js';
import { parseManifests } from '../../src/intent/parse.js';

const pool = (block: string): string =>
  `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata: { name: p }\nspec:\n  blocks:\n  - ${block}\n`;
const errorsOf = (block: string): string => formatErrors(parseManifests(pool(block), 'p.yaml').errors);
const at = (field: string, message: string): string => `p.yaml:6:${field === 'cidr' ? 11 : 14}: document 1 (CiliumLoadBalancerIPPool "p"): spec.blocks[0].${field}: ${message}`;

describe('pool blocks that can never be right', () => {
  const refused: [string, string, string][] = [
    ['cidr: 0.0.0.0/0', 'cidr', 'CIDR "0.0.0.0/0" is refused: it is the whole IPv4 address space, which includes unspecified, loopback and multicast addresses'],
    ['cidr: ::/0', 'cidr', 'CIDR "::/0" is refused: it is the whole IPv6 address space, which includes unspecified, loopback and multicast addresses'],
    ['cidr: 0.0.0.0/32', 'cidr', 'CIDR "0.0.0.0/32" is refused: it includes the unspecified range 0.0.0.0/8 ("this network", RFC 1122), which can never be a service IP'],
    ['cidr: 127.0.0.0/24', 'cidr', 'CIDR "127.0.0.0/24" is refused: it includes loopback (127.0.0.0/8), which can never be a service IP'],
    ['cidr: 239.1.0.0/16', 'cidr', 'CIDR "239.1.0.0/16" is refused: it includes multicast (224.0.0.0/4), which can never be a service IP'],
    ['cidr: 255.255.255.255/32', 'cidr', 'CIDR "255.255.255.255/32" is refused: it includes the limited broadcast address (255.255.255.255), which can never be a service IP'],
    ['cidr: ::1/128', 'cidr', 'CIDR "::1/128" is refused: it includes loopback (::1), which can never be a service IP'],
    ['cidr: "::/128"', 'cidr', 'CIDR "::/128" is refused: it includes the unspecified address (::), which can never be a service IP'],
    ['cidr: ff02::/16', 'cidr', 'CIDR "ff02::/16" is refused: it includes multicast (ff00::/8), which can never be a service IP'],
    ['{ start: 223.255.255.250, stop: 224.0.0.3 }', 'start', 'range "223.255.255.250"-"224.0.0.3" is refused: it includes multicast (224.0.0.0/4), which can never be a service IP'],
    ['{ start: 127.0.0.1 }', 'start', 'range "127.0.0.1" is refused: it includes loopback (127.0.0.0/8), which can never be a service IP'],
  ];
  for (const [block, field, message] of refused) {
    it(`refuses ${block}`, () => assert.equal(errorsOf(block), at(field, message)));
  }

  it('accepts blocks that merely contain a subnet\'s first and last address (as Cilium does)', () => {
    for (const block of ['cidr: 192.0.2.0/24', 'cidr: 198.51.100.255/32', 'cidr: 2001:db8::/64', '{ start: 203.0.113.0, stop: 203.0.113.255 }']) {
      assert.equal(errorsOf(block), '', block);
    }
  });
});

describe('--announce that can never be right', () => {
  const refused: [string, string][] = [
    ['0.0.0.0@eth0', '--announce "0.0.0.0@eth0": 0.0.0.0 is the unspecified range 0.0.0.0/8 ("this network", RFC 1122): it can never be a service IP'],
    ['127.0.0.1@eth0', '--announce "127.0.0.1@eth0": 127.0.0.1 is loopback (127.0.0.0/8): it can never be a service IP'],
    ['224.0.0.18@eth0', '--announce "224.0.0.18@eth0": 224.0.0.18 is multicast (224.0.0.0/4): it can never be a service IP'],
    ['255.255.255.255@eth0', '--announce "255.255.255.255@eth0": 255.255.255.255 is the limited broadcast address (255.255.255.255): it can never be a service IP'],
  ];
  for (const [text, message] of refused) {
    it(`refuses ${text}`, () => {
      assert.throws(() => parseAnnouncement(text), (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT') && e.message === message);
    });
  }

  it('accepts an ordinary address, including a subnet\'s .0 and .255', () => {
    assert.deepEqual(parseAnnouncement('198.51.100.10@eth0'), { ip: '198.51.100.10', interface: 'eth0' });
    assert.deepEqual(parseAnnouncement('198.51.100.255@eth0'), { ip: '198.51.100.255', interface: 'eth0' });
    assert.deepEqual(parseAnnouncement('198.51.100.0@eth0'), { ip: '198.51.100.0', interface: 'eth0' });
  });
});
