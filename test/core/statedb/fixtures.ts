/** Tables shared by the statedb tests. */
import { defineTable, StateDB } from '../../../src/core/statedb/index.js';

export interface Address {
  readonly ip: string;
  readonly iface: string;
  readonly origins: readonly string[];
}

// Row is inferred from primaryKey's parameter so the index names stay literal types.
export const addresses = defineTable({
  name: 'addresses',
  primaryKey: (a: Address) => `${a.ip}|${a.iface}`,
  indexes: { iface: (a) => a.iface, origin: (a) => a.origins },
  columns: ['IP', 'Iface', 'Origins'],
  toColumns: (a) => [a.ip, a.iface, a.origins.join(',')],
});

export interface Pool {
  readonly name: string;
  readonly cidr: string;
}

export const pools = defineTable<Pool>({ name: 'pools', primaryKey: (p) => p.name });

export function addr(ip: string, iface = 'eth0', origins: readonly string[] = ['default/svc-a']): Address {
  return { ip, iface, origins };
}

export function newDB(): StateDB {
  return new StateDB([addresses, pools]);
}

export function keysOf(rows: readonly Address[]): string[] {
  return rows.map((a) => `${a.ip}|${a.iface}`);
}
