/**
 * Coded errors. Every error herald raises on purpose carries a stable `code`
 * (matched by callers and shown to operators) and keeps its `cause`.
 */
export type HeraldErrorCode =
  | 'HERALD_BPF_LOAD'
  | 'HERALD_BPF_VERIFIER'
  | 'HERALD_BPF_PIN_MISMATCH'
  | 'HERALD_BPF_MAP'
  | 'HERALD_BPF_MAP_FULL'
  | 'HERALD_TC_ATTACH'
  | 'HERALD_LINK_NOT_FOUND'
  | 'HERALD_LINK_NOT_ETHERNET'
  | 'HERALD_LINK_LOOKUP'
  | 'HERALD_PACKET_SOCKET'
  | 'HERALD_BAD_ARGUMENT'
  | 'HERALD_BAD_MANIFEST'
  | 'HERALD_MANIFEST_TOO_LARGE'
  | 'HERALD_STATUS_SOCKET'
  | 'HERALD_VIEW'
  | 'HERALD_VIEW_TOKEN_REQUIRED'
  | 'HERALD_STOPPED'
  | 'HERALD_NODE_NAME_TAKEN'
  | 'HERALD_STORE'
  | 'HERALD_KUBE_API'
  | 'HERALD_RECONCILE_TIMEOUT'
  | 'HERALD_TXN'
  | 'HERALD_BIRD_CONFIG'
  | 'HERALD_BIRD'
  | 'HERALD_POLICY_TOO_COMPLEX'
  | 'HERALD_POLICY_SLOT_BUSY'
  | 'HERALD_BAD_POLICY'
  | 'HERALD_INTERNAL';

export class HeraldError extends Error {
  readonly code: HeraldErrorCode;
  constructor(code: HeraldErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'HeraldError';
  }
}

export function isHeraldError(e: unknown, code?: HeraldErrorCode): e is HeraldError {
  return e instanceof HeraldError && (code === undefined || e.code === code);
}

/** A printable one-line description of any thrown value, including its cause chain. */
export function describeError(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  let text = e.message;
  let cause: unknown = e.cause;
  while (cause instanceof Error) {
    if (!text.includes(cause.message)) text += `: ${cause.message}`;
    cause = cause.cause;
  }
  return text;
}
