/**
 * The arithmetic behind the panel's small SVG charts (sparklines, training-scalar lines):
 * domains, scales, ticks and path strings. A value that is not a finite number (null, NaN,
 * Infinity, text) is a gap: the line breaks there instead of running off to infinity, and
 * it never stretches the axis. No DOM, no React: the unit tests run in plain Node.
 */

/** One point as the data gives it (y may be anything a run.log() record holds). */
export interface RawPoint {
  x: number;
  y: unknown;
}

/** A named line of a chart. */
export interface Series {
  name: string;
  points: RawPoint[];
}

/** A closed numeric interval. */
export interface Domain {
  min: number;
  max: number;
}

/** Where the plot sits inside the SVG box. */
export interface Box {
  width: number;
  height: number;
  /** Space left for the axis labels: left, right, top, bottom. */
  pad?: { left: number; right: number; top: number; bottom: number };
}

/** A laid-out chart: one path per series, the domains and the tick marks. */
export interface ChartLayout {
  paths: { name: string; d: string; drawn: number; skipped: number }[];
  x: Domain;
  y: Domain;
  yTicks: { value: number; pos: number }[];
  /** False when no series has a single finite point (the chart says "no data"). */
  hasData: boolean;
}

/** The value as a finite number, or null (a gap). */
export function finite(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** The smallest interval holding every finite value; null when there is none. A single
 * value (or a flat line) gets room around it so it is drawn mid-height, not on an edge. */
export function extent(values: Iterable<unknown>): Domain | null {
  let min = Infinity;
  let max = -Infinity;
  for (const raw of values) {
    const v = finite(raw);
    if (v === null) continue;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  if (min === Infinity) return null;
  if (min === max) {
    const room = min === 0 ? 1 : Math.abs(min) * 0.1;
    return { min: min - room, max: max + room };
  }
  return { min, max };
}

/** A linear map from `domain` onto [from, to] (to < from flips it, as SVG's y does). */
export function scale(domain: Domain, from: number, to: number): (v: number) => number {
  const span = domain.max - domain.min;
  return v => (span === 0 ? (from + to) / 2 : from + ((v - domain.min) / span) * (to - from));
}

/** About `count` round tick values (1, 2, 5 x 10^k steps) inside the domain. */
export function niceTicks(domain: Domain, count = 4): number[] {
  const span = domain.max - domain.min;
  if (!(span > 0) || !Number.isFinite(span)) return [domain.min];
  // d3's rule: the 1/2/5/10 x 10^k step nearest (geometrically) to span / count.
  const raw = span / Math.max(1, count);
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const error = raw / magnitude;
  const step =
    magnitude *
    (error >= Math.sqrt(50) ? 10 : error >= Math.sqrt(10) ? 5 : error >= Math.sqrt(2) ? 2 : 1);
  const out: number[] = [];
  for (let v = Math.ceil(domain.min / step) * step; v <= domain.max + step * 1e-9; v += step) {
    out.push(Math.abs(v) < step * 1e-9 ? 0 : Number(v.toPrecision(12)));
  }
  return out;
}

function fmt(v: number): string {
  return (Math.round(v * 10) / 10).toString();
}

/**
 * The SVG path of one series: "M x y L x y ...", starting a new "M" after each gap (a
 * point whose x or y is not finite), so a NaN loss leaves a hole and an infinite one never
 * draws a line to the edge. Counts what was drawn and what was skipped.
 */
export function linePath(
  points: RawPoint[],
  sx: (v: number) => number,
  sy: (v: number) => number
): { d: string; drawn: number; skipped: number } {
  const parts: string[] = [];
  let pen = false;
  let drawn = 0;
  let skipped = 0;
  for (const p of points) {
    const x = finite(p.x);
    const y = finite(p.y);
    if (x === null || y === null) {
      skipped += 1;
      pen = false;
      continue;
    }
    parts.push(`${pen ? 'L' : 'M'}${fmt(sx(x))} ${fmt(sy(y))}`);
    pen = true;
    drawn += 1;
  }
  return { d: parts.join(' '), drawn, skipped };
}

const DEFAULT_PAD = { left: 0, right: 0, top: 2, bottom: 2 };

/** Lay out `series` in `box`: shared x and y domains from the finite values only. A fixed
 * `yDomain` (0..100 for a percentage) replaces the data's. */
export function layoutChart(series: Series[], box: Box, yDomain?: Domain): ChartLayout {
  const pad = box.pad ?? DEFAULT_PAD;
  const xs = extent(series.flatMap(s => s.points.filter(p => finite(p.y) !== null).map(p => p.x)));
  const ys = yDomain ?? extent(series.flatMap(s => s.points.map(p => p.y)));
  const x = xs ?? { min: 0, max: 1 };
  const y = ys ?? { min: 0, max: 1 };
  const sx = scale(x, pad.left, box.width - pad.right);
  const sy = scale(y, box.height - pad.bottom, pad.top);
  return {
    paths: series.map(s => ({ name: s.name, ...linePath(s.points, sx, sy) })),
    x,
    y,
    yTicks: ys ? niceTicks(y).map(value => ({ value, pos: sy(value) })) : [],
    hasData: xs !== null && ys !== null
  };
}

/** A short label for a tick or a latest value: 3 significant digits, k/M for large. */
export function formatValue(v: number | null): string {
  if (v === null || !Number.isFinite(v)) return '–';
  const a = Math.abs(v);
  if (a >= 1e6) return `${(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e4) return `${(v / 1e3).toPrecision(3)}k`;
  if (a === 0) return '0';
  if (a < 1e-3) return v.toExponential(1);
  return Number(v.toPrecision(3)).toString();
}

/** A run.log() record as the metrics route sends it (every other key is a scalar). */
export interface ScalarLike {
  time: number;
  rank: number;
  step: unknown;
  total?: unknown;
  [key: string]: unknown;
}

/** Keys of a record that are not scalars the script named. */
const RECORD_KEYS = new Set(['time', 'rank', 'step', 'total']);

/** One chart per scalar the script logged (loss, lr, ...), in first-seen order, with a
 * line per rank; x is the step where the record has a numeric one, else the record's
 * position. A key that never held a number (a text tag) gets no chart; a NaN or infinite
 * value (null on the wire) stays in the series as a gap. */
export function scalarCharts(
  records: ScalarLike[],
  maxCharts = 6
): { name: string; series: Series[] }[] {
  const charts = new Map<string, Map<number, RawPoint[]>>();
  const numeric = new Set<string>();
  records.forEach((record, i) => {
    const x = finite(record.step) ?? i;
    for (const [key, value] of Object.entries(record)) {
      if (RECORD_KEYS.has(key) || typeof value === 'boolean' || typeof value === 'string') continue;
      if (finite(value) !== null) numeric.add(key);
      let byRank = charts.get(key);
      if (!byRank) charts.set(key, (byRank = new Map()));
      const points = byRank.get(record.rank) ?? [];
      points.push({ x, y: value });
      byRank.set(record.rank, points);
    }
  });
  return [...charts.entries()]
    .filter(([key]) => numeric.has(key))
    .slice(0, maxCharts)
    .map(([name, byRank]) => ({
      name,
      series: [...byRank.entries()]
        .sort(([a], [b]) => a - b)
        .map(([rank, points]) => ({ name: `rank ${rank}`, points }))
    }));
}
