/**
 * The Jobs tab: a filtered, searchable virtual list of every job (live from the event
 * stream) and, on click, the job's view (ranks, logs, events, cancel, re-run).
 */
import * as React from 'react';

import type { JobFeed } from './feed';
import {
  JOB_STATUSES,
  TERMINAL,
  costAt,
  formatAge,
  formatCost,
  formatGpus,
  visibleRange,
  type JobView
} from './models';
import { JobExtras, type OpenInNotebook } from './jobview';
import type { WorkbenchClient } from './request';
import { SettingsContext } from './settings';

// Two lines a row (name and status; backend, workers, GPUs, age, cost), so a default-width
// sidebar shows every column.
const ROW_HEIGHT = 44;
/** Lines the log box keeps (older ones are dropped), so a fast log never slows the page. */
export const LOG_LINES_KEPT = 5000;

/** Re-render on every change `subscribe` reports; returns a counter that moves each time. */
function useSubscription(subscribe: (fn: () => void) => () => void): number {
  const [version, setVersion] = React.useState(0);
  React.useEffect(() => subscribe(() => setVersion(v => v + 1)), [subscribe]);
  return version;
}

/** A clock that ticks every `ms` (ages and running costs move on without server traffic). */
function useNow(ms: number): number {
  const [now, setNow] = React.useState(() => Date.now() / 1000);
  React.useEffect(() => {
    const handle = setInterval(() => setNow(Date.now() / 1000), ms);
    return () => clearInterval(handle);
  }, [ms]);
  return now;
}

function StatusBadge({ status }: { status: string }): JSX.Element {
  return (
    <span className={`jp-WorkbenchPanel-status jp-mod-${status.toLowerCase()}`} data-status={status}>
      {status}
    </span>
  );
}

export function ErrorBox({ message, onRetry }: { message: string; onRetry?: () => void }): JSX.Element {
  return (
    <div className="jp-WorkbenchPanel-error" role="alert">
      <span>{message}</span>
      {onRetry && (
        <button className="jp-mod-styled" onClick={onRetry} aria-label="Retry">
          Retry
        </button>
      )}
    </div>
  );
}

/** Shows what broke instead of a blank panel when rendering throws (a record the panel
 * cannot read, say); "Try again" re-renders. */
export class PanelErrorBoundary extends React.Component<
  { children: React.ReactNode },
  { error: string | null }
> {
  state = { error: null as string | null };

  static getDerivedStateFromError(error: unknown): { error: string } {
    return { error: error instanceof Error ? error.message : String(error) };
  }

  render(): React.ReactNode {
    if (this.state.error !== null) {
      return (
        <ErrorBox
          message={`The workbench panel failed to draw: ${this.state.error}`}
          onRetry={() => this.setState({ error: null })}
        />
      );
    }
    return this.props.children;
  }
}

/** The whole Jobs tab. */
export function JobsTab({
  feed,
  client,
  onOpen,
  openInNotebook,
  initial = null
}: {
  feed: JobFeed;
  client: WorkbenchClient;
  onOpen?: (name: string | null) => void;
  openInNotebook?: OpenInNotebook;
  /** The job whose view opens first (a job just submitted from the Submit tab). */
  initial?: string | null;
}): JSX.Element {
  const [selected, setSelected] = React.useState<string | null>(initial);
  const open = (name: string | null): void => {
    setSelected(name);
    onOpen?.(name);
  };
  return selected === null ? (
    <JobList feed={feed} onOpen={open} />
  ) : (
    <JobDetail
      feed={feed}
      client={client}
      name={selected}
      onBack={() => open(null)}
      onOpen={open}
      openInNotebook={openInNotebook}
    />
  );
}

function StreamLine({ feed }: { feed: JobFeed }): JSX.Element {
  const live = feed.streamState === 'live';
  const text = live
    ? 'Live'
    : feed.streamState === 'failed'
      ? `Not live: ${feed.streamDetail}`
      : feed.streamState === 'connecting'
        ? 'Connecting…'
        : `Disconnected: ${feed.streamDetail || 'reconnecting'}`;
  return (
    <div
      className={`jp-WorkbenchPanel-stream jp-mod-${feed.streamState}`}
      role="status"
      aria-live="polite"
      data-state={feed.streamState}
      data-protocol={feed.hello?.protocol ?? ''}
      data-resumed={feed.hello?.resumed ? 'true' : 'false'}
    >
      {text}
      {feed.streamState === 'failed' && (
        <button className="jp-mod-styled" onClick={() => feed.stream.reconnect()}>
          Reconnect
        </button>
      )}
    </div>
  );
}

