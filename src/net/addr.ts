/** Address helpers shared by the datapath, packet codecs and the control plane. */
import ipaddr from 'ipaddr.js';
import { HeraldError } from '../core/errors.js';

export function isIpv4(text: string): boolean {
  return ipaddr.IPv4.isValidFourPartDecimal(text);
}

export function ipv4ToBytes(ip: string): Buffer {
  if (!isIpv4(ip)) throw new HeraldError('HERALD_BAD_ARGUMENT', `not an IPv4 address: "${ip}"`);
  return Buffer.from(ipaddr.IPv4.parse(ip).toByteArray());
}

export function bytesToIpv4(b: Buffer | Uint8Array): string {
  return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
}

const MAC_RE = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i;

export function isMac(text: string): boolean {
  return MAC_RE.test(text);
}

export function parseMac(mac: string): Buffer {
  if (!isMac(mac)) throw new HeraldError('HERALD_BAD_ARGUMENT', `not a MAC address: "${mac}"`);
  return Buffer.from(mac.split(':').map((h) => parseInt(h, 16)));
}

export function formatMac(b: Buffer | Uint8Array): string {
  return Array.from(b.subarray(0, 6), (x) => x.toString(16).padStart(2, '0')).join(':');
}

export const BROADCAST_MAC = 'ff:ff:ff:ff:ff:ff';
