/** The process logger: JSON lines for machines, or readable text for people. */
import { createRequire } from 'node:module';
import { pino } from 'pino';
import type { Logger } from '../core/logger.js';

// pino-pretty (and its dependencies) only for the text format.
const requireCjs = createRequire(import.meta.url);

export type LogFormat = 'json' | 'text';

export function createLogger(opts: { format: LogFormat; level: string; name?: string }): Logger {
  const base = { level: opts.level, base: opts.name ? { node: opts.name } : null };
  if (opts.format === 'json') return pino(base, pino.destination({ fd: 2, sync: true })) as unknown as Logger;
  const pretty = requireCjs('pino-pretty') as typeof import('pino-pretty');
  const stream = pretty({ destination: 2, sync: true, colorize: false, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' });
  return pino(base, stream) as unknown as Logger;
}
