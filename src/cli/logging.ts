/** The process logger: JSON lines for machines, or readable text for people (log-text.ts). */
import { pino } from 'pino';
import type { Logger } from '../core/logger.js';
import { formatLogLine } from './log-text.js';

export type LogFormat = 'json' | 'text';

export function createLogger(opts: { format: LogFormat; level: string; name?: string }): Logger {
  const base = { level: opts.level, base: opts.name ? { node: opts.name } : null };
  const stderr = pino.destination({ fd: 2, sync: true });
  if (opts.format === 'json') return pino(base, stderr) as unknown as Logger;
  return pino(base, { write: (line: string) => stderr.write(formatLogLine(line)) }) as unknown as Logger;
}
