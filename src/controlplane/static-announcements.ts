/** Static announcements from the command line (`--announce IP@IFACE`), keepalived-style. */
import { HeraldError } from '../core/errors.js';
import type { StateDB } from '../core/statedb/index.js';
import { l2AnnounceTable, withOrigin } from '../datapath/tables/l2-announce.js';
import { isIpv4, parseIp } from '../core/addr.js';
import { neverServiceReason } from '../intent/ip.js';

export interface StaticAnnouncement {
  ip: string;
  interface: string;
}

export const STATIC_ORIGIN = 'static';

/** "198.51.100.10@eth0" or "2001:db8::10@eth0" → { ip (canonical), interface }. */
export function parseAnnouncement(text: string): StaticAnnouncement {
  const at = text.lastIndexOf('@');
  const ip = at > 0 ? text.slice(0, at) : '';
  const iface = at > 0 ? text.slice(at + 1) : '';
  const parsed = parseIp(ip);
  if (!parsed || (parsed.family === 'IPv4' && !isIpv4(ip)) || !/^[^\s/]{1,15}$/.test(iface)) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `announcement "${text}" must look like IP@interface, e.g. 198.51.100.10@eth0 or 2001:db8::10@eth0`);
  }
  const never = neverServiceReason(parsed);
  if (never) throw new HeraldError('HERALD_BAD_ARGUMENT', `--announce "${text}": ${never}`);
  return { ip: parsed.text, interface: iface };
}

export function writeStaticAnnouncements(db: StateDB, announcements: readonly StaticAnnouncement[]): void {
  db.update([l2AnnounceTable], (txn) => {
    for (const a of announcements) {
      const key = l2AnnounceTable.primaryKey({ ip: a.ip, iface: a.interface, origins: [] });
      txn.insert(l2AnnounceTable, withOrigin(txn.get(l2AnnounceTable, key), a.ip, a.interface, STATIC_ORIGIN));
    }
  });
}
