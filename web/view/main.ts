/**
 * The cluster view's page: one snapshot (GET /v1/view), then live updates
 * from the event stream (GET /v1/events, server-sent events) — no polling,
 * no reload. Plain DOM; bundled by esbuild (scripts/bundle.mjs) into
 * dist/view/app.js, which the agent serves.
 */
import type { ClusterEvent } from '../../src/core/events.js';
import { expandView, type CompactSnapshot, type CountersPush, type ViewIp, type ViewNode, type ViewReconcile, type ViewSnapshot } from '../../src/api/view/model.js';
import { describeEvent } from '../../src/api/view/describe.js';
import { el, ROW_HEIGHT, sparkline, STYLE } from './dom.js';

const token = new URLSearchParams(location.search).get('token');
const withToken = (path: string) => (token ? `${path}${path.includes('?') ? '&' : '?'}token=${encodeURIComponent(token)}` : path);

/** Samples of answers per second for the rate graph, per IP. */
const HISTORY = 30;
/** Rows drawn beyond the visible ones, above and below (the IP table draws only what can be seen: 10,000 rows took ~1 s to lay out). */
const OVERSCAN = 40;

class Page {
  private view!: ViewSnapshot;
  private readonly rows = new Map<string, HTMLTableRowElement>();
  private readonly rates = new Map<string, number[]>();
  /** Answers summed over nodes, per IP, as of the last push (the rate graph's baseline). */
  private readonly sums = new Map<string, number>();
  private lastCountersAt: number | undefined;
  /** The nodes the answers came from (a push covering others drops theirs). */
  private answerNodes = '';
  /** IPs with LB connections, not reconciled, or advertised by BGP at the last push (what the next push may reset). */
  private withConnections = new Set<string>();
  private notDone = new Set<string>();
  private advertised = new Set<string>();
  /** The IP table: a scrolling box, one table whose body holds only the rows in view between two spacers. */
  private readonly scroller = el('div', { class: 'scroller' });
  private ipsBody: HTMLTableSectionElement | undefined;
  private ipsTitle = el('h2', {});
  /** Every IP row is this tall (the style sheet fixes it), so a scroll offset names a row. */
  private readonly rowHeight = ROW_HEIGHT;
  private window = { first: -1, last: -1 };
  private windowQueued = false;
  private events: ClusterEvent[] = [];
  private source: EventSource | undefined;
  private readonly root = document.getElementById('app')!;
  private readonly parts = {
    header: el('header'),
    nodes: el('section', { id: 'nodes' }),
    ips: el('section', { id: 'ips' }),
    pools: el('section', { id: 'pools' }),
    rejected: el('section', { id: 'rejected' }),
    timeline: el('section', { id: 'timeline' }),
  };
  private timelineList = el('ol', { class: 'timeline' });

  async start(): Promise<void> {
    document.head.append(el('style', {}, STYLE));
    this.root.replaceChildren(
      this.parts.header,
      el('div', { class: 'grid' }, el('div', {}, this.parts.nodes, this.parts.pools, this.parts.rejected), this.parts.timeline),
      this.parts.ips,
    );
    await this.load();
    performance.mark('herald-view-rendered'); // the page is complete and interactive (bench/view reads it)
    this.connect();
  }

  private async load(): Promise<void> {
    // The compact form: columns with shared strings (a fifth of the rows' size for 10,000 IPs).
    const res = await fetch(withToken('/v1/view?compact=1'), { cache: 'no-store' });
    if (!res.ok) throw new Error(`GET /v1/view: ${res.status}`);
    performance.mark('herald-view-answered');
    this.view = expandView((await res.json()) as CompactSnapshot);
    performance.mark('herald-view-parsed');
    this.events = [...this.view.events];
    this.ipsIndex = undefined;
    this.sums.clear();
    this.withConnections.clear();
    this.notDone.clear();
    this.advertised.clear();
    for (const x of this.view.ips) {
      const sum = sumOf(x.answers);
      if (sum !== undefined) this.sums.set(x.ip, sum);
      if (Object.keys(x.connections).length > 0) this.withConnections.add(x.ip);
      if (x.reconcile.state !== 'done') this.notDone.add(x.ip);
      if (x.advertisedBy.length > 0) this.advertised.add(x.ip);
    }
    this.renderAll();
  }

