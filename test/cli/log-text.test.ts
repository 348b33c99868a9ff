/**
 * The text log format keeps pino-pretty's layout (what herald printed before
 * it formatted lines itself). pino-pretty (a devDependency now) is the oracle:
 * each record is formatted by both, with the options herald used
 * (colorize off, `HH:MM:ss.l`, pid and hostname ignored).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import pretty from 'pino-pretty';
import { formatLogLine } from '../../src/cli/log-text.js';

const oracle = pretty.prettyFactory({ colorize: false, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' });
const at = new Date(2026, 10, 25, 9, 20, 33, 290).getTime(); // local time, as translateTime 'HH:MM:ss.l'
const line = (rec: object) => `${JSON.stringify({ level: 30, time: at, pid: 1, hostname: 'h', node: 'n1', ...rec })}\n`;

test('the layout, written out once', () => {
  assert.equal(
    formatLogLine(line({ ip: '192.0.2.1', origins: ['service:default/web'], msg: 'announcing' })),
    '[09:20:33.290] INFO: announcing\n    node: "n1"\n    ip: "192.0.2.1"\n    origins: [\n      "service:default/web"\n    ]\n',
  );
});

const records: Record<string, object> = {
  'scalars, arrays, nested objects, empties': { ip: '192.0.2.1', origins: ['a', 'b'], nested: { x: 1, y: [1, { z: 'q"' }] }, n: 5, f: 1.5, b: true, nul: null, empty: [], eo: {}, msg: 'announcing' },
  'every level': { level: 10, msg: 't' },
  debug: { level: 20, msg: 'd' },
  warn: { level: 40, module: 'm', msg: 'child' },
  fatal: { level: 60, msg: 'f' },
  'an unknown level': { level: 35, msg: 'custom' },
  'no message': { msg2: 'x' },
  'an empty message': { level: 40, msg: '', a: 1 },
  'a number as message': { msg: 42 },
  'an object as message': { msg: { a: 1 } },
  'strings with newlines, quotes, backslashes, control characters, unicode': { a: 'multi\nline', q: 'say "hi"', p: 'C:\\dir\\file', c: 'bell\u0007', u: 'ü → ✓', msg: 'tab\there \u0001x' },
  'an error string': { level: 50, err: 'line1\nline2', code: 'X', msg: 'failed' },
  'an error object with a stack and more fields': {
    level: 50,
    err: { type: 'HeraldError', message: 'boom', stack: 'HeraldError: boom\n    at f (x.js:1:1)\n    at g (y.js:2:2)', code: 'E_X', details: { path: '/tmp/x', n: [1, 2] } },
    code: 'E_X',
    msg: 'agent failed to start',
  },
  'an error object without a stack': { level: 50, error: { message: 'no stack' }, msg: 'e' },
  'both error keys': { level: 50, error: 'second', err: { type: 'Error', message: 'm', stack: 'Error: m' }, after: 1, msg: 'two' },
  'name and caller as metadata, timestamp dropped': { name: 'x', caller: 'y', timestamp: 1, msg: 'k' },
};

for (const [name, rec] of Object.entries(records)) {
  test(`same text as pino-pretty: ${name}`, () => {
    const l = line(rec);
    assert.equal(formatLogLine(l), oracle(l));
  });
}

test('a line that is not JSON passes through', () => {
  assert.equal(formatLogLine('not json'), 'not json\n');
  assert.equal(formatLogLine('[1,2]\n'), '[1,2]\n');
});
