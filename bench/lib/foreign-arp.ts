/**
 * One trafgen frame of other hosts' ARP: a request (op 1) or reply (op 2)
 * between random 203.0.113.x hosts, none of them herald's, from 02:00:00:00:0f:01
 * to `dst` (a node's MAC, or ff:ff:ff:ff:ff:ff for every host). The flood of
 * bench/wire-filter and bench/failover/spurious.
 */
export const foreignArpFrame = (op: 1 | 2, dst: string): string => `{
  ${dst.split(':').map((x) => `0x${x}`).join(', ')},
  0x02, 0x00, 0x00, 0x00, 0x0f, 0x01,
  c16(0x0806), c16(1), c16(0x0800), c8(6), c8(4), c16(${op}),
  0x02, 0x00, 0x00, 0x00, 0x0f, 0x01,
  203, 0, 113, drnd(1),
  0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
  203, 0, 113, drnd(1),
}
`;