  private connect(): void {
    this.source?.close();
    const source = new EventSource(withToken(`/v1/events?after=${this.view.lastEventId}`));
    this.source = source;
    source.addEventListener('event', (m) => this.onEvent(JSON.parse((m as MessageEvent<string>).data) as ClusterEvent));
    source.addEventListener('owners', (m) => this.onOwners(JSON.parse((m as MessageEvent<string>).data) as Record<string, string | null>));
    source.addEventListener('nodes', (m) => {
      this.view.nodes = JSON.parse((m as MessageEvent<string>).data) as ViewNode[];
      this.renderNodes();
    });
    source.addEventListener('pools', (m) => {
      this.view.pools = JSON.parse((m as MessageEvent<string>).data) as ViewSnapshot['pools'];
      this.renderPools();
    });
    source.addEventListener('counters', (m) => this.onCounters(JSON.parse((m as MessageEvent<string>).data) as CountersPush & { at: number }));
    source.addEventListener('reload', () => void this.load().then(() => this.connect()));
    source.addEventListener('open', () => this.setLive(true));
    source.addEventListener('error', () => this.setLive(false));
  }

  private setLive(live: boolean): void {
    this.parts.header.querySelector('.live')?.replaceChildren(live ? 'live' : 'reconnecting…');
    this.parts.header.querySelector('.live')?.setAttribute('data-live', String(live));
  }

  private onEvent(e: ClusterEvent): void {
    if (this.events.length > 0 && e.id <= this.events[this.events.length - 1]!.id) return; // already shown
    this.events.push(e);
    if (this.events.length > 500) this.events.splice(0, this.events.length - 500);
    this.timelineList.prepend(this.eventItem(e));
    while (this.timelineList.childElementCount > 500) this.timelineList.lastElementChild?.remove();
    if (e.kind === 'allocated') this.addService(e.ip, e.service);
    if (e.kind === 'owner-took') this.setOwner(e.ip, e.node, e.at);
    if (e.kind === 'intent-rejected') {
      this.view.rejected = { at: e.at, errors: e.reasons.map((reason) => ({ file: '', document: null, object: null, field: '', reason })) };
      this.renderRejected();
    }
  }

  private onOwners(changes: Record<string, string | null>): void {
    for (const [ip, owner] of Object.entries(changes)) {
      const current = this.ipIndex().get(ip);
      if (current && current.owner === owner) continue;
      this.setOwner(ip, owner, owner ? new Date().toISOString() : null);
    }
    this.updateOwnedCounts();
  }

  /** Only the nodes' "IPs owned" cells (an ownership change rebuilt the whole node table before). */
  private updateOwnedCounts(): void {
    const owned = new Map<string, number>();
    for (const x of this.view.ips) if (x.owner) owned.set(x.owner, (owned.get(x.owner) ?? 0) + 1);
    for (const row of this.parts.nodes.querySelectorAll<HTMLTableRowElement>('tr[data-node]')) {
      const cell = row.querySelector('td.owned');
      const text = String(owned.get(row.dataset['node'] ?? '') ?? 0);
      if (cell && cell.textContent !== text) cell.textContent = text;
    }
  }

  private setOwner(ip: string, owner: string | null, since: string | null): void {
    let item = this.ipIndex().get(ip);
    if (!item) {
      item = { ...blankIp(ip), owner, since };
      this.view.ips.push(item);
      this.ipsIndex?.set(ip, item);
      this.renderIps();
      return;
    }
    if (item.owner === owner && item.since) return;
    item.owner = owner;
    item.since = since;
    item.mode = modeOf(item);
    const row = this.rows.get(ip);
    if (row) this.fillRow(row, item);
  }

  private addService(ip: string, service: string): void {
    const item = this.ipIndex().get(ip);
    if (!item) {
      this.view.ips.push({ ...blankIp(ip), services: [service] });
      this.renderIps();
      return;
    }
    if (item.services.includes(service)) return;
    item.services.push(service);
    const row = this.rows.get(ip);
    if (row) row.children[1]!.textContent = item.services.join(', ');
  }

