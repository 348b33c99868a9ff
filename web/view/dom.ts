/** Small DOM helpers for the view page: elements, a rate sparkline, the style sheet. */

export function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: Array<Node | string>): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.append(...children);
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';

/** A 60×16 polyline of the samples (answers per second), scaled to their maximum. */
export function sparkline(samples: readonly number[]): SVGSVGElement {
  const w = 60;
  const h = 16;
  const max = Math.max(1, ...samples);
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('width', String(w));
  svg.setAttribute('height', String(h));
  svg.setAttribute('class', 'spark');
  const line = document.createElementNS(SVG, 'polyline');
  const step = w / Math.max(1, samples.length - 1);
  line.setAttribute('points', samples.map((s, i) => `${(i * step).toFixed(1)},${(h - 1 - (s / max) * (h - 2)).toFixed(1)}`).join(' '));
  svg.append(line);
  const title = document.createElementNS(SVG, 'title');
  title.textContent = `${samples[samples.length - 1]!.toFixed(1)}/s now, ${max.toFixed(1)}/s peak`;
  svg.append(title);
  return svg;
}

/** Height of an IP row in px (fixed, so the table can draw only the rows in view). */
export const ROW_HEIGHT = 24;

export const STYLE = `
body { font: 13px/1.4 system-ui, sans-serif; margin: 1rem 1.5rem; color: #1d2430; background: #f7f8fa; }
header { display: flex; gap: 1rem; align-items: baseline; flex-wrap: wrap; }
h1 { font-size: 1.3rem; margin: 0; }
h2 { font-size: 1rem; margin: 1rem 0 .4rem; }
.meta { color: #5b6678; }
.live { padding: 0 .5rem; border-radius: 3px; background: #d9534f; color: white; }
.live[data-live="true"] { background: #2e8540; }
.grid { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 1.5rem; }
table { border-collapse: collapse; width: 100%; background: white; }
th, td { text-align: left; padding: 2px 8px; border-bottom: 1px solid #e3e6eb; white-space: nowrap; }
th { background: #eef1f5; font-weight: 600; }
tr.dead td { color: #9aa3b0; }
td.owner.none { color: #d9534f; font-weight: 600; }
td.error, .rejected { color: #b52b27; }
td.reconcile.pending { color: #a66a00; }
td.reconcile.error { color: #b52b27; font-weight: 600; }
td.lb { max-width: 13rem; }
.grid > div { overflow-x: auto; }
#ips table { font-size: 12px; }
#ips th, #ips td { padding: 2px 6px; }
.scroller { max-height: 75vh; overflow-y: auto; border: 1px solid #e3e6eb; }
.scroller thead th { position: sticky; top: 0; z-index: 1; }
#ips tr[data-ip] { height: ${ROW_HEIGHT}px; }
#ips td { line-height: 18px; max-height: 18px; overflow: hidden; text-overflow: ellipsis; }
#ips td.rate svg { display: block; }
.quiet { color: #8a93a0; }
ol.timeline { list-style: none; padding: 0; margin: 0; max-height: 26rem; overflow-y: auto; background: white; border: 1px solid #e3e6eb; }
ol.timeline li { padding: 3px 8px; border-bottom: 1px solid #f0f2f5; display: flex; gap: .6rem; }
ol.timeline time { color: #8a93a0; font-variant-numeric: tabular-nums; }
ol.timeline li.owner-took .what { color: #1d5fa8; }
ol.timeline li.intent-rejected .what, ol.timeline li.owner-fenced .what { color: #b52b27; }
svg.spark polyline { fill: none; stroke: #1d5fa8; stroke-width: 1.5; }
`;
