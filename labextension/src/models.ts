/**
 * The panel's view of jobs: the wire records (src/wire.ts, generated from the server's
 * schema) read into one shape, the live job table the list shows, and the virtual list's
 * window arithmetic. No JupyterLab imports, so the unit tests run in plain Node.
 */
import type { JobEvent, JobRecord as WireJob, RankRecord as WireRank } from './wire';

/** Every job status, in lifecycle order (Cancelling: cancel asked, the stop under way). */
export const JOB_STATUSES = [
  'Pending',
  'Running',
  'Cancelling',
  'Succeeded',
  'Failed',
  'Cancelled'
] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];

/** Statuses a job never leaves. */
export const TERMINAL: ReadonlySet<string> = new Set(['Succeeded', 'Failed', 'Cancelled']);

/**
 * A rank as either wire shape sends it: today's (pid, gpus at the top) and design 11's
 * (node, gpu_devices, restarts; pid under details). Version-dependent fields are optional.
 */
export interface RawRank {
  rank: number;
  state: string;
  exit_code: number | null;
  started_at: number | null;
  finished_at: number | null;
  details?: { [key: string]: unknown };
  restarts?: number;
  node?: string | null;
  gpu_devices?: string | null;
  /** Today's name of gpu_devices. */
  gpus?: string | null;
  pid?: number | null;
}

/** A job record as either wire shape sends it (see RawRank). */
export interface RawJob {
  name: string;
  status: string;
  backend: string;
  image: string;
  /** The submitted spec (redacted); typed by the wire schema, not read by the list. */
  spec: object;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  elapsed: number;
  attempt: number;
  max_retries: number;
  message?: string | null;
  price_per_hour: number;
  cost: number;
  workers: number;
  details?: { [key: string]: unknown };
  ranks: RawRank[];
  events: JobEvent[];
  reason?: string | null;
  restarts?: number;
  node?: string | null;
  gpus_per_worker?: number | null;
  gpus_total?: number | null;
  /** Today's name of gpus_total. */
  gpus?: number | null;
  runtime?: string;
  job_dir?: string | null;
}

// Compile-time drift guard: the generated wire types must fit what the panel reads. When
// the server's schema changes a field the panel uses, `jlpm build` fails here.
export const acceptsWireJob: (job: WireJob) => RawJob = job => job;
export const acceptsWireRank: (rank: WireRank) => RawRank = rank => rank;

/** One rank as the job view shows it. */
export interface RankView {
  rank: number;
  state: string;
  exitCode: number | null;
  restarts: number;
  node: string | null;
  gpuDevices: string | null;
  startedAt: number | null;
  finishedAt: number | null;
}

/** One job as the list and the job view show it. */
export interface JobView {
  name: string;
  status: string;
  reason: string | null;
  message: string;
  backend: string;
  image: string;
  workers: number;
  /** GPUs in the whole job (null when the server could not say). */
  gpusTotal: number | null;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  elapsed: number;
  cost: number;
  pricePerHour: number;
  attempt: number;
  restarts: number;
  node: string | null;
  runtime: string | null;
  ranks: RankView[];
  events: JobEvent[];
}

