// Attaches to a running agent's inspector (opened by SIGUSR1) and records a CPU profile:
//   node bench/k8s/attach-prof.mjs <port> <seconds> <out.cpuprofile>
import { writeFileSync } from 'node:fs';
import WebSocket from 'ws';

const [port, seconds, out] = process.argv.slice(2);
const list = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
const ws = new WebSocket(list[0].webSocketDebuggerUrl);
let id = 0;
const pending = new Map();
const send = (method, params = {}) => new Promise((resolve, reject) => {
  const i = ++id;
  pending.set(i, { resolve, reject });
  ws.send(JSON.stringify({ id: i, method, params }));
});
ws.on('message', (m) => {
  const msg = JSON.parse(String(m));
  const p = pending.get(msg.id);
  if (!p) return;
  pending.delete(msg.id);
  if (msg.error) p.reject(new Error(JSON.stringify(msg.error)));
  else p.resolve(msg.result);
});
await new Promise((r) => ws.once('open', r));
await send('Profiler.enable');
await send('Profiler.setSamplingInterval', { interval: 1000 });
await send('Profiler.start');
await new Promise((r) => setTimeout(r, Number(seconds) * 1000));
const { profile } = await send('Profiler.stop');
writeFileSync(out, JSON.stringify(profile));
ws.close();
process.exit(0);
