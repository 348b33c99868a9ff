// Preloaded into the agents by bench/k8s/answered.ts --cpu-prof DIR (node --import):
// a V8 CPU profile of the supervised agent process, started once DIR/start exists
// and written to DIR/agent-<pid>.cpuprofile when the process exits. Not
// `node --cpu-prof`: its SIGPROF ticks interrupt the BPF verifier (the program
// load fails with EAGAIN), so profiling starts after the datapath is loaded.
import { existsSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';

const dir = process.env.HERALD_BENCH_CPU_PROF;
if (dir && process.env.HERALD_SUPERVISOR_FD) {
  const session = new Session();
  session.connect();
  let started = false;
  const timer = setInterval(() => {
    if (started || !existsSync(`${dir}/start`)) return;
    started = true;
    clearInterval(timer);
    session.post('Profiler.enable', () => session.post('Profiler.setSamplingInterval', { interval: 1000 }, () => session.post('Profiler.start')));
  }, 200);
  timer.unref();
  process.on('exit', () => {
    if (!started) return;
    session.post('Profiler.stop', (err, res) => {
      if (!err) writeFileSync(`${dir}/agent-${process.pid}.cpuprofile`, JSON.stringify(res.profile));
    });
  });
}
