/**
 * The GPUs tab: a card per GPU (utilisation, memory, temperature and power gauges with a
 * history sparkline each), its alerts and what its idle time cost. History is seeded by
 * GET /gpus and grown from the event stream's "gpu" frames (no polling). A host without
 * GPUs shows the CLI's own line; a cluster shows one group per node (GET /nodes).
 */
import * as React from 'react';

import { Gauge, Sparkline } from './charts';
import type { JobFeed } from './feed';
import {
  GpuHistory,
  alertsFor,
  formatGiB,
  formatMoney,
  formatSeconds,
  gaugeFraction,
  idleWaste,
  isCluster,
  noGpuMessage,
  pricePerGpuHour,
  type GpuField
} from './gpumodel';
import { getGpus, getNodes, getSpecs } from './hostapi';
import { ErrorBox } from './panel';
import type { WorkbenchClient } from './request';
import type { Alert, GpuSample, InstanceSpec, NodeGpu, NodeInfo } from './wire';

const PERCENT = { min: 0, max: 100 };

interface Loaded {
  state: string;
  reason: string | null;
  alerts: Alert[];
  nodes: NodeInfo[];
  specs: InstanceSpec[];
}

/** Re-render whenever the feed reports (a gpu frame, a job change). */
function useFeed(feed: JobFeed): void {
  const [, setTick] = React.useState(0);
  React.useEffect(() => {
    const bump = (): void => setTick(t => t + 1);
    const a = feed.subscribe(bump);
    const b = feed.table.subscribe(bump);
    return () => {
      a();
      b();
    };
  }, [feed]);
}

/** The whole GPUs tab. */
export function GpusTab({ feed, client }: { feed: JobFeed; client: WorkbenchClient }): JSX.Element {
  useFeed(feed);
  const history = React.useRef(new GpuHistory());
  const lastFrame = React.useRef<unknown>(null);
  const [loaded, setLoaded] = React.useState<Loaded | null>(null);
  const [error, setError] = React.useState<string | null>(null);

  const load = React.useCallback(() => {
    setError(null);
    Promise.all([getGpus(client), getNodes(client), getSpecs(client).catch(() => ({ specs: [] }))])
      .then(([gpus, nodes, specs]) => {
        history.current.addSnapshot(gpus);
        setLoaded({
          state: gpus.state,
          reason: gpus.reason,
          alerts: gpus.alerts,
          nodes: nodes.nodes,
          specs: specs.specs
        });
      })
      .catch((e: Error) => setError(e.message));
  }, [client]);
  React.useEffect(load, [load]);

  // A new gpu frame: its samples join the history, its alerts and state replace ours.
  const frame = feed.gpu;
  if (frame && frame !== lastFrame.current) {
    lastFrame.current = frame;
    history.current.add(frame.gpus as GpuSample[]);
  }
  const state = frame?.state ?? loaded?.state ?? '';
  const reason = frame ? frame.reason : (loaded?.reason ?? null);
  const alerts = (frame?.alerts as Alert[] | undefined) ?? loaded?.alerts ?? [];

  const cluster = loaded ? isCluster(loaded.nodes) : false;
  // On a cluster, node figures change as jobs come and go: re-read them on job changes
  // (counted only there: a local host's cards come from the gpu frames).
  const jobsVersion = cluster ? `${feed.table.size}:${feed.table.counts()['Running'] ?? 0}` : '';
  React.useEffect(() => {
    if (!cluster) return;
    getNodes(client)
      .then(nodes => setLoaded(l => (l ? { ...l, nodes: nodes.nodes } : l)))
      .catch((e: Error) => setError(e.message));
  }, [cluster, jobsVersion, client]);

  const indices = history.current.indices();
  return (
    <div className="jp-WorkbenchPanel-gpus" aria-label="GPUs" data-state={state}>
      {error && <ErrorBox message={error} onRetry={load} />}
      {!loaded && !error && <div className="jp-WorkbenchPanel-empty">Reading the GPUs…</div>}
      {loaded && cluster && loaded.nodes.map(node => <NodeGroup key={node.name} node={node} />)}
      {loaded && !cluster && (
        <section
          className="jp-WorkbenchPanel-node"
          aria-label={`Host ${loaded.nodes[0]?.name ?? ''}`}
        >
          <h3>Host {loaded.nodes[0]?.name ?? ''}</h3>
          {indices.length === 0 ? (
            <p className="jp-WorkbenchPanel-nogpu" data-state={state}>
              {noGpuMessage(loaded.nodes[0]?.gpu_reason || reason)}
            </p>
          ) : (
            <HostCards history={history.current} alerts={alerts} specs={loaded.specs} />
          )}
        </section>
      )}
    </div>
  );
}

function HostCards({
  history,
  alerts,
  specs
}: {
  history: GpuHistory;
  alerts: Alert[];
  specs: InstanceSpec[];
}): JSX.Element {
  const cards = history.indices().map(index => {
    const samples = history.samples(index);
    const latest = samples[samples.length - 1];
    const price = pricePerGpuHour(latest.name, specs);
    return { index, samples, latest, price, waste: idleWaste(samples, price) };
  });
  const wasted = cards.reduce((sum, c) => sum + (c.waste.cost ?? 0), 0);
  const priced = cards.some(c => c.price !== null);
  return (
    <>
      <p className="jp-WorkbenchPanel-waste" data-waste={wasted.toFixed(4)}>
        Idle-GPU waste over the last {formatSeconds(span(cards.flatMap(c => c.samples)))}:{' '}
        <strong>{priced ? formatMoney(wasted) : 'no catalogue price for these GPUs'}</strong>
      </p>
      <div className="jp-WorkbenchPanel-cards">
        {cards.map(c => (
          <GpuCard
            key={c.index}
            history={history}
            sample={c.latest}
            alerts={alertsFor(alerts, c.index)}
            price={c.price}
            waste={c.waste}
          />
        ))}
      </div>
    </>
  );
}

