/**
 * The job view's additions: training-scalar charts, its GPUs' figures, its alerts, and
 * "open in notebook" (a cell with the job's code). A job that may still log (not finished
 * when the view opens it) gets its metrics pushed over the event stream (a metrics
 * subscription, re-subscribed from its cursor after a reconnect, ended when the view
 * closes); a finished one is read with GET jobs/NAME/metrics, again when its record changes.
 */
import * as React from 'react';

import { Gauge, LineChart, Sparkline } from './charts';
import { scalarCharts, type ScalarLike } from './chartmodel';
import type { JobFeed } from './feed';
import type { EventStream } from './stream';
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

/** `old` with the new records of `m` appended (GPU samples capped). */
function appended(old: JobMetrics, m: { scalars: ScalarRecord[]; gpu: GpuRecord[]; cursor: string }): JobMetrics {
  return {
    scalars: old.scalars.concat(m.scalars),
    gpu: old.gpu.concat(m.gpu).slice(-GPU_KEPT * 8),
    cursor: m.cursor
  };
}

/** The job's metrics. A job that is not finished when the view opens it: pushed by the
 * event stream from its first record (one subscription while the view shows it, kept
 * after the job ends so its last records arrive). Otherwise read once and then only what
 * is new (the cursor) each time `trigger` changes; one request at a time. */
function useMetrics(
  client: WorkbenchClient,
  stream: EventStream,
  name: string,
  running: boolean,
  trigger: string
): { metrics: JobMetrics; error: string | null } {
  const [metrics, setMetrics] = React.useState<JobMetrics>({ scalars: [], gpu: [], cursor: '' });
  const [error, setError] = React.useState<string | null>(null);
  const state = React.useRef({ busy: false, again: false, cursor: '', name, live: running });

  React.useEffect(() => {
    // `running` counts only when the view opens a job: a subscription outlives the job's
    // end (the server sends what is left, then stays silent), so no GET duplicates it.
    state.current = { busy: false, again: false, cursor: '', name, live: running };
    setMetrics({ scalars: [], gpu: [], cursor: '' });
    if (!running) return undefined;
    return stream.subscribeMetrics(name, '', frame => {
      if (frame.scalars.length || frame.gpu.length) setMetrics(old => appended(old, frame));
    });
  }, [stream, name]);

  React.useEffect(() => {
    const s = state.current;
    if (s.live) return; // the subscription delivers
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
          if (m.scalars.length || m.gpu.length) setMetrics(old => appended(old, m));
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
  // What makes the view read a finished job's metrics again: its record changing (a job
  // frame) - never a timer of our own. A running job's come over its subscription.
  const trigger = [job.status, job.finishedAt, job.restarts].join(':');
  const { metrics, error } = useMetrics(client, feed.stream, job.name, running, trigger);
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