  private ipsIndex: Map<string, ViewIp> | undefined;
  private ipIndex(): Map<string, ViewIp> {
    if (!this.ipsIndex || this.ipsIndex.size !== this.view.ips.length) this.ipsIndex = new Map(this.view.ips.map((x) => [x.ip, x]));
    return this.ipsIndex;
  }

  private onCounters(c: CountersPush & { at: number }): void {
    const index = this.ipIndex();
    const counted = new Set<ViewIp>();
    // Answers: the first push has them all, later ones only what changed; a node no longer covered loses its counters.
    const nodes = (c.nodes ?? Object.keys(c.answers)).sort().join(' ');
    if (c.full || nodes !== this.answerNodes) {
      const covered = new Set(nodes.split(' '));
      for (const x of this.view.ips)
        for (const node of Object.keys(x.answers))
          if (c.full || !covered.has(node)) {
            delete x.answers[node];
            counted.add(x);
          }
      this.answerNodes = nodes;
    }
    for (const [node, replies] of Object.entries(c.answers))
      for (const [ip, n] of Object.entries(replies)) {
        const x = index.get(ip);
        if (!x) continue;
        if (n < 0) delete x.answers[node]; // the node no longer counts it (the IP moved away)
        else x.answers[node] = n;
        counted.add(x);
      }
    // Rates: a changed sum gives a sample; IPs with a graph and no change get a zero.
    const seconds = this.lastCountersAt === undefined ? 0 : (c.at - this.lastCountersAt) / 1000;
    this.lastCountersAt = c.at;
    const sampled = new Set<string>();
    for (const x of counted) {
      const sum = sumOf(x.answers);
      const before = this.sums.get(x.ip);
      if (sum === undefined) {
        this.sums.delete(x.ip);
        continue;
      }
      this.sums.set(x.ip, sum);
      const rate = before === undefined || seconds <= 0 ? 0 : Math.max(0, (sum - before) / seconds);
      if (rate === 0 && !this.rates.has(x.ip)) continue;
      this.sample(x.ip, rate);
      sampled.add(x.ip);
    }
    for (const [ip, h] of this.rates) {
      if (sampled.has(ip)) continue;
      this.sample(ip, 0);
      if (h.every((r) => r === 0)) this.rates.delete(ip); // a flat line: no graph to keep
      sampled.add(ip);
    }
    for (const ip of sampled) {
      const x = index.get(ip);
      if (x) counted.add(x);
    }
    // LB connections (sparse, whole every time).
    const conns = new Map<string, Record<string, number>>();
    for (const [node, perIp] of Object.entries(c.connections ?? {})) for (const [ip, n] of Object.entries(perIp)) conns.set(ip, { ...(conns.get(ip) ?? {}), [node]: n });
    for (const ip of new Set([...this.withConnections, ...conns.keys()])) {
      const x = index.get(ip);
      if (!x) continue;
      const now = conns.get(ip) ?? {};
      if (JSON.stringify(now) === JSON.stringify(x.connections)) continue;
      x.connections = now;
      const row = this.rows.get(ip);
      if (row) row.children[C.conns]!.textContent = connectionsText(x);
    }
    this.withConnections = new Set(conns.keys());
    // BGP: every node advertising each IP (sent when it changed).
    if (c.advertised) {
      const now = new Map(Object.entries(c.advertised));
      for (const ip of now.keys()) if (!index.has(ip)) this.setOwner(ip, null, null);
      for (const ip of new Set([...this.advertised, ...now.keys()])) {
        const x = index.get(ip) ?? this.ipIndex().get(ip);
        if (!x) continue;
        x.advertisedBy = now.get(ip) ?? [];
        x.mode = modeOf(x);
        const row = this.rows.get(ip);
        if (row) this.fillRow(row, x, false);
      }
      this.advertised = new Set(now.keys());
    }
    for (const x of counted) {
      const row = this.rows.get(x.ip);
      if (row) this.fillCounters(row, x);
    }
    // Rows not done: those now, and those that were.
    for (const ip of new Set([...this.notDone, ...Object.keys(c.reconcile)])) {
      const x = index.get(ip);
      if (!x) continue;
      const reconcile = c.reconcile[ip] ?? DONE;
      if (reconcile.state === x.reconcile.state && reconcile.detail === x.reconcile.detail) continue;
      x.reconcile = reconcile;
      const row = this.rows.get(ip);
      if (row) this.fillReconcile(row, x);
    }
    this.notDone = new Set(Object.keys(c.reconcile));
    // Pool, LB backends, policy revision where they changed (the tables moved on since the snapshot).
    for (const [ip, d] of Object.entries(c.details ?? {})) {
      const item = index.get(ip);
      if (!item) continue;
      Object.assign(item, d);
      const row = this.rows.get(ip);
      if (row) this.fillDetails(row, item);
    }
    // Node health, as each node reports it (or why it could not be asked).
    for (const n of this.view.nodes) {
      const h = c.health[n.name];
      if (h === undefined || h === n.health) continue;
      n.health = h;
      const cell = this.parts.nodes.querySelector(`tr[data-node="${CSS.escape(n.name)}"] td.health`);
      if (cell) {
        cell.textContent = h || '-';
        cell.className = healthClass(h);
      }
    }
  }

