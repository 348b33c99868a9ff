/**
 * Values quoted in messages, bounded: a manifest can hold a megabyte-long
 * string, and each error quoting it would otherwise carry all of it into
 * logs and status.
 */
import { utf8Length } from './limits.js';

export const QUOTE_MAX_CHARS = 200;

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
