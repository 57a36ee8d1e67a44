/**
 * The job view's additions: training-scalar charts (GET jobs/NAME/metrics, read again when
 * the event stream reports the job changed or, while it runs, a new GPU sample), its GPUs'
 * figures, its alerts, and "open in notebook" (a cell with the job's code).
 */
import * as React from 'react';

import { Gauge, LineChart, Sparkline } from './charts';
import { scalarCharts, type ScalarLike } from './chartmodel';
import type { JobFeed } from './feed';
import { formatGiB, gaugeFraction } from './gpumodel';
import { getMetrics } from './hostapi';
import { TERMINAL, type JobView } from './models';
import type { WorkbenchClient } from './request';
import type { Alert, GpuRecord, ScalarRecord } from './wire';

/** Puts `code` in a notebook cell; resolves to what it did, in words. */
export type OpenInNotebook = (code: string) => Promise<string>;

/** The cell "open in notebook" inserts: the job as an object and its log. */
export function notebookCode(name: string): string {
  const quoted = JSON.stringify(name);
  return [
    '%load_ext workbench',
    'import workbench',
    '',
    `job = workbench.get(${quoted})  # .status, .metrics(), .logs(), .cancel()`,
    `%gpu_logs ${name} --all --tail 50`,
    'job'
  ].join('\n');
}

/** GPU samples kept for the job view's sparklines (per GPU). */
const GPU_KEPT = 300;

interface JobMetrics {
  scalars: ScalarRecord[];
  gpu: GpuRecord[];
  cursor: string;
}

/** The job's metrics, read once and then only what is new (the cursor), each time
 * `trigger` changes; one request at a time, a change meanwhile reads again after it. */
function useMetrics(
  client: WorkbenchClient,
  name: string,
  trigger: string
): { metrics: JobMetrics; error: string | null } {
  const [metrics, setMetrics] = React.useState<JobMetrics>({ scalars: [], gpu: [], cursor: '' });
  const [error, setError] = React.useState<string | null>(null);
  const state = React.useRef({ busy: false, again: false, cursor: '', name });

  React.useEffect(() => {
    state.current = { busy: false, again: false, cursor: '', name };
    setMetrics({ scalars: [], gpu: [], cursor: '' });
  }, [name]);

  React.useEffect(() => {
    const s = state.current;
    const read = (): void => {
      if (s.busy) {
        s.again = true;
        return;
      }
      s.busy = true;
      getMetrics(client, name, s.cursor)
        .then(m => {
          if (state.current !== s) return;
          s.cursor = m.cursor;
          setError(null);
          if (m.scalars.length || m.gpu.length) {
            setMetrics(old => ({
              scalars: old.scalars.concat(m.scalars),
              gpu: old.gpu.concat(m.gpu).slice(-GPU_KEPT * 8),
              cursor: m.cursor
            }));
          }
        })
        .catch((e: Error) => state.current === s && setError(e.message))
        .finally(() => {
          s.busy = false;
          if (s.again && state.current === s) {
            s.again = false;
            read();
          }
        });
    };
    read();
  }, [client, name, trigger]);
  return { metrics, error };
}

/** Charts, GPU figures, alerts and "open in notebook" for one job. */
export function JobExtras({
  client,
  feed,
  job,
  openInNotebook
}: {
  client: WorkbenchClient;
  feed: JobFeed;
  job: JobView;
  openInNotebook?: OpenInNotebook;
}): JSX.Element {
  const running = !TERMINAL.has(job.status);
  // What makes the view read the metrics again: the job's record changing (a job frame),
  // and while it runs, each gpu frame (the sampler's tick) - never a timer of our own.
  const gpuTick = running && feed.gpu ? frameTime(feed.gpu.gpus) : '';
  const trigger = [job.status, job.finishedAt, job.restarts, gpuTick].join(':');
  const { metrics, error } = useMetrics(client, job.name, trigger);
  const charts = React.useMemo(
    () => scalarCharts(metrics.scalars as unknown as ScalarLike[]),
    [metrics.scalars]
  );
  const devices = jobDevices(job);
  const hostAlerts = ((feed.gpu?.alerts ?? []) as Alert[]).filter(
    a => a.cleared === null && devices.has(a.gpu)
  );
  const jobAlerts = job.events.filter(e => e.level !== 'info');

  return (
    <>
      <OpenInNotebookButton name={job.name} open={openInNotebook} />
      <section
        className="jp-WorkbenchPanel-charts"
        aria-label="Training charts"
        data-charts={charts.length}
      >
        <h4>Training scalars</h4>
        {error && (
          <div className="jp-WorkbenchPanel-error" role="alert">
            {error}
          </div>
        )}
        {charts.length === 0 && !error && (
          <p className="jp-WorkbenchPanel-empty">
            {running
              ? 'No scalars yet: the script reports them with workbench.run.log(step=..., loss=...).'
              : 'The job logged no scalars.'}
          </p>
        )}
        {charts.map(c => (
          <LineChart key={c.name} title={c.name} series={c.series} xLabel="step" />
        ))}
      </section>
      <JobGpus records={metrics.gpu} />
      <section
        className="jp-WorkbenchPanel-jobAlerts"
        aria-label="Alerts"
        data-alerts={hostAlerts.length + jobAlerts.length}
      >
        <h4>Alerts</h4>
        {hostAlerts.length + jobAlerts.length === 0 ? (
          <p className="jp-WorkbenchPanel-empty">None.</p>
        ) : (
          <ul className="jp-WorkbenchPanel-alerts">
            {hostAlerts.map(a => (
              <li key={`gpu-${a.gpu}-${a.kind}`} className={`jp-mod-${a.level}`} data-kind={a.kind}>
                {a.message}
              </li>
            ))}
            {jobAlerts.map((e, i) => (
              <li key={`ev-${i}`} className={`jp-mod-${e.level}`} data-kind={e.reason}>
                <strong>{e.reason}</strong> {e.message}
              </li>
            ))}
          </ul>
        )}
      </section>
    </>
  );
}

