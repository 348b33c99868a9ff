/**
 * A long-lived TCP session for lab tests: connects to HOST:PORT from source
 * port SPORT, sends a numbered line every INTERVAL ms and prints each reply
 * line as "reply <line>"; prints "error <code>" or "closed" when the
 * connection fails or ends (a reset shows as "error ECONNRESET").
 *
 *   node --import tsx test/tools/tcp-session.ts HOST PORT SPORT INTERVAL_MS
 */
import { connect } from 'node:net';

const [host, port, sport, interval] = process.argv.slice(2);
let seq = 0;
let buf = '';
const sock = connect({ host: host!, port: Number(port), localPort: Number(sport) });
sock.setNoDelay(true);
let timer: NodeJS.Timeout | undefined;
sock.on('connect', () => {
  process.stdout.write('connected\n');
  timer = setInterval(() => sock.write(`${++seq}\n`), Number(interval));
});
sock.on('data', (d) => {
  buf += d.toString();
  let i: number;
  while ((i = buf.indexOf('\n')) >= 0) {
    process.stdout.write(`reply ${buf.slice(0, i)}\n`);
    buf = buf.slice(i + 1);
  }
});
sock.on('error', (e: NodeJS.ErrnoException) => {
  process.stdout.write(`error ${e.code ?? e.message}\n`);
  process.exit(1);
});
sock.on('close', () => {
  process.stdout.write('closed\n');
  process.exit(1);
});
process.on('SIGTERM', () => {
  if (timer) clearInterval(timer);
  sock.removeAllListeners('close');
  sock.destroy();
  process.exit(0);
});
