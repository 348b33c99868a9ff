/**
 * Zod building blocks shared by the manifest schemas, and the error map that
 * turns zod's issues into short operator-facing messages (the offending
 * value, then the rule).
 */
import { z } from 'zod';
import { quote } from './quote.js';
import { checkLabelValue, checkQualifiedName } from './names.js';
import { parseIp } from '../core/addr.js';

const q = quote;

/** One value as it appears in a message: strings quoted, containers named. */
export function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  switch (typeof v) {
    case 'string':
      return `string ${q(v)}`;
    case 'number':
    case 'boolean':
      return `${typeof v} ${String(v)}`;
    case 'object':
      return 'a mapping';
    default:
      return typeof v;
  }
}

const EXPECTED: Record<string, string> = {
  object: 'a mapping',
  record: 'a mapping',
  map: 'a mapping',
  array: 'a list',
  int: 'an integer',
  number: 'a number',
  string: 'a string',
  boolean: 'a boolean (true or false)',
};

function oneOf(values: readonly unknown[]): string {
  const shown = values.map((v) => (typeof v === 'string' ? q(v) : String(v)));
  if (shown.length <= 1) return shown.join('');
  return `${shown.slice(0, -1).join(', ')} or ${shown[shown.length - 1]}`;
}

/**
 * Per-parse error map (passed to `safeParse`, never installed globally, so
 * other modules' zod messages are untouched).
 */
export const manifestErrorMap: z.core.$ZodErrorMap = (iss) => {
  switch (iss.code) {
    case 'invalid_type': {
      if (iss.input === undefined) return 'required';
      const expected = EXPECTED[iss.expected] ?? iss.expected;
      return `expected ${expected}, got ${describeValue(iss.input)}`;
    }
    case 'invalid_value': {
      const input = iss.input;
      let text = `invalid value ${typeof input === 'string' ? q(input) : describeValue(input)}: expected ${oneOf(iss.values)}`;
      // YAML 1.1 (what Kubernetes reads) turns unquoted yes/no/on/off into booleans.
      if (typeof input === 'boolean' && iss.values.every((v) => typeof v === 'string')) {
        text += ' (quote the value: unquoted Yes/No/On/Off are booleans in YAML)';
      }
      return text;
    }
    case 'too_small': {
      if (iss.origin === 'array') return `must have at least ${String(iss.minimum)} item(s)`;
      if (iss.origin === 'string') return `must be at least ${String(iss.minimum)} character(s)`;
      return `must be at least ${String(iss.minimum)}, got ${String(iss.input)}`;
    }
    case 'too_big': {
      if (iss.origin === 'array') {
        const n = Array.isArray(iss.input) ? `, got ${iss.input.length}` : '';
        return `must have at most ${String(iss.maximum)} item(s)${n}`;
      }
      if (iss.origin === 'string') return `must be at most ${String(iss.maximum)} character(s)`;
      return `must be at most ${String(iss.maximum)}, got ${String(iss.input)}`;
    }
    default:
      return undefined;
  }
};

/** An IP address, output in canonical form. */
export const ipAddress = z.string().transform((s, ctx) => {
  const ip = parseIp(s);
  if (!ip) {
    ctx.issues.push({ code: 'custom', message: `invalid IP address ${q(s)}`, input: s });
    return z.NEVER;
  }
  return ip.text;
});

/** An IP address where an empty string (how Go clients write "unset") means absent. */
export const optionalIpAddress = z.string().transform((s, ctx) => {
  if (s === '') return undefined;
  const ip = parseIp(s);
  if (!ip) {
    ctx.issues.push({ code: 'custom', message: `invalid IP address ${q(s)}`, input: s });
    return z.NEVER;
  }
  return ip.text;
});

/** A string field checked by a Kubernetes name rule (see names.ts). */
export function checkedString(check: (s: string) => string | undefined): z.ZodString {
  return z.string().check((ctx) => {
    const message = check(ctx.value);
    if (message !== undefined) ctx.issues.push({ code: 'custom', message, input: ctx.value });
  });
}

/** `map[string]string` of labels: keys are qualified names, values label values. */
export const labelMap = z.record(z.string(), z.string()).check((ctx) => {
  for (const [key, value] of Object.entries(ctx.value)) {
    const message = checkQualifiedName(key) ?? checkLabelValue(value);
    if (message !== undefined) ctx.issues.push({ code: 'custom', message, input: value, path: [key] });
  }
});

/** `map[string]string` of annotations: keys are qualified names (checked lowercased, as Kubernetes does). */
export const annotationMap = z.record(z.string(), z.string()).check((ctx) => {
  for (const key of Object.keys(ctx.value)) {
    const message = checkQualifiedName(key.toLowerCase(), 'annotation key');
    if (message !== undefined) ctx.issues.push({ code: 'custom', message, input: key, path: [key] });
  }
});

/** An integer port number, 1-65535. */
export const portNumber = z.number().int().min(1).max(65535);

/** An RFC 3339 timestamp as Kubernetes writes it (kept as text). */
export const timestamp = z.string().check((ctx) => {
  if (!/^\d{4}-\d{2}-\d{2}T/.test(ctx.value) || Number.isNaN(Date.parse(ctx.value))) {
    ctx.issues.push({ code: 'custom', message: `invalid timestamp ${q(ctx.value)}: expected RFC 3339`, input: ctx.value });
  }
});

/** A field that no longer exists: present at all is an error with `message`. */
export function removedField(message: string) {
  return z.never({ error: message }).optional();
}

/** metav1.Condition, as written in `status.conditions`. */
export const condition = z.object({
  type: z.string(),
  status: z.enum(['True', 'False', 'Unknown']),
  reason: z.string().optional(),
  message: z.string().optional(),
  lastTransitionTime: timestamp.optional(),
  observedGeneration: z.number().int().optional(),
});
export type Condition = z.output<typeof condition>;
