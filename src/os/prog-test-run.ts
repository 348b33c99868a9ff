/**
 * BPF_PROG_TEST_RUN through libbpf's bpf_prog_test_run_opts: runs a loaded
 * program on a crafted packet inside the kernel (the real verifier-checked
 * code, the real maps) and returns its return code. Used by the policy
 * property test and bench/policy.
 */
import koffi, { type TypeObject } from 'koffi';
import { SyscallError } from './libbpf.js';

interface TestRunOpts {
  sz: number;
  data_in: Buffer | null;
  data_out: Buffer | null;
  data_size_in: number;
  data_size_out: number;
  ctx_in: Buffer | null;
  ctx_out: null;
  ctx_size_in: number;
  ctx_size_out: number;
  retval: number;
  repeat: number;
  duration: number;
  flags: number;
  cpu: number;
  batch_size: number;
}

let bound: { run: (fd: number, opts: TestRunOpts) => number; type: TypeObject } | undefined;

function binding(): NonNullable<typeof bound> {
  if (bound) return bound;
  const lib = koffi.load('libbpf.so.1');
  const type = koffi.struct('herald_bpf_test_run_opts', {
    sz: 'size_t',
    data_in: 'void *',
    data_out: 'void *',
    data_size_in: 'uint32_t',
    data_size_out: 'uint32_t',
    ctx_in: 'void *',
    ctx_out: 'void *',
    ctx_size_in: 'uint32_t',
    ctx_size_out: 'uint32_t',
    retval: 'uint32_t',
    repeat: 'int',
    duration: 'uint32_t',
    flags: 'uint32_t',
    cpu: 'uint32_t',
    batch_size: 'uint32_t',
  });
  const fn = lib.func('int bpf_prog_test_run_opts(int prog_fd, _Inout_ herald_bpf_test_run_opts *opts)');
  bound = { run: (fd, opts) => fn(fd, opts) as number, type };
  return bound;
}

export interface TestRunResult {
  /** The program's return code (e.g. TC_ACT_SHOT = 2, TC_ACT_UNSPEC = -1 as 0xffffffff). */
  readonly retval: number;
  /** Average nanoseconds per run, as the kernel measured it. */
  readonly durationNs: number;
  /** The packet as the program left it (when an output buffer was asked for). */
  readonly dataOut?: Buffer;
}

export interface TestRunOptions {
  /** Return the packet as the program left it (dataOut). */
  output?: boolean;
  /** An XDP program's ctx->ingress_ifindex (an interface in the caller's namespace). */
  xdpIngressIfindex?: number;
  /** A tc program's skb: the device it arrives on (ifindex and ingress_ifindex). */
  skbIfindex?: number;
}

/** Runs `progFd` on `packet` (an Ethernet frame) `repeat` times. */
export function progTestRun(progFd: number, packet: Buffer, repeat = 1, o: TestRunOptions = {}): TestRunResult {
  const b = binding();
  const out = o.output ? Buffer.alloc(packet.length + 256) : null;
  let ctx: Buffer | null = null;
  if (o.xdpIngressIfindex !== undefined) {
    // struct xdp_md: data 0, data_end = the frame's length, data_meta 0, ingress_ifindex, rx_queue 0, egress 0.
    ctx = Buffer.alloc(24);
    ctx.writeUInt32LE(packet.length, 4);
    ctx.writeUInt32LE(o.xdpIngressIfindex, 12);
  } else if (o.skbIfindex !== undefined) {
    // struct __sk_buff (192 bytes): ingress_ifindex at 36, ifindex at 40; the rest zero.
    ctx = Buffer.alloc(192);
    ctx.writeUInt32LE(o.skbIfindex, 36);
    ctx.writeUInt32LE(o.skbIfindex, 40);
  }
  const opts: TestRunOpts = {
    sz: koffi.sizeof(b.type),
    data_in: packet,
    data_out: out,
    data_size_in: packet.length,
    data_size_out: out ? out.length : 0,
    ctx_in: ctx,
    ctx_out: null,
    ctx_size_in: ctx ? ctx.length : 0,
    ctx_size_out: 0,
    retval: 0,
    repeat,
    duration: 0,
    flags: 0,
    cpu: 0,
    batch_size: 0,
  };
  const rc = b.run(progFd, opts);
  if (rc < 0) throw new SyscallError('HERALD_BPF_LOAD', 'bpf_prog_test_run_opts', -rc);
  const res = { retval: opts.retval | 0, durationNs: opts.duration };
  return out ? { ...res, dataOut: out.subarray(0, opts.data_size_out) } : res;
}
