/** Bounded quoting for manifest messages; it lives in `core/text.ts` so the address parser shares it. */
export { QUOTE_MAX_CHARS, quote, truncate } from '../core/text.js';