  private sample(ip: string, rate: number): void {
    const h = this.rates.get(ip) ?? [];
    h.push(rate);
    if (h.length > HISTORY) h.shift();
    this.rates.set(ip, h);
  }

  private renderAll(): void {
    const v = this.view;
    this.parts.header.replaceChildren(
      el('h1', {}, 'herald cluster view'),
      el('span', { class: 'meta' }, `served by ${v.node} · herald ${v.version} · store ${v.store} · gratuitous ARP sent ${v.garp.sent}`),
      el('span', { class: 'live', 'data-live': 'false' }, 'connecting…'),
    );
    this.renderNodes();
    this.renderIps();
    this.renderPools();
    this.renderRejected();
    this.timelineList.replaceChildren(...[...this.events].reverse().map((e) => this.eventItem(e)));
    this.parts.timeline.replaceChildren(el('h2', {}, 'Timeline'), this.timelineList);
  }

  private renderNodes(): void {
    const owned = new Map<string, number>();
    for (const x of this.view.ips) if (x.owner) owned.set(x.owner, (owned.get(x.owner) ?? 0) + 1);
    this.parts.nodes.replaceChildren(
      el('h2', {}, `Nodes (${this.view.nodes.filter((n) => n.alive).length} alive)`),
      table(
        ['node', 'state', 'health', 'lease', 'interfaces', 'IPs owned', 'version', 'last error'],
        this.view.nodes.map((n) =>
          el(
            'tr',
            { 'data-node': n.name, class: n.alive ? '' : 'dead' },
            el('td', {}, n.name + (n.self ? ' (this page)' : '')),
            el('td', { class: 'state' }, n.alive ? 'alive' : 'gone'),
            el('td', { class: healthClass(n.health) }, n.health || '-'),
            el('td', {}, n.lease),
            el('td', {}, n.interfaces.join(', ') || '-'),
            el('td', { class: 'owned' }, String(owned.get(n.name) ?? 0)),
            el('td', {}, n.version || '-'),
            el('td', { class: 'error' }, n.lastError ?? ''),
          ),
        ),
      ),
    );
  }

  private renderIps(): void {
    if (!this.ipsBody) {
      const t = table(['IP', 'services', 'pool', 'family', 'mode (advertised by)', 'owner', 'since', 'answers (by node)', 'answers/s', 'LB backends', 'LB connections', 'policy', 'reconcile'], []);
      this.ipsBody = t.querySelector('tbody')!;
      this.scroller.replaceChildren(t);
      this.scroller.addEventListener('scroll', () => this.queueWindow(), { passive: true });
      addEventListener('resize', () => this.queueWindow());
      this.parts.ips.replaceChildren(this.ipsTitle, this.scroller);
    }
    this.ipsTitle.textContent = `Service IPs (${this.view.ips.length})`;
    this.window = { first: -1, last: -1 };
    this.renderWindow();
  }

  private queueWindow(): void {
    if (this.windowQueued) return;
    this.windowQueued = true;
    requestAnimationFrame(() => {
      this.windowQueued = false;
      this.renderWindow();
    });
  }