function span(samples: GpuSample[]): number {
  if (samples.length < 2) return 0;
  const times = samples.map(s => s.time);
  return Math.max(...times) - Math.min(...times);
}

const FIELDS: { field: GpuField; label: string }[] = [
  { field: 'utilization', label: 'util' },
  { field: 'memory', label: 'mem' },
  { field: 'temperature', label: 'temp' },
  { field: 'power', label: 'power' }
];

function figure(s: GpuSample, field: GpuField): string {
  switch (field) {
    case 'utilization':
      return s.utilization === null ? 'n/a' : `${Math.round(s.utilization)}%`;
    case 'memory':
      return s.memory_used === null
        ? 'n/a'
        : `${formatGiB(s.memory_used)} / ${formatGiB(s.memory_total)}`;
    case 'temperature':
      return s.temperature === null ? 'n/a' : `${Math.round(s.temperature)} °C`;
    case 'power':
      return s.power === null
        ? 'n/a'
        : `${Math.round(s.power)} W${s.power_limit ? ` / ${Math.round(s.power_limit)} W` : ''}`;
  }
}

function GpuCard({
  history,
  sample,
  alerts,
  price,
  waste
}: {
  history: GpuHistory;
  sample: GpuSample;
  alerts: Alert[];
  price: number | null;
  waste: { seconds: number; cost: number | null };
}): JSX.Element {
  return (
    <article
      className="jp-WorkbenchPanel-card"
      aria-label={`GPU ${sample.index} ${sample.name}`}
      data-gpu={sample.index}
      data-alerts={alerts.length}
    >
      <h4>
        GPU {sample.index} <span className="jp-WorkbenchPanel-gpuName">{sample.name}</span>
      </h4>
      {sample.error && <p className="jp-WorkbenchPanel-message">{sample.error}</p>}
      <div className="jp-WorkbenchPanel-figures">
        {FIELDS.map(({ field, label }) => (
          <div className="jp-WorkbenchPanel-figure" key={field}>
            <Gauge
              label={label}
              fraction={gaugeFraction(sample, field)}
              text={figure(sample, field)}
            />
            <Sparkline
              points={history.series(sample.index, field)}
              label={`GPU ${sample.index} ${label}`}
              yDomain={field === 'power' ? undefined : PERCENT}
            />
          </div>
        ))}
      </div>
      <p className="jp-WorkbenchPanel-idle" data-idle-seconds={Math.round(waste.seconds)}>
        Idle {formatSeconds(waste.seconds)}
        {waste.cost !== null && price !== null
          ? ` · ${formatMoney(waste.cost)} at ${formatMoney(price)}/GPU-hour`
          : ''}
      </p>
      {alerts.length > 0 && (
        <ul className="jp-WorkbenchPanel-alerts" aria-label={`Alerts on GPU ${sample.index}`}>
          {alerts.map(a => (
            <li key={`${a.kind}-${a.since}`} className={`jp-mod-${a.level}`} data-kind={a.kind}>
              {a.message}
            </li>
          ))}
        </ul>
      )}
    </article>
  );
}

function NodeGroup({ node }: { node: NodeInfo }): JSX.Element {
  return (
    <section
      className="jp-WorkbenchPanel-node"
      aria-label={`Node ${node.name}`}
      data-node={node.name}
    >
      <h3>
        Node {node.name} <span className="jp-WorkbenchPanel-meta">({node.backend})</span>
      </h3>
      {node.gpus.length === 0 ? (
        <p className="jp-WorkbenchPanel-nogpu">{noGpuMessage(node.gpu_reason)}</p>
      ) : (
        <div className="jp-WorkbenchPanel-cards">
          {node.gpus.map(g => (
            <NodeGpuCard key={g.index} gpu={g} />
          ))}
        </div>
      )}
      {node.active_jobs.length > 0 && (
        <p className="jp-WorkbenchPanel-meta">
          Active jobs: {node.active_jobs.map(j => `${j.name} (${j.status})`).join(', ')}
        </p>
      )}
    </section>
  );
}

function NodeGpuCard({ gpu }: { gpu: NodeGpu }): JSX.Element {
  const mem =
    gpu.memory_used !== null && gpu.memory_total ? gpu.memory_used / gpu.memory_total : null;
  return (
    <article
      className="jp-WorkbenchPanel-card"
      aria-label={`GPU ${gpu.index} ${gpu.name}`}
      data-gpu={gpu.index}
    >
      <h4>
        GPU {gpu.index} <span className="jp-WorkbenchPanel-gpuName">{gpu.name}</span>
      </h4>
      <Gauge
        label="util"
        fraction={gpu.utilization === null ? null : gpu.utilization / 100}
        text={gpu.utilization === null ? 'n/a' : `${Math.round(gpu.utilization)}%`}
      />
      <Gauge
        label="mem"
        fraction={mem}
        text={`${formatGiB(gpu.memory_used)} / ${formatGiB(gpu.memory_total)}`}
      />
      <Gauge
        label="temp"
        fraction={gpu.temperature === null ? null : Math.min(1, gpu.temperature / 100)}
        text={gpu.temperature === null ? 'n/a' : `${Math.round(gpu.temperature)} °C`}
      />
      <p className="jp-WorkbenchPanel-meta">
        allocated {gpu.allocated} ·{' '}
        {gpu.holders.map(h => `${h.job}/${h.rank}`).join(', ') || 'free'}
      </p>
    </article>
  );
}