function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function str(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

/** A wire rank in the panel's shape (either wire version). */
export function toRankView(raw: RawRank): RankView {
  return {
    rank: raw.rank,
    state: raw.state,
    exitCode: raw.exit_code,
    restarts: Math.max(0, raw.restarts ?? 0),
    node: str(raw.node) ?? str(raw.details?.['host']) ?? str(raw.details?.['node']),
    gpuDevices: raw.gpu_devices ?? raw.gpus ?? null,
    startedAt: raw.started_at,
    finishedAt: raw.finished_at
  };
}

/** A wire job in the panel's shape (either wire version). */
export function toJobView(raw: RawJob): JobView {
  const gpusPerWorker = num(raw.gpus_per_worker);
  const gpusTotal =
    num(raw.gpus_total) ??
    num(raw.gpus) ??
    (gpusPerWorker === null ? null : gpusPerWorker * raw.workers);
  const ranks = (raw.ranks ?? []).map(toRankView).sort((a, b) => a.rank - b.rank);
  return {
    name: raw.name,
    status: raw.status,
    reason: str(raw.reason),
    message: raw.message ?? '',
    backend: raw.backend,
    image: raw.image,
    workers: raw.workers,
    gpusTotal,
    createdAt: raw.created_at,
    startedAt: raw.started_at,
    finishedAt: raw.finished_at,
    elapsed: num(raw.elapsed) ?? 0,
    cost: num(raw.cost) ?? 0,
    pricePerHour: num(raw.price_per_hour) ?? 0,
    attempt: raw.attempt,
    restarts: Math.max(0, raw.restarts ?? raw.attempt - 1),
    node: str(raw.node) ?? ranks.find(r => r.rank === 0)?.node ?? null,
    runtime: str(raw.runtime) ?? str(raw.details?.['runtime']),
    ranks,
    events: raw.events ?? []
  };
}

/**
 * Seconds the job has run as of `now` (Unix seconds): the server stops sending a running
 * job's elapsed/cost every second (they are volatile), so the panel advances them itself.
 */
export function elapsedAt(job: JobView, now: number): number {
  if (job.startedAt === null || TERMINAL.has(job.status) || job.finishedAt !== null) {
    return job.elapsed;
  }
  return Math.max(job.elapsed, now - job.startedAt);
}

/** Cost so far as of `now`: price per worker-hour x hours x workers, never below the server's. */
export function costAt(job: JobView, now: number): number {
  const computed = (job.pricePerHour * elapsedAt(job, now) * job.workers) / 3600;
  return TERMINAL.has(job.status) ? job.cost : Math.max(job.cost, computed);
}

/** "42s", "5m", "3h", "2d": how long ago `then` was. */
export function formatAge(then: number, now: number): string {
  const s = Math.max(0, Math.floor(now - then));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/** "$0.00", "$12.35"; "-" for no price. */
export function formatCost(cost: number): string {
  return Number.isFinite(cost) ? `$${cost.toFixed(2)}` : '-';
}

/** "2", "0.5", "-" (unknown). */
export function formatGpus(gpus: number | null): string {
  if (gpus === null) return '-';
  return Number.isInteger(gpus) ? String(gpus) : String(Math.round(gpus * 100) / 100);
}

/** What the list shows: statuses to keep (empty: all) and a search text. */
export interface JobFilter {
  statuses: ReadonlySet<string>;
  search: string;
}

/** Whether `job` passes `filter` (search: every word must be in name, status, backend or image). */
export function matches(job: JobView, filter: JobFilter): boolean {
  if (filter.statuses.size > 0 && !filter.statuses.has(job.status)) return false;
  const words = filter.search.toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) return true;
  const hay = `${job.name} ${job.status} ${job.backend} ${job.image}`.toLowerCase();
  return words.every(w => hay.includes(w));
}

/**
 * Every job the panel knows, kept current by the event stream; listeners hear each change.
 * Sorted views are cached until the next change, so scrolling 1,000 rows sorts nothing.
 */
export class JobTable {
  private jobs = new Map<string, JobView>();
  private listeners = new Set<() => void>();
  private sorted: JobView[] | null = null;

  /** How many jobs it holds. */
  get size(): number {
    return this.jobs.size;
  }

  /** Hear every change; returns the function that stops listening. */
  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** One job, or undefined. */
  get(name: string): JobView | undefined {
    return this.jobs.get(name);
  }

  /** Add or replace jobs (a page of the list, or one streamed change). */
  upsert(raws: RawJob[]): void {
    for (const raw of raws) this.jobs.set(raw.name, toJobView(raw));
    if (raws.length) this.changed();
  }

  /** Forget a deleted job. */
  remove(name: string): void {
    if (this.jobs.delete(name)) this.changed();
  }

  /** Start over from a fresh list (after a reset). */
  replaceAll(raws: RawJob[]): void {
    this.jobs = new Map(raws.map(raw => [raw.name, toJobView(raw)]));
    this.changed();
  }

  /** Jobs passing `filter`, newest first. */
  view(filter: JobFilter): JobView[] {
    if (this.sorted === null) {
      this.sorted = [...this.jobs.values()].sort(
        (a, b) => b.createdAt - a.createdAt || a.name.localeCompare(b.name)
      );
    }
    if (filter.statuses.size === 0 && !filter.search.trim()) return this.sorted;
    return this.sorted.filter(job => matches(job, filter));
  }

  /** How many jobs are in each status. */
  counts(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const job of this.jobs.values()) out[job.status] = (out[job.status] ?? 0) + 1;
    return out;
  }

  private changed(): void {
    this.sorted = null;
    for (const listener of [...this.listeners]) listener();
  }
}

/** Rows [start, end) a virtual list renders for a scroll position, with `overscan` spare rows. */
export function visibleRange(
  scrollTop: number,
  viewportHeight: number,
  rowHeight: number,
  count: number,
  overscan = 5
): { start: number; end: number } {
  if (count <= 0 || rowHeight <= 0) return { start: 0, end: 0 };
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const shown = Math.ceil(Math.max(0, viewportHeight) / rowHeight) + 1;
  const start = Math.max(0, Math.min(first, count - 1) - overscan);
  const end = Math.min(count, first + shown + overscan);
  return { start, end };
}