function frameTime(gpus: unknown[]): string {
  const first = gpus[0] as { time?: unknown } | undefined;
  return typeof first?.time === 'number' ? String(first.time) : '';
}

/** GPU indices the job's ranks hold ("0,1" per rank), for matching host alerts. */
function jobDevices(job: JobView): Set<number> {
  const out = new Set<number>();
  for (const r of job.ranks) {
    for (const part of (r.gpuDevices ?? '').split(',')) {
      const n = Number(part.trim());
      if (part.trim() !== '' && Number.isInteger(n)) out.add(n);
    }
  }
  return out;
}

/** The newest figures of each GPU the job recorded, with a utilisation sparkline. */
function JobGpus({ records }: { records: GpuRecord[] }): JSX.Element | null {
  if (records.length === 0) return null;
  const byGpu = new Map<string, GpuRecord[]>();
  for (const r of records) {
    const key = `${r.uuid ?? r.index}`;
    byGpu.set(key, (byGpu.get(key) ?? []).concat(r).slice(-GPU_KEPT));
  }
  return (
    <section className="jp-WorkbenchPanel-jobGpus" aria-label="The job's GPUs">
      <h4>GPUs</h4>
      {[...byGpu.entries()].map(([key, list]) => {
        const s = list[list.length - 1];
        const ranks = Array.isArray(s.rank) ? s.rank.join(',') : (s.rank ?? '');
        return (
          <div key={key} className="jp-WorkbenchPanel-card" data-gpu={s.index}>
            <h4>
              GPU {s.index} <span className="jp-WorkbenchPanel-gpuName">{s.name}</span>
              {ranks !== '' ? <span className="jp-WorkbenchPanel-meta"> rank {ranks}</span> : null}
            </h4>
            <Gauge
              label="util"
              fraction={gaugeFraction(s, 'utilization')}
              text={s.utilization === null ? 'n/a' : `${Math.round(s.utilization)}%`}
            />
            <Gauge
              label="mem"
              fraction={gaugeFraction(s, 'memory')}
              text={`${formatGiB(s.memory_used)} / ${formatGiB(s.memory_total)}`}
            />
            <Gauge
              label="temp"
              fraction={gaugeFraction(s, 'temperature')}
              text={s.temperature === null ? 'n/a' : `${Math.round(s.temperature)} °C`}
            />
            <Sparkline
              points={list.map(r => ({ x: r.time, y: r.utilization }))}
              label={`GPU ${s.index} util`}
              yDomain={{ min: 0, max: 100 }}
            />
          </div>
        );
      })}
    </section>
  );
}

function OpenInNotebookButton({
  name,
  open
}: {
  name: string;
  open?: OpenInNotebook;
}): JSX.Element {
  const [said, setSaid] = React.useState<{ text: string; failed: boolean } | null>(null);
  const click = (): void => {
    if (!open) {
      setSaid({ text: 'Notebooks are not available in this JupyterLab.', failed: true });
      return;
    }
    open(notebookCode(name))
      .then(text => setSaid({ text, failed: false }))
      .catch((e: Error) =>
        setSaid({ text: `Opening in a notebook failed: ${e.message}`, failed: true })
      );
  };
  return (
    <div className="jp-WorkbenchPanel-toolbar">
      <button className="jp-mod-styled" onClick={click} aria-label={`Open ${name} in a notebook`}>
        Open in notebook
      </button>
      {said && (
        <span
          className={said.failed ? 'jp-WorkbenchPanel-error' : 'jp-WorkbenchPanel-meta'}
          role={said.failed ? 'alert' : 'status'}
          data-notebook-status
        >
          {said.text}
        </span>
      )}
    </div>
  );
}
