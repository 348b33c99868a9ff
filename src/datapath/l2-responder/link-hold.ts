/**
 * What a change of links means for the datapath heartbeat (pure: the stack
 * applies it). Two rules, both about a node that lost its port while another
 * node took its IPs over (Cilium #35507's other half):
 *   - every link we serve lost carrier: hold the heartbeat now (its lease may
 *     keep the stamp fresh through the outage, and the first requests after
 *     the port returns must not be answered before ownership is re-checked);
 *   - a link we serve (or served when all went dark) regains carrier: hold and
 *     re-check ownership before answering on it again.
 */
export interface LinkState {
  readonly ifindex: number;
  readonly name: string;
  readonly up: boolean;
  readonly carrier: boolean;
}

export type LinkHoldDecision =
  | { readonly action: 'recheck'; readonly reason: string }
  | { readonly action: 'hold'; readonly darkLinks: ReadonlySet<number> }
  | { readonly action: 'none' };

export interface LinkHoldInput {
  readonly links: readonly LinkState[];
  /** ifindexes in the datapath's interfaces map now. */
  readonly served: ReadonlySet<number>;
  /** ifindex → could answer (up and carrier), as last seen. */
  readonly answeredBefore: ReadonlyMap<number, boolean>;
  /** The links we served when all of them lost carrier, while that hold lasts. */
  readonly darkLinks: ReadonlySet<number> | undefined;
}

const answers = (l: LinkState) => l.up && l.carrier;

export function linkHoldDecision(input: LinkHoldInput): LinkHoldDecision {
  const { links, served, answeredBefore, darkLinks } = input;
  // Links we served when every one went dark count as served until one is back (the control
  // plane withdraws what a dark link announced, which may empty the interfaces map meanwhile).
  const back = links.filter((l) => (served.has(l.ifindex) || darkLinks?.has(l.ifindex)) && answers(l) && answeredBefore.get(l.ifindex) === false);
  if (back.length > 0) return { action: 'recheck', reason: `${back.map((l) => l.name).join(', ')} regained carrier` };
  const servedLinks = links.filter((l) => served.has(l.ifindex));
  if (servedLinks.length > 0 && !servedLinks.some(answers) && !darkLinks) return { action: 'hold', darkLinks: new Set(servedLinks.map((l) => l.ifindex)) };
  return { action: 'none' };
}

/** ifindex → could answer, for the next decision. */
export function answeringLinks(links: readonly LinkState[]): Map<number, boolean> {
  return new Map(links.map((l) => [l.ifindex, answers(l)]));
}
