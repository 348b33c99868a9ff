/**
 * A tiny UDP server run inside a lab backend: answers every datagram with
 * "<name> <sender ip>:<sender port>", so a client can tell which backend
 * served it and what source the backend saw.
 *
 *   node --import tsx lab/udp-echo.ts --port 5353 --name b1 [--host 0.0.0.0]
 *
 * Bound to a service IP (--host), replies leave from it: what a DSR backend does.
 */
import { createSocket } from 'node:dgram';

const argv = process.argv.slice(2);
const arg = (name: string, def: string): string => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? (argv[i + 1] ?? def) : def;
};
const port = Number(arg('port', '5353'));
const name = arg('name', 'udp');
const host = arg('host', '0.0.0.0');
const sock = createSocket(host.includes(':') ? 'udp6' : 'udp4');
sock.on('message', (_msg, rinfo) => sock.send(`${name} ${rinfo.address}:${rinfo.port}\n`, rinfo.port, rinfo.address));
sock.bind(port, host, () => process.stdout.write(`listening udp ${port} as ${name}\n`));
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => sock.close(() => process.exit(0)));