function JobList({ feed, onOpen }: { feed: JobFeed; onOpen: (name: string) => void }): JSX.Element {
  useSubscription(React.useCallback(fn => feed.table.subscribe(fn), [feed]));
  useSubscription(React.useCallback(fn => feed.subscribe(fn), [feed]));
  const now = useNow(5000);
  const [status, setStatus] = React.useState('');
  const [search, setSearch] = React.useState('');
  const [scrollTop, setScrollTop] = React.useState(0);
  const [height, setHeight] = React.useState(400);
  const viewport = React.useRef<HTMLDivElement>(null);

  React.useEffect(() => {
    const node = viewport.current;
    if (!node) return;
    const observer = new ResizeObserver(() => setHeight(node.clientHeight));
    observer.observe(node);
    setHeight(node.clientHeight);
    return () => observer.disconnect();
  }, []);

  const jobs = feed.table.view({ statuses: new Set(status ? [status] : []), search });
  const { start, end } = visibleRange(scrollTop, height, ROW_HEIGHT, jobs.length);
  const counts = feed.table.counts();

  const openKey = (event: React.KeyboardEvent, name: string): void => {
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      onOpen(name);
    }
  };

  return (
    <div className="jp-WorkbenchPanel-jobs">
      <StreamLine feed={feed} />
      <div className="jp-WorkbenchPanel-toolbar">
        <select
          aria-label="Filter jobs by status"
          value={status}
          onChange={e => setStatus(e.target.value)}
          className="jp-mod-styled"
        >
          <option value="">All statuses ({feed.table.size})</option>
          {JOB_STATUSES.map(s => (
            <option key={s} value={s}>
              {s} ({counts[s] ?? 0})
            </option>
          ))}
        </select>
        <input
          type="search"
          aria-label="Search jobs"
          placeholder="Search name, backend, image"
          value={search}
          onChange={e => setSearch(e.target.value)}
          className="jp-mod-styled"
        />
      </div>
      {feed.error && <ErrorBox message={feed.error} onRetry={() => void feed.relist()} />}
      <div
        className="jp-WorkbenchPanel-viewport"
        ref={viewport}
        onScroll={e => setScrollTop((e.target as HTMLDivElement).scrollTop)}
        role="list"
        aria-label={`Jobs: ${jobs.length} shown`}
        data-count={jobs.length}
      >
        {jobs.length === 0 && !feed.error && (
          <div className="jp-WorkbenchPanel-empty">
            {feed.firstRowsMs === null
              ? 'Loading jobs…'
              : feed.table.size === 0
                ? 'No jobs yet. Submit one with %gpu_train, workbench submit or workbench.submit().'
                : 'No job matches the filter.'}
          </div>
        )}
        <div style={{ height: jobs.length * ROW_HEIGHT, position: 'relative' }}>
          {jobs.slice(start, end).map((job, i) => (
            <div
              key={job.name}
              className="jp-WorkbenchPanel-row"
              role="listitem"
              tabIndex={0}
              aria-setsize={jobs.length}
              aria-posinset={start + i + 1}
              aria-label={`${job.name}, ${job.status}, ${job.backend}, ${job.workers} workers, ${formatGpus(job.gpusTotal)} GPUs`}
              data-job={job.name}
              style={{ top: (start + i) * ROW_HEIGHT, height: ROW_HEIGHT }}
              onClick={() => onOpen(job.name)}
              onKeyDown={e => openKey(e, job.name)}
              title={job.message || job.name}
            >
              <span className="jp-WorkbenchPanel-name" data-col="name">
                {job.name}
              </span>
              <StatusBadge status={job.status} />
              <span className="jp-WorkbenchPanel-meta">
                <span data-col="backend" title="backend">
                  {job.backend}
                </span>
                <span data-col="workers" title="workers">
                  {job.workers}w
                </span>
                <span data-col="gpus" title="GPUs in the job">
                  {formatGpus(job.gpusTotal)} GPU
                </span>
                <span data-col="age" title="age">
                  {formatAge(job.createdAt, now)}
                </span>
                <span data-col="cost" title="cost so far">
                  {formatCost(costAt(job, now))}
                </span>
              </span>
            </div>
          ))}
        </div>
      </div>
    </div>
  );
}

