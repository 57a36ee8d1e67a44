/**
 * Small SVG charts (no chart library: a sparkline and a line chart are a few paths, and
 * the bundle stays small): a gauge bar, a sparkline and a multi-series line chart. The
 * arithmetic is in chartmodel.ts; colours come from JupyterLab's CSS variables.
 */
import * as React from 'react';

import { formatValue, layoutChart, type Domain, type RawPoint, type Series } from './chartmodel';

/** A labelled horizontal bar, 0..1 (null: the GPU does not report it). */
export function Gauge({
  label,
  fraction,
  text
}: {
  label: string;
  fraction: number | null;
  text: string;
}): JSX.Element {
  const pct = fraction === null ? 0 : Math.round(fraction * 100);
  return (
    <div className="jp-WorkbenchPanel-gauge" data-gauge={label}>
      <span className="jp-WorkbenchPanel-gaugeLabel">{label}</span>
      <span
        className={`jp-WorkbenchPanel-gaugeBar${pct >= 90 ? ' jp-mod-high' : ''}`}
        role="meter"
        aria-label={`${label}: ${text}`}
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={fraction === null ? undefined : pct}
      >
        <span style={{ width: `${pct}%` }} />
      </span>
      <span className="jp-WorkbenchPanel-gaugeText">{text}</span>
    </div>
  );
}

/** A tiny line of one figure's history (no axes). */
export function Sparkline({
  points,
  label,
  yDomain,
  width = 120,
  height = 24
}: {
  points: RawPoint[];
  label: string;
  yDomain?: Domain;
  width?: number;
  height?: number;
}): JSX.Element {
  const layout = layoutChart([{ name: label, points }], { width, height }, yDomain);
  const path = layout.paths[0];
  return (
    <svg
      className="jp-WorkbenchPanel-sparkline"
      viewBox={`0 0 ${width} ${height}`}
      preserveAspectRatio="none"
      role="img"
      aria-label={`${label} history, ${path.drawn} samples`}
      data-points={path.drawn}
    >
      <path d={path.d} fill="none" vectorEffect="non-scaling-stroke" />
    </svg>
  );
}

const CHART_PAD = { left: 36, right: 6, top: 6, bottom: 14 };

/** A line chart of several series over a shared x (steps or time), with y ticks and a
 * legend; a point that is not a finite number breaks its line. */
export function LineChart({
  series,
  title,
  xLabel,
  width = 280,
  height = 120
}: {
  series: Series[];
  title: string;
  xLabel: string;
  width?: number;
  height?: number;
}): JSX.Element {
  const layout = layoutChart(series, { width, height, pad: CHART_PAD });
  const drawn = layout.paths.reduce((n, p) => n + p.drawn, 0);
  return (
    <figure className="jp-WorkbenchPanel-chart" data-chart={title} data-drawn={drawn}>
      <figcaption>{title}</figcaption>
      <svg
        viewBox={`0 0 ${width} ${height}`}
        role="img"
        aria-label={`${title}: ${series.map(s => s.name).join(', ')} by ${xLabel}, ${drawn} points`}
      >
        {layout.yTicks.map(t => (
          <g key={t.value} className="jp-WorkbenchPanel-tick">
            <line x1={CHART_PAD.left} x2={width - CHART_PAD.right} y1={t.pos} y2={t.pos} />
            <text x={CHART_PAD.left - 3} y={t.pos + 3} textAnchor="end">
              {formatValue(t.value)}
            </text>
          </g>
        ))}
        {layout.hasData && (
          <text
            className="jp-WorkbenchPanel-axis"
            x={width - CHART_PAD.right}
            y={height - 2}
            textAnchor="end"
          >
            {xLabel} {formatValue(layout.x.min)}–{formatValue(layout.x.max)}
          </text>
        )}
        {layout.paths.map((p, i) => (
          <path
            key={p.name}
            d={p.d}
            fill="none"
            className={`jp-WorkbenchPanel-line jp-mod-series${i % 4}`}
            data-series={p.name}
            data-drawn={p.drawn}
            data-skipped={p.skipped}
          />
        ))}
        {!layout.hasData && (
          <text x={width / 2} y={height / 2} textAnchor="middle" className="jp-WorkbenchPanel-axis">
            no data yet
          </text>
        )}
      </svg>
      {series.length > 1 && (
        <ul className="jp-WorkbenchPanel-legend">
          {series.map((s, i) => (
            <li key={s.name} className={`jp-mod-series${i % 4}`}>
              {s.name}
            </li>
          ))}
        </ul>
      )}
    </figure>
  );
}
