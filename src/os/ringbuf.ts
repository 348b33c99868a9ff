/**
 * Reads a BPF ring buffer map (BPF_MAP_TYPE_RINGBUF) through libbpf's
 * ring_buffer API, driven by libuv: the buffer's epoll fd is watched with
 * koffi.node.poll, and when it is readable ring_buffer__consume() runs on the
 * main thread and calls back once per record, synchronously. Nothing blocks,
 * and no worker thread is pinned.
 */
import koffi from 'koffi';
import type { Disposable } from '../core/disposable.js';
import { HeraldError } from '../core/errors.js';
import { SyscallError, libbpf } from './libbpf.js';

let bound: ReturnType<typeof bind> | undefined;
function bind() {
  const lib = koffi.load('libbpf.so.1');
  libbpf(); // libbpf's log sink first: its warnings must not reach stderr
  const sampleFn = koffi.proto('int herald_ring_buffer_sample_fn(void *ctx, void *data, size_t size)');
  return {
    sampleFnPtr: koffi.pointer(sampleFn),
    create: lib.func('void *ring_buffer__new(int map_fd, herald_ring_buffer_sample_fn *sample_cb, void *ctx, const void *opts)'),
    consume: lib.func('int ring_buffer__consume(void *rb)'),
    epollFd: lib.func('int ring_buffer__epoll_fd(void *rb)'),
    free: lib.func('void ring_buffer__free(void *rb)'),
  };
}
function rb() {
  bound ??= bind();
  return bound;
}

export interface RingBufferStats {
  records: number;
  /** Records the handler threw on (logged by the caller's handler, never fatal). */
  handlerErrors: number;
}

export class RingBufferReader implements Disposable {
  private poller: { close(): void } | undefined;
  private closed = false;
  readonly stats: RingBufferStats = { records: 0, handlerErrors: 0 };

  private constructor(
    private readonly ring: unknown,
    private readonly callback: bigint,
  ) {}

  /**
   * Starts reading the ring buffer map behind `mapFd`. `onRecord` gets a copy
   * of each record (the ring's memory is reused once the callback returns).
   */
  static open(mapFd: number, onRecord: (record: Buffer) => void): RingBufferReader {
    const api = rb();
    let reader: RingBufferReader | undefined;
    const callback = koffi.register((_ctx: unknown, data: unknown, size: number | bigint) => {
      const record = Buffer.from(new Uint8Array(koffi.view(data, Number(size))));
      if (reader) reader.stats.records++;
      try {
        onRecord(record);
      } catch {
        if (reader) reader.stats.handlerErrors++;
      }
      return 0;
    }, api.sampleFnPtr);
    const ring = api.create(mapFd, callback, null, null);
    if (!ring) {
      const errno = koffi.errno();
      koffi.unregister(callback);
      throw new SyscallError('HERALD_BPF_LOAD', `ring_buffer__new(map fd ${mapFd})`, errno);
    }
    reader = new RingBufferReader(ring, callback);
    const fd = api.epollFd(ring) as number;
    if (fd < 0) {
      reader.dispose();
      throw new HeraldError('HERALD_BPF_LOAD', 'ring_buffer__epoll_fd failed');
    }
    reader.poller = koffi.node.poll(fd, { readable: true } as never, () => reader?.drain()) as unknown as { close(): void };
    return reader;
  }

  /** Consumes every record available now (also what the poll callback does). */
  drain(): number {
    if (this.closed) return 0;
    const n = rb().consume(this.ring) as number;
    return n < 0 ? 0 : n;
  }

  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    this.poller?.close();
    rb().free(this.ring);
    koffi.unregister(this.callback);
  }
}