  /** The rows in view (and OVERSCAN either side) as one HTML string between two spacer rows; the rest are not in the document. */
  private renderWindow(): void {
    const body = this.ipsBody!;
    const n = this.view.ips.length;
    const height = this.scroller.clientHeight || innerHeight;
    const first = Math.max(0, Math.floor(this.scroller.scrollTop / this.rowHeight) - OVERSCAN);
    const last = Math.min(n, first + Math.ceil(height / this.rowHeight) + 2 * OVERSCAN);
    if (first === this.window.first && last === this.window.last) return;
    this.window = { first, last };
    this.rows.clear();
    const spacer = (rows: number) => (rows > 0 ? `<tr class="spacer" style="height:${rows * this.rowHeight}px"></tr>` : '');
    let html = spacer(first);
    for (let k = first; k < last; k++) html += this.rowHtml(this.view.ips[k]!);
    body.innerHTML = html + spacer(n - last);
    for (const row of body.querySelectorAll<HTMLTableRowElement>('tr[data-ip]')) {
      const ip = row.dataset['ip']!;
      this.rows.set(ip, row);
      const h = this.rates.get(ip);
      if (h && h.length > 1) row.children[C.rate]!.replaceChildren(sparkline(h));
    }
  }

  /** A row as HTML, with the same texts fillRow(), fillCounters(), fillDetails() and fillReconcile() write. */
  private rowHtml(x: ViewIp): string {
    const r = x.reconcile;
    return (
      `<tr data-ip="${esc(x.ip)}"><td class="ip">${esc(x.ip)}</td><td class="services">${esc(x.services.join(', ') || '-')}</td><td class="pool">${esc(x.pool ?? '-')}</td><td>IPv${x.family}</td>` +
      `<td class="mode">${esc(modeText(x))}</td><td class="${ownerClass(x)}">${esc(ownerText(x))}</td><td class="since">${esc(sinceText(x))}</td>` +
      `<td class="replies">${esc(answersText(x))}</td><td class="rate"></td><td class="lb" title="${esc(lbText(x))}">${esc(lbText(x))}</td><td class="conns">${esc(connectionsText(x))}</td><td class="policy">${policyText(x)}</td>` +
      `<td class="reconcile ${r.state}" data-state="${r.state}">${esc(reconcileText(x))}</td></tr>`
    );
  }

  private fillRow(row: HTMLTableRowElement, x: ViewIp, flash = true): void {
    const cells = row.children;
    cells[C.mode]!.textContent = modeText(x);
    cells[C.owner]!.textContent = ownerText(x);
    cells[C.owner]!.className = ownerClass(x);
    cells[C.since]!.textContent = sinceText(x);
    // A flash through the Web Animations API: restarting a CSS animation needed a forced layout of the whole table per moved row.
    if (flash) cells[C.owner]!.animate?.([{ background: '#ffe08a' }, { background: 'transparent' }], { duration: 1200, easing: 'ease-out' });
  }

  private fillCounters(row: HTMLTableRowElement, x: ViewIp): void {
    row.children[C.replies]!.textContent = answersText(x);
    const h = this.rates.get(x.ip);
    if (h && h.length > 1) row.children[C.rate]!.replaceChildren(sparkline(h));
  }

  private fillDetails(row: HTMLTableRowElement, x: ViewIp): void {
    row.children[C.pool]!.textContent = x.pool ?? '-';
    row.children[C.lb]!.textContent = lbText(x);
    row.children[C.lb]!.setAttribute('title', lbText(x));
    row.children[C.policy]!.textContent = policyText(x);
  }

  private fillReconcile(row: HTMLTableRowElement, x: ViewIp): void {
    const cell = row.children[C.reconcile]!;
    cell.textContent = reconcileText(x);
    cell.className = `reconcile ${x.reconcile.state}`;
    cell.setAttribute('data-state', x.reconcile.state);
  }

  private renderPools(): void {
    this.parts.pools.replaceChildren(
      el('h2', {}, 'Pools'),
      table(
        ['pool', 'size', 'used', 'free', 'conflicts'],
        this.view.pools.map((p) => el('tr', { 'data-pool': p.pool }, el('td', {}, p.pool), el('td', {}, p.total), el('td', {}, p.used), el('td', {}, p.free), el('td', { class: p.conflicting ? 'error' : '' }, p.conflicting ? 'conflicting' : p.disabled ? 'disabled' : 'none'))),
      ),
    );
  }

