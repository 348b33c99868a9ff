/** The process logger: JSON lines for machines, or readable text for people (log-text.ts). */
import { pino } from 'pino';
import type { Logger } from '../core/logger.js';
import { formatLogLine } from './log-text.js';

export type LogFormat = 'json' | 'text';

/** Log bytes held while the reader of stderr is not reading; beyond it lines are dropped (and counted). */
export const LOG_BUFFER_BYTES = 8 * 1024 * 1024;

/**
 * `nonBlocking` (the agent): writing a log line never waits for the reader of
 * stderr. A synchronous write into a full pipe or socket (a journal, a
 * supervisor or a test harness that is busy elsewhere) blocked the whole
 * event loop until the reader drained it — the datapath heartbeat with it,
 * so every IP the agent owned went silent for as long as its log reader
 * stalled (a planned hand-over was left unanswered for 17 s that way).
 * Lines wait in a bounded buffer instead; what exceeds it is dropped, and the
 * number dropped is logged once writing resumes. Whatever is buffered is
 * written out synchronously on exit.
 */
export function createLogger(opts: { format: LogFormat; level: string; name?: string; nonBlocking?: boolean }): Logger {
  const base = { level: opts.level, base: opts.name ? { node: opts.name } : null };
  const stderr = pino.destination(opts.nonBlocking ? { fd: 2, sync: false, maxLength: LOG_BUFFER_BYTES } : { fd: 2, sync: true });
  let write = opts.format === 'json' ? (line: string) => stderr.write(line) : (line: string) => stderr.write(formatLogLine(line));
  if (opts.nonBlocking) {
    let dropped = 0;
    stderr.on('drop', () => dropped++);
    // A reader gone (EPIPE) or a broken descriptor must not take the agent down with it.
    stderr.on('error', () => {});
    process.once('exit', () => {
      try {
        stderr.flushSync();
      } catch {
        /* nothing more can be said */
      }
    });
    const plain = write;
    write = (line: string) => {
      if (dropped > 0) {
        const n = dropped;
        dropped = 0;
        plain(`${JSON.stringify({ level: 40, time: Date.now(), ...(opts.name ? { node: opts.name } : {}), dropped: n, msg: 'log lines dropped: the reader of stderr did not keep up' })}\n`);
      }
      return plain(line);
    };
  }
  return pino(base, { write }) as unknown as Logger;
}
