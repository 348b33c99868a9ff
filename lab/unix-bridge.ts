/**
 * A TCP ⇄ unix-socket pass-through, to reach a server on the root namespace's
 * loopback (the test's kube-apiserver) from inside a lab host: the root side
 * listens on a unix socket (a file: visible from every network namespace)
 * and connects to 127.0.0.1:PORT; this side, run in a lab host, listens on
 * that host's 127.0.0.1:PORT and connects to the unix socket. The API
 * server's certificate (for 127.0.0.1) is then valid in every host.
 *
 *   node --import tsx lab/unix-bridge.ts --port 6443 --socket /tmp/…/api.sock
 */
import { connect, createServer, type Server } from 'node:net';

/** In-process: the root-namespace side (unix socket → 127.0.0.1:port). */
export function unixToTcp(socket: string, port: number): Promise<Server> {
  const server = createServer((c) => {
    const up = connect(port, '127.0.0.1');
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socket, () => resolve(server));
  });
}

function main(): void {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    if (i < 0 || !process.argv[i + 1]) throw new Error(`unix-bridge: ${name} is required`);
    return process.argv[i + 1]!;
  };
  const port = Number(arg('--port'));
  const socket = arg('--socket');
  const server = createServer((c) => {
    const up = connect(socket);
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  server.listen(port, '127.0.0.1', () => console.log(`bridge listening on 127.0.0.1:${port}`));
}

if (process.argv[1]?.endsWith('unix-bridge.ts')) main();
