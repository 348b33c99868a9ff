/**
 * Kubernetes name and label syntax (k8s.io/apimachinery/pkg/util/validation).
 * Each check returns `undefined` when valid, else a message that names the
 * offending value and the rule.
 */
import { quote } from './quote.js';

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

const q = quote;

export function checkDns1123Label(s: string, what = 'name'): string | undefined {
  if (s.length > 63) return `invalid ${what} ${q(s)}: must be at most 63 characters (RFC 1123 label)`;
  if (!DNS1123_LABEL.test(s)) {
    return `invalid ${what} ${q(s)}: must be an RFC 1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)`;
  }
  return undefined;
}

export function checkDns1123Subdomain(s: string, what = 'name'): string | undefined {
  if (s.length > 253) return `invalid ${what} ${q(s)}: must be at most 253 characters (RFC 1123 subdomain)`;
  if (!DNS1123_SUBDOMAIN.test(s)) {
    return `invalid ${what} ${q(s)}: must be an RFC 1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)`;
  }
  return undefined;
}

export function checkDns1035Label(s: string, what = 'name'): string | undefined {
  if (s.length > 63) return `invalid ${what} ${q(s)}: must be at most 63 characters (RFC 1035 label)`;
  if (!DNS1035_LABEL.test(s)) {
    return `invalid ${what} ${q(s)}: must be an RFC 1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit)`;
  }
  return undefined;
}

/** A label or annotation key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters. */
export function checkQualifiedName(s: string, what = 'label key'): string | undefined {
  const parts = s.split('/');
  let name = s;
  if (parts.length === 2) {
    const prefix = parts[0] ?? '';
    name = parts[1] ?? '';
    if (prefix.length === 0) return `invalid ${what} ${q(s)}: the prefix before "/" must not be empty`;
    if (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix)) {
      return `invalid ${what} ${q(s)}: the prefix before "/" must be an RFC 1123 subdomain of at most 253 characters`;
    }
  } else if (parts.length > 2) {
    return `invalid ${what} ${q(s)}: at most one "/" is allowed`;
  }
  if (name.length === 0) return `invalid ${what} ${q(s)}: the name part must not be empty`;
  if (name.length > 63) return `invalid ${what} ${q(s)}: the name part must be at most 63 characters`;
  if (!QUALIFIED_NAME.test(name)) {
    return `invalid ${what} ${q(s)}: the name part must consist of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`;
  }
  return undefined;
}

export function checkLabelValue(s: string): string | undefined {
  if (s.length > 63) return `invalid label value ${q(s)}: must be at most 63 characters`;
  if (!LABEL_VALUE.test(s)) {
    return `invalid label value ${q(s)}: must be empty or consist of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`;
  }
  return undefined;
}
