/**
 * `--log-format text`: pino's JSON lines rewritten for people, in the layout
 * pino-pretty gives them (colorize off, `HH:MM:ss.l` local time, pid and
 * hostname left out), which herald used before:
 *
 *   [09:20:33.290] INFO: announcing
 *       node: "n1"
 *       origins: [
 *         "service:default/web"
 *       ]
 *
 * Written here because pino-pretty and its dependencies (readable-stream,
 * colorette, dateformat, …) cost 12–15 ms of every agent start, about a
 * twentieth of its time to the first ARP answer, for the few lines it formats.
 */

const LEVELS: Readonly<Record<number, string>> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
/** Printed last, a stack as its own lines (pino-pretty's errorLikeObjectKeys). */
const ERROR_KEYS = new Set(['err', 'error']);
/** pino-pretty's logger keys, plus the ignored pid and hostname. */
const LOGGER_KEYS = new Set(['pid', 'hostname', 'name', 'level', 'time', 'timestamp', 'caller']);
const INDENT = '    ';
// eslint-disable-next-line no-control-regex
const UNSAFE_CONTROL = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F]/g;

const pad = (n: number, width = 2): string => String(n).padStart(width, '0');

function clock(epochMs: number): string {
  const d = new Date(epochMs);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** Every line after the first indented under the key. */
const indentLines = (text: string): string => text.split(/\r?\n/).join(`\n${INDENT}`);

/** `key: value`, the value as 2-space JSON (escaped backslashes shown once, as pino-pretty does). */
function plainEntry(key: string, v: unknown): string {
  const json = JSON.stringify(v, null, 2) as string | undefined;
  if (json === undefined) return '';
  return `${INDENT}${key}: ${indentLines(json.replace(/\\\\/g, '\\'))}\n`;
}

/** An error key: its JSON with the `"stack"` string printed as lines under it. */
function errorEntry(key: string, v: unknown): string {
  const json = JSON.stringify(v, null, 2) as string | undefined;
  if (json === undefined) return '';
  const lines = `${INDENT}${key}: ${indentLines(json)}`.split('\n').map((line) => {
    const m = /^(\s*"stack":)\s*(".*"),?$/.exec(line);
    if (!m) return line;
    const under = ' '.repeat(/^\s*/.exec(line)![0].length + 4);
    const stack = (JSON.parse(m[2]!) as string).replace(UNSAFE_CONTROL, '');
    return `${m[1]}\n${under}${stack.replace(/\n/g, `\n${under}`)}`;
  });
  return `${lines.join('\n')}\n`;
}

/** One JSON log line (as pino writes it) as text; a line that is not JSON is passed through. */
export function formatLogLine(line: string): string {
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`;
  }
  if (rec === null || typeof rec !== 'object' || Array.isArray(rec)) return line.endsWith('\n') ? line : `${line}\n`;
  const level = typeof rec['level'] === 'number' ? (LEVELS[rec['level']] ?? 'USERLVL') : undefined;
  let out = typeof rec['time'] === 'number' ? `[${clock(rec['time'])}]` : '';
  if (level) out = out ? `${out} ${level}` : level;
  // pino-pretty's metadata: `(name)` and `<caller>` (pid and hostname are ignored).
  const meta = [rec['name'] ? `(${String(rec['name']).replace(UNSAFE_CONTROL, '')})` : '', rec['caller'] ? `<${String(rec['caller']).replace(UNSAFE_CONTROL, '')}>` : '']
    .filter(Boolean)
    .join(' ');
  if (meta) out = out ? `${out} ${meta}` : meta;
  if (out) out += ':';
  const msg = rec['msg'];
  const scalarMsg = typeof msg === 'string' || typeof msg === 'number' || typeof msg === 'boolean';
  if (scalarMsg) out = `${out} ${String(msg).replace(UNSAFE_CONTROL, '')}`;
  out += '\n';
  let errors = '';
  for (const [k, v] of Object.entries(rec)) {
    if (LOGGER_KEYS.has(k) || (k === 'msg' && scalarMsg)) continue;
    const key = k.replace(UNSAFE_CONTROL, '');
    if (ERROR_KEYS.has(k)) errors += errorEntry(key, v);
    else out += plainEntry(key, v);
  }
  return out + errors;
}
