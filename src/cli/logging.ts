/** The process logger: JSON lines for machines, or readable text for people. */
import { pino } from 'pino';
import pretty from 'pino-pretty';
import type { Logger } from '../core/logger.js';

export type LogFormat = 'json' | 'text';

export function createLogger(opts: { format: LogFormat; level: string; name?: string }): Logger {
  const base = { level: opts.level, base: opts.name ? { node: opts.name } : null };
  if (opts.format === 'json') return pino(base, pino.destination({ fd: 2, sync: true })) as unknown as Logger;
  const stream = pretty({ destination: 2, sync: true, colorize: false, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' });
  return pino(base, stream) as unknown as Logger;
}
