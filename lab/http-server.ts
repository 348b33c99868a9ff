/**
 * A tiny HTTP server run inside a lab node (nsenter --net): answers every
 * request with the node's name, so a client can tell which node served it.
 *
 *   node --import tsx lab/http-server.ts --port 8080 --name n1 [--host 0.0.0.0]
 *
 * Listens on all addresses, so it serves a VIP that keepalived puts on the
 * interface (and, for herald, an IP the agent routes locally). Prints
 * "listening <host>:<port>" once ready; exits cleanly on SIGTERM/SIGINT.
 */
import { createServer } from 'node:http';

function arg(argv: string[], name: string, def?: string): string {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? argv[i + 1] : def;
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

const argv = process.argv.slice(2);
const port = Number(arg(argv, 'port', '8080'));
const name = arg(argv, 'name');
const host = arg(argv, 'host', '0.0.0.0');
const body = Buffer.from(`${name}\n`);

const server = createServer((req, res) => {
  // Drain any request body; answer at once and close (the probe speaks HTTP/1.0).
  req.resume();
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length, connection: 'close' });
  res.end(body);
});
server.keepAliveTimeout = 0;
server.on('clientError', (_err, socket) => socket.destroy());
server.listen({ port, host }, () => {
  process.stdout.write(`listening ${host}:${port} as ${name}\n`);
});

for (const sig of ['SIGTERM', 'SIGINT'] as const) {
  process.once(sig, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
    setTimeout(() => process.exit(0), 500).unref();
  });
}
