/**
 * Values quoted in messages, bounded: a manifest can hold a megabyte-long
 * string, and each error quoting it would otherwise carry all of it into
 * logs and status. In `core` so that parsers below the intent layer (see
 * `core/addr.ts`) quote the same way.
 */

export const QUOTE_MAX_CHARS = 200;

/** UTF-8 length of a string, without encoding it. */
export function utf8Length(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4;
        i++;
      } else n += 3;
    } else n += 3;
  }
  return n;
}

/** The first `max` characters, never splitting a surrogate pair. */
function head(text: string, max: number): string {
  const code = text.charCodeAt(max - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

/** `text`, or its first `max` characters then `… (N bytes)`. */
export function truncate(text: string, max = QUOTE_MAX_CHARS): string {
  return text.length <= max ? text : `${head(text, max)}… (${utf8Length(text)} bytes)`;
}

/** A string value in a message: JSON-quoted, at most `max` characters of it, then `… (N bytes)`. */
export function quote(text: string, max = QUOTE_MAX_CHARS): string {
  return text.length <= max ? JSON.stringify(text) : `${JSON.stringify(head(text, max))}… (${utf8Length(text)} bytes)`;
}
