/**
 * Backend for bench/lb: a keep-alive HTTP server answering a tiny body with
 * its name (the lab's http-server closes every connection, which would make
 * keep-alive runs measure connection setup instead).
 *
 *   node bench/lb/server.ts --port 8080 --name b1
 */
import { createServer } from 'node:http';

const argv = process.argv.slice(2);
const arg = (n: string, d: string) => {
  const i = argv.indexOf(`--${n}`);
  return i >= 0 ? (argv[i + 1] ?? d) : d;
};
const body = Buffer.from(`${arg('name', 'b')}\n`);
const server = createServer((req, res) => {
  req.resume();
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length });
  res.end(body);
});
server.keepAliveTimeout = 60_000;
server.listen({ port: Number(arg('port', '8080')), host: '0.0.0.0', backlog: 4096 }, () => process.stdout.write('listening\n'));
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => process.exit(0));
