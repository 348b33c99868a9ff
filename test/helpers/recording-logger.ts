/** A Logger that keeps every line, for tests that check what an operator is told. */
import type { Logger } from '../../src/core/logger.js';

export interface LogLine {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly msg: string;
  readonly obj: Record<string, unknown>;
}

export function recordingLogger(lines: LogLine[] = []): Logger & { lines: LogLine[] } {
  const at = (level: LogLine['level']) => (obj: object, msg = '') => void lines.push({ level, msg, obj: obj as Record<string, unknown> });
  const log: Logger & { lines: LogLine[] } = { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: () => log };
  return log;
}
