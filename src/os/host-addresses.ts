/** This host's interface addresses (getifaddrs through Node): where other nodes may reach a server bound to a wildcard address. */
import { networkInterfaces } from 'node:os';

export interface HostAddress {
  iface: string;
  address: string;
  family: 4 | 6;
  internal: boolean;
}

export function hostAddresses(): HostAddress[] {
  return Object.entries(networkInterfaces()).flatMap(([iface, list]) =>
    (list ?? []).map((a) => ({ iface, address: a.address, family: a.family === 'IPv6' ? (6 as const) : (4 as const), internal: a.internal })),
  );
}
