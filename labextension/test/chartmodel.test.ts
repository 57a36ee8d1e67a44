import { describe, expect, it } from 'vitest';

import {
  extent,
  formatValue,
  layoutChart,
  linePath,
  niceTicks,
  scalarCharts,
  scale
} from '../src/chartmodel';

/** Every number in an SVG path string. */
function numbers(d: string): number[] {
  return (d.match(/-?\d+(\.\d+)?(e[+-]?\d+)?/g) ?? []).map(Number);
}

describe('chart scaling', () => {
  it('takes the domain from finite values only', () => {
    expect(extent([3, null, NaN, Infinity, -Infinity, 'x', 1, 7])).toEqual({ min: 1, max: 7 });
    expect(extent([null, NaN, Infinity])).toBeNull();
    // One value (or a flat line) sits mid-height, not on an edge.
    expect(extent([2, 2])).toEqual({ min: 1.8, max: 2.2 });
    expect(extent([0])).toEqual({ min: -1, max: 1 });
  });

  it('maps the domain onto the box, flipping y', () => {
    const sy = scale({ min: 0, max: 10 }, 100, 0);
    expect([sy(0), sy(5), sy(10)]).toEqual([100, 50, 0]);
  });

  it('breaks the line at NaN and infinite values instead of drawing to infinity', () => {
    const points = [
      { x: 1, y: 1 },
      { x: 2, y: 2 },
      { x: 3, y: Infinity },
      { x: 4, y: NaN },
      { x: 5, y: 4 },
      { x: 6, y: null },
      { x: 7, y: 3 },
      { x: 8, y: -Infinity }
    ];
    const layout = layoutChart([{ name: 'loss', points }], { width: 100, height: 50 });
    const path = layout.paths[0];
    expect(layout.y).toEqual({ min: 1, max: 4 });
    expect(layout.x).toEqual({ min: 1, max: 7 });
    expect(path.drawn).toBe(4);
    expect(path.skipped).toBe(4);
    // Three runs: 1-2, 5, 7: each gap starts a new subpath.
    expect(path.d.split('M').length - 1).toBe(3);
    expect(path.d).not.toMatch(/Infinity|NaN/);
    for (const n of numbers(path.d)) {
      expect(n).toBeGreaterThanOrEqual(0);
      expect(n).toBeLessThanOrEqual(100);
    }
    // y 1..4 onto 48..2 (2 px padding): 2 -> 32.7, 4 -> 2 (top), 3 -> 17.3.
    expect(path.d).toBe('M0 48 L16.7 32.7 M66.7 2 M100 17.3');
  });

  it('says there is no data when nothing is finite', () => {
    const layout = layoutChart([{ name: 'loss', points: [{ x: 1, y: NaN }] }], {
      width: 10,
      height: 10
    });
    expect(layout.hasData).toBe(false);
    expect(layout.paths[0].d).toBe('');
    expect(layout.yTicks).toEqual([]);
  });

  it('keeps a fixed percentage domain when given one', () => {
    const layout = layoutChart(
      [
        {
          name: 'util',
          points: [
            { x: 0, y: 50 },
            { x: 1, y: 150 }
          ]
        }
      ],
      { width: 10, height: 100, pad: { left: 0, right: 0, top: 0, bottom: 0 } },
      { min: 0, max: 100 }
    );
    expect(layout.paths[0].d).toBe('M0 50 L10 -50');
  });

  it('puts round ticks inside the domain', () => {
    expect(niceTicks({ min: 0, max: 1 })).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks({ min: 0, max: 1 }, 10)).toEqual([
      0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1
    ]);
    expect(niceTicks({ min: 0.13, max: 2.4 })).toEqual([0.5, 1, 1.5, 2]);
    expect(niceTicks({ min: -3, max: 7 })).toEqual([-2, 0, 2, 4, 6]);
    expect(niceTicks({ min: 5, max: 5 })).toEqual([5]);
  });

  it('draws nothing for a lone non-finite x', () => {
    const d = linePath(
      [{ x: NaN, y: 1 }],
      v => v,
      v => v
    );
    expect(d).toEqual({ d: '', drawn: 0, skipped: 1 });
  });

  it('formats tick values briefly', () => {
    expect([formatValue(0), formatValue(0.12345), formatValue(12345), formatValue(2.5e6)]).toEqual([
      '0',
      '0.123',
      '12.3k',
      '2.50M'
    ]);
    expect(formatValue(null)).toBe('–');
    expect(formatValue(Infinity)).toBe('–');
  });
});

describe('scalarCharts', () => {
  it('makes a chart per logged scalar with a line per rank, nulls kept as gaps', () => {
    const records = [
      { time: 1, rank: 0, step: 1, total: 3, loss: 2.0, lr: 0.1, phase: 'warmup' },
      { time: 1, rank: 1, step: 1, total: 3, loss: 2.2, lr: 0.1, phase: 'warmup' },
      { time: 2, rank: 0, step: 2, total: 3, loss: null, lr: 0.1 },
      { time: 3, rank: 0, step: 3, total: 3, loss: 1.1, lr: 0.05, nan_only: null }
    ];
    const charts = scalarCharts(records);
    expect(charts.map(c => c.name)).toEqual(['loss', 'lr']); // text and never-numeric keys: none
    const loss = charts[0];
    expect(loss.series.map(s => s.name)).toEqual(['rank 0', 'rank 1']);
    expect(loss.series[0].points).toEqual([
      { x: 1, y: 2.0 },
      { x: 2, y: null },
      { x: 3, y: 1.1 }
    ]);
    const layout = layoutChart(loss.series, { width: 100, height: 100 });
    expect(layout.paths[0]).toMatchObject({ drawn: 2, skipped: 1 });
  });

  it('uses the record position when there is no numeric step', () => {
    const charts = scalarCharts([
      { time: 1, rank: 0, step: null, acc: 0.5 },
      { time: 2, rank: 0, step: 'end', acc: 0.7 }
    ]);
    expect(charts[0].series[0].points.map(p => p.x)).toEqual([0, 1]);
  });
});
