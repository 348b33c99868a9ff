/**
 * Interface patterns of CiliumL2AnnouncementPolicy are Go (RE2) regular
 * expressions, matched unanchored against the device name. We run them as JS
 * `u`-flag RegExps after translating the few RE2 spellings JS lacks, and we
 * reject JS-only features (lookaround, backreferences) so a pattern herald
 * accepts is one Cilium accepts too.
 */
import { HeraldError } from '../core/errors.js';
import { quote } from './quote.js';

/** RE2's ASCII POSIX classes, as the inside of a JS character class. */
const POSIX_CLASSES: Readonly<Record<string, string>> = {
  alnum: '0-9A-Za-z',
  alpha: 'A-Za-z',
  digit: '0-9',
  lower: 'a-z',
  upper: 'A-Z',
  space: '\\t\\n\\v\\f\\r ',
  word: '0-9A-Za-z_',
  xdigit: '0-9A-Fa-f',
};

export type PatternResult = { ok: true; regex: RegExp } | { ok: false; reason: string };

/** Translates and compiles an RE2 pattern; never throws. */
export function compileRe2(pattern: string): PatternResult {
  let source = pattern;
  let flags = 'u';
  // RE2 allows leading inline flags: (?i), (?s), (?m), (?is) …
  const inline = /^\(\?([a-zA-Z]+)\)/.exec(source);
  if (inline) {
    const letters = inline[1] ?? '';
    for (const f of letters) {
      if (f !== 'i' && f !== 's' && f !== 'm') return { ok: false, reason: `unsupported inline flag "${f}"` };
      if (!flags.includes(f)) flags += f;
    }
    source = source.slice(inline[0].length);
  }
  let out = '';
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i] ?? '';
    if (c === '\\') {
      const n = source[i + 1] ?? '';
      if (!inClass && /[1-9]/.test(n)) return { ok: false, reason: 'backreferences are not supported by RE2' };
      if (!inClass && n === 'k') return { ok: false, reason: 'backreferences are not supported by RE2' };
      if (!inClass && n === 'A') out += '^';
      else if (!inClass && n === 'z') out += '$';
      else out += c + n;
      i++;
      continue;
    }
    if (inClass) {
      const posix = /^\[:([a-z]+):\]/.exec(source.slice(i));
      if (posix) {
        const range = POSIX_CLASSES[posix[1] ?? ''];
        if (range === undefined) return { ok: false, reason: `unknown character class "${posix[0]}"` };
        out += range;
        i += posix[0].length - 1;
        continue;
      }
      if (c === ']') inClass = false;
      out += c;
      continue;
    }
    if (c === '[') {
      inClass = true;
      out += c;
      // A leading "]" (or "^]") is a literal in a class.
      if (source[i + 1] === '^') out += source[++i];
      if (source[i + 1] === ']') out += `\\${source[++i] ?? ''}`;
      continue;
    }
    if (c === '(' && source[i + 1] === '?') {
      const rest = source.slice(i + 2);
      if (/^(=|!|<=|<!)/.test(rest)) return { ok: false, reason: 'lookaround is not supported by RE2' };
      if (rest.startsWith('P<')) {
        out += '(?<';
        i += 3;
        continue;
      }
    }
    out += c;
  }
  try {
    return { ok: true, regex: new RegExp(out, flags) };
  } catch (e) {
    const text = e instanceof Error ? e.message : String(e);
    // "Invalid regular expression: /eth[/u: Unterminated character class" → the reason only.
    const reason = text.slice(text.lastIndexOf(': ') + 2);
    return { ok: false, reason: reason.charAt(0).toLowerCase() + reason.slice(1) };
  }
}

/** Compiles a pattern that passed validation; throws HERALD_BAD_MANIFEST otherwise. */
export function compileInterfacePattern(pattern: string): RegExp {
  const result = compileRe2(pattern);
  if (!result.ok) {
    throw new HeraldError('HERALD_BAD_MANIFEST', `invalid interface regex ${quote(pattern)}: ${result.reason}`);
  }
  return result.regex;
}