  private renderRejected(): void {
    const r = this.view.rejected;
    this.parts.rejected.replaceChildren(
      el('h2', {}, 'Rejected intent'),
      r
        ? el('div', { class: 'rejected' }, el('p', {}, `rejected at ${new Date(r.at).toLocaleTimeString()} — the previous good intent stays in force`), el('ul', {}, ...r.errors.map((e) => el('li', {}, [e.file, e.object, e.field].filter(Boolean).join(' ') + (e.file || e.object || e.field ? ': ' : '') + e.reason))))
        : el('p', { class: 'quiet' }, 'none'),
    );
  }

  private eventItem(e: ClusterEvent): HTMLElement {
    const cause = e.kind === 'owner-took' ? (e.cause ?? '') : e.kind === 'owner-released' ? e.cause : '';
    return el(
      'li',
      { 'data-id': String(e.id), 'data-kind': e.kind, ...(cause ? { 'data-cause': cause } : {}), class: e.kind },
      el('time', {}, TIME.format(new Date(e.at))),
      el('b', {}, e.node),
      el('span', { class: 'what' }, describeEvent(e)),
    );
  }
}

/** The IP table's columns. */
const C = { ip: 0, services: 1, pool: 2, family: 3, mode: 4, owner: 5, since: 6, replies: 7, rate: 8, lb: 9, conns: 10, policy: 11, reconcile: 12 } as const;
const DONE: ViewReconcile = { state: 'done', detail: '' };

function blankIp(ip: string): ViewIp {
  return { ip, family: ip.includes(':') ? 6 : 4, services: [], mode: 'L2', owner: null, advertisedBy: [], since: null, replies: null, answers: {}, pool: null, lb: [], policyRevision: null, connections: {}, reconcile: DONE };
}

/** An IP only advertised over BGP has no L2 owner, and that is not a fault ('nobody', in red, is one). */
const ownerText = (x: ViewIp) => x.owner ?? (x.advertisedBy.length ? '-' : 'nobody');
const ownerClass = (x: ViewIp) => (x.owner || x.advertisedBy.length ? 'owner' : 'owner none');
/** L2 when someone owns it, BGP when some node advertises it (the agent's words). */
const modeOf = (x: ViewIp) => (x.owner && x.advertisedBy.length ? 'L2+BGP' : x.advertisedBy.length ? 'BGP' : 'L2');
const sumOf = (answers: Record<string, number>) => {
  let sum: number | undefined;
  for (const n of Object.values(answers)) sum = (sum ?? 0) + n;
  return sum;
};
function connectionsText(x: ViewIp): string {
  const c = Object.entries(x.connections).sort(([a], [b]) => a.localeCompare(b));
  return c.length ? c.map(([node, n]) => `${node} ${n}`).join(', ') : '-';
}
const modeText = (x: ViewIp) => x.mode + (x.advertisedBy.length ? ` (${x.advertisedBy.join(', ')})` : '');
/** One formatter for every time shown (toLocaleTimeString builds a new one per call: 10,000 rows paid for it). */
const TIME = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
const sinceText = (x: ViewIp) => (x.since ? TIME.format(new Date(x.since)) : '-');
const policyText = (x: ViewIp) => (x.policyRevision === null ? '-' : `rev ${x.policyRevision}`);
const reconcileText = (x: ViewIp) => (x.reconcile.state === 'done' ? 'done' : `${x.reconcile.state}: ${x.reconcile.detail}`);
function answersText(x: ViewIp): string {
  const answers = Object.entries(x.answers).sort(([a], [b]) => a.localeCompare(b));
  return answers.length ? answers.map(([node, n]) => `${node} ${n}`).join(', ') : '-';
}
const lbText = (x: ViewIp) => x.lb.map((f) => `${f.frontend} → ${f.backends.join(', ') || 'no backends'}`).join('; ') || '-';
const healthClass = (h: string) => `health${h && h !== 'ok' ? ' error' : ''}`;

const esc = (t: string) => t.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function table(headers: string[], rows: HTMLElement[]): HTMLTableElement {
  return el('table', {}, el('thead', {}, el('tr', {}, ...headers.map((h) => el('th', {}, h)))), el('tbody', {}, ...rows)) as HTMLTableElement;
}

void new Page().start().catch((e: unknown) => {
  document.getElementById('app')!.textContent = `herald cluster view: ${String(e)}`;
});