function JobDetail({
  feed,
  client,
  name,
  onBack,
  onOpen,
  openInNotebook
}: {
  feed: JobFeed;
  client: WorkbenchClient;
  name: string;
  onBack: () => void;
  onOpen: (name: string) => void;
  openInNotebook?: OpenInNotebook;
}): JSX.Element {
  const version = useSubscription(React.useCallback(fn => feed.table.subscribe(fn), [feed]));
  const now = useNow(5000);
  const [error, setError] = React.useState<string | null>(null);
  const [busy, setBusy] = React.useState(false);
  const loading = React.useRef(false);
  const inTable = feed.table.get(name);
  // The last record seen stays on screen when the job leaves the table (deleted).
  const lastSeen = React.useRef<JobView | null>(null);
  if (inTable) lastSeen.current = inTable;
  const job = inTable ?? lastSeen.current;

  const load = React.useCallback(() => {
    if (loading.current) return;
    loading.current = true;
    setError(null);
    client
      .getJob(name)
      .then(raw => feed.table.upsert([raw]))
      .catch((e: Error) => setError(e.message))
      .finally(() => {
        loading.current = false;
      });
  }, [client, feed, name]);

  // Not in the table (opened before the list arrived, or deleted since): ask the server,
  // whose answer (the record, or e.g. "no job named ...") replaces any "Loading".
  React.useEffect(() => {
    if (!feed.table.get(name) && error === null) load();
  }, [name, version]);

  const act = async (what: 'cancel' | 'rerun'): Promise<void> => {
    setBusy(true);
    setError(null);
    try {
      const raw = what === 'cancel' ? await client.cancel(name) : await client.rerun(name);
      feed.table.upsert([raw]);
      if (what === 'rerun') onOpen(raw.name);
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div className="jp-WorkbenchPanel-detail" aria-label={`Job ${name}`} data-job={name}>
      <div className="jp-WorkbenchPanel-toolbar">
        <button className="jp-mod-styled" onClick={onBack} aria-label="Back to the job list">
          ← Jobs
        </button>
        <button
          className="jp-mod-styled jp-mod-warn"
          disabled={busy || !job || TERMINAL.has(job.status) || job.status === 'Cancelling'}
          onClick={() => void act('cancel')}
          aria-label={`Cancel ${name}`}
        >
          Cancel
        </button>
        <button
          className="jp-mod-styled"
          disabled={busy || !job}
          onClick={() => void act('rerun')}
          aria-label={`Re-run ${name}`}
        >
          Re-run
        </button>
      </div>
      {error && <ErrorBox message={error} onRetry={job ? undefined : load} />}
      {!job && !error && <div className="jp-WorkbenchPanel-empty">Loading {name}…</div>}
      {job && (
        <>
          <h3 className="jp-WorkbenchPanel-title">
            {job.name} <StatusBadge status={job.status} />
          </h3>
          <p className="jp-WorkbenchPanel-summary">
            {job.backend}
            {job.runtime ? ` (${job.runtime})` : ''} · {job.image} · {job.workers} worker
            {job.workers === 1 ? '' : 's'} · {formatGpus(job.gpusTotal)} GPU · age{' '}
            {formatAge(job.createdAt, now)} · {formatCost(costAt(job, now))}
            {job.restarts > 0 ? ` · ${job.restarts} restart(s)` : ''}
          </p>
          {(job.message || job.reason) && (
            <p className="jp-WorkbenchPanel-message">
              {job.reason ? <strong>{job.reason}: </strong> : null}
              {job.message}
            </p>
          )}
          <RankTable job={job} />
          <JobExtras client={client} feed={feed} job={job} openInNotebook={openInNotebook} />
          <LogView client={client} job={job} />
          <EventList job={job} />
        </>
      )}
    </div>
  );
}

function RankTable({ job }: { job: JobView }): JSX.Element {
  return (
    <table className="jp-WorkbenchPanel-ranks" aria-label="Ranks">
      <thead>
        <tr>
          <th scope="col">Rank</th>
          <th scope="col">State</th>
          <th scope="col">Exit</th>
          <th scope="col">Node</th>
          <th scope="col">GPUs</th>
          <th scope="col">Restarts</th>
        </tr>
      </thead>
      <tbody>
        {job.ranks.map(r => (
          <tr key={r.rank} data-rank={r.rank}>
            <td>{r.rank}</td>
            <td>
              <StatusBadge status={r.state} />
            </td>
            <td>{r.exitCode ?? ''}</td>
            <td>{r.node ?? ''}</td>
            <td>{r.gpuDevices ?? ''}</td>
            <td>{r.restarts}</td>
          </tr>
        ))}
        {job.ranks.length === 0 && (
          <tr>
            <td colSpan={6}>No ranks yet.</td>
          </tr>
        )}
      </tbody>
    </table>
  );
}

/** One rank's log, or every rank's, followed while the job runs. */
function LogView({ client, job }: { client: WorkbenchClient; job: JobView }): JSX.Element {
  const [rank, setRank] = React.useState<number | 'all'>(0);
  const [error, setError] = React.useState<string | null>(null);
  const [ended, setEnded] = React.useState(false);
  const [silent, setSilent] = React.useState(false); // the stream ended with no line
  const pre = React.useRef<HTMLPreElement>(null);
  const terminal = TERMINAL.has(job.status);
  // Follow by default as the Settings Editor says; the view's own box switches it.
  const [followWanted, setFollowWanted] = React.useState(React.useContext(SettingsContext).followLogs);
  // Re-open the stream once when the job ends, so the tail a follow may have missed shows.
  const follow = !terminal && followWanted;

  React.useEffect(() => {
    const node = pre.current;
    if (!node) return;
    node.textContent = '';
    setError(null);
    setEnded(false);
    setSilent(false);
    const abort = new AbortController();
    // New lines since the last frame; the box holds one text node per frame's batch, so a
    // frame appends one node and drops whole old ones instead of rewriting 5,000 lines.
    let pending: string[] = [];
    const batches: number[] = [];
    let kept = 0;
    let frame = 0;
    const flush = (): void => {
      frame = 0;
      if (pending.length === 0) return;
      const stick = node.scrollTop + node.clientHeight >= node.scrollHeight - 4;
      const batch = pending.length > LOG_LINES_KEPT ? pending.slice(-LOG_LINES_KEPT) : pending;
      pending = [];
      node.appendChild(document.createTextNode(batch.join('\n') + '\n'));
      batches.push(batch.length);
      kept += batch.length;
      while (kept > LOG_LINES_KEPT && node.firstChild && batches.length > 1) {
        node.removeChild(node.firstChild);
        kept -= batches.shift() ?? 0;
      }
      if (stick) node.scrollTop = node.scrollHeight;
    };
    client
      .logs(
        job.name,
        rank,
        follow,
        batch => {
          for (const line of batch) pending.push(line);
          if (!frame) frame = requestAnimationFrame(flush);
        },
        abort.signal
      )
      .then(() => {
        flush();
        setEnded(true);
        setSilent(kept === 0);
      })
      .catch((e: Error) => {
        if (!abort.signal.aborted && e.name !== 'AbortError') setError(e.message);
      });
    return () => {
      abort.abort();
      if (frame) cancelAnimationFrame(frame);
    };
  }, [client, job.name, rank, follow, terminal]);

  const ranks = job.ranks.length ? job.ranks.map(r => r.rank) : [0];
  return (
    <section className="jp-WorkbenchPanel-logs" aria-label="Logs">
      <div className="jp-WorkbenchPanel-toolbar">
        <label>
          Log of{' '}
          <select
            aria-label="Which rank's log"
            className="jp-mod-styled"
            value={String(rank)}
            onChange={e => setRank(e.target.value === 'all' ? 'all' : Number(e.target.value))}
          >
            {ranks.map(r => (
              <option key={r} value={String(r)}>
                rank {r}
              </option>
            ))}
            <option value="all">all ranks</option>
          </select>
        </label>
        {!terminal && (
          <label>
            <input
              type="checkbox"
              aria-label="Follow the log"
              checked={followWanted}
              onChange={e => setFollowWanted(e.target.checked)}
            />{' '}
            Follow
          </label>
        )}
        <span className="jp-WorkbenchPanel-follow" data-following={follow && !ended}>
          {follow && !ended ? 'following' : !terminal && !followWanted ? 'not following' : 'complete'}
        </span>
      </div>
      {error && <ErrorBox message={error} />}
      {silent && !error && (
        <div className="jp-WorkbenchPanel-empty" data-log-empty>
          {rank === 'all' ? 'No rank has' : `Rank ${rank} has`} written no output
          {terminal ? '.' : ' yet.'}
        </div>
      )}
      <pre
        ref={pre}
        hidden={silent && !error}
        className="jp-WorkbenchPanel-log"
        tabIndex={0}
        aria-label="Log text"
        data-rank={rank}
      />
    </section>
  );
}

function EventList({ job }: { job: JobView }): JSX.Element {
  return (
    <section aria-label="Events">
      <h4>Events</h4>
      <ul className="jp-WorkbenchPanel-events">
        {job.events.map((ev, i) => (
          <li key={i} className={`jp-mod-${ev.level}`}>
            <time>{new Date(ev.time * 1000).toLocaleTimeString()}</time> <strong>{ev.reason}</strong>{' '}
            {ev.message}
          </li>
        ))}
      </ul>
    </section>
  );
}
