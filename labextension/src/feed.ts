/**
 * The live job table: a full list (GET /jobs, a page at a time) whenever the stream says
 * re-list, then the stream's changes. Changes that arrive while a list is in flight are
 * held and applied on top of it, so a slow list never rolls a job back.
 */
import { JobTable, type RawJob } from './models';
import type { WorkbenchClient } from './request';
import { EventStream, type GpuFrame, type HelloFrame, type SocketLike, type StreamState } from './stream';

type Change = { kind: 'job'; job: RawJob } | { kind: 'deleted'; name: string };

/** Owns the table, the stream and the listing; the panel renders from `table`. */
export class JobFeed {
  readonly table = new JobTable();
  /** The last listing error (null when the list is current). */
  error: string | null = null;
  /** The stream's state and its detail (for the status line). */
  streamState: StreamState = 'stopped';
  streamDetail = '';
  hello: HelloFrame | null = null;
  /** The server's answer to the last frame it could not serve (a bad subscription). */
  frameError: string | null = null;
  gpu: GpuFrame | null = null;
  /** Jobs in the first page of a list (the Settings Editor's pageSize). */
  firstPage = 100;
  /** Milliseconds from start() to the first rows in the table (null until then). */
  firstRowsMs: number | null = null;
  readonly stream: EventStream;

  private listing: Change[] | null = null;
  private listGeneration = 0;
  private startedAt = 0;
  private listeners = new Set<() => void>();

  constructor(
    private readonly client: WorkbenchClient,
    urlFor: (since: number | null) => string,
    open: (url: string) => SocketLike,
    backoff?: number[],
    private readonly now: () => number = () => Date.now()
  ) {
    this.stream = new EventStream(
      urlFor,
      open,
      {
        relist: () => void this.relist(),
        job: job => this.apply({ kind: 'job', job }),
        deleted: name => this.apply({ kind: 'deleted', name }),
        hello: frame => {
          this.hello = frame;
          this.notify();
        },
        gpu: frame => {
          this.gpu = frame;
          this.notify();
        },
        error: frame => {
          this.frameError = `${frame.field}: ${frame.error}`;
          this.notify();
        },
        state: (state, detail) => {
          this.streamState = state;
          this.streamDetail = detail;
          this.notify();
        }
      },
      { backoff }
    );
  }

  /** Hear status changes (errors, stream state); the table has its own subscribe. */
  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Connect; the hello frame triggers the first list. */
  start(): void {
    this.startedAt = this.now();
    this.stream.start();
  }

  /** Close the stream and drop pending lists. */
  stop(): void {
    this.listGeneration += 1;
    this.listing = null;
    this.stream.stop();
  }

  /** List every job again (also the "retry" after an error). */
  async relist(): Promise<void> {
    const generation = ++this.listGeneration;
    this.listing = [];
    const collected: RawJob[] = [];
    try {
      await this.client.listAll(page => {
        if (generation !== this.listGeneration) return;
        collected.push(...page);
        if (this.firstRowsMs === null && collected.length > 0) {
          // Show the first page at once; later pages and held changes follow.
          this.table.upsert(page);
          this.firstRowsMs = this.now() - this.startedAt;
        }
      }, this.firstPage);
      if (generation !== this.listGeneration) return;
      const held = this.listing ?? [];
      this.listing = null;
      this.table.replaceAll(collected);
      for (const change of held) this.applyNow(change);
      this.error = null;
      if (this.firstRowsMs === null) this.firstRowsMs = this.now() - this.startedAt;
    } catch (error) {
      if (generation !== this.listGeneration) return;
      const held = this.listing ?? [];
      this.listing = null;
      for (const change of held) this.applyNow(change);
      this.error = error instanceof Error ? error.message : String(error);
    }
    this.notify();
  }

  private apply(change: Change): void {
    if (this.listing !== null) this.listing.push(change);
    else this.applyNow(change);
  }

  private applyNow(change: Change): void {
    if (change.kind === 'job') this.table.upsert([change.job]);
    else this.table.remove(change.name);
  }

  private notify(): void {
    for (const listener of [...this.listeners]) listener();
  }
}
