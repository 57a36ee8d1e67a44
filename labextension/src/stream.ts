/**
 * The event stream (WebSocket protocol v1, design 11): one socket, reconnected after a
 * drop with ?since=<last id seen> so the server replays exactly what was missed. When the
 * server cannot resume (a "reset" frame, a hello that is not "resumed", or a server that
 * predates protocol v1 and sends no ids) the owner re-lists with GET /jobs.
 * Live metrics: `subscribeMetrics(name, since, listener)` asks the server to push one job's
 * metrics frames; the stream keeps each subscription's cursor and, after a reconnect,
 * subscribes again from it, so a chart gets every record once across drops.
 * The socket and the timer are injected, so the unit tests drive it with fakes.
 */
import type { RawJob } from './models';
import type { ClientSubscribe, ClientUnsubscribe, EventError, EventMetrics } from './wire';

/** The protocol version this panel speaks. */
export const PROTOCOL = 1;

/** Close code the server uses for an unsupported protocol: reconnecting cannot help. */
export const UNSUPPORTED_PROTOCOL = 4400;

/** What the stream needs of a WebSocket (the browser's WebSocket fits). */
export interface SocketLike {
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  close(code?: number, reason?: string): void;
  /** Write a text frame (the browser's WebSocket has it; listen-only fakes may not). */
  send?(data: string): void;
}

/** The hello frame (first frame of every connection). */
export interface HelloFrame {
  type: 'hello';
  protocol?: number;
  last_id?: number;
  resumed?: boolean;
  jobs?: Record<string, number>;
  gpu?: { state: string; reason: string | null };
}

/** A gpu frame (not replayed, no id). */
export interface GpuFrame {
  type: 'gpu';
  state: string;
  reason: string | null;
  gpus: unknown[];
  alerts: unknown[];
}

/** The connection's state, for the panel's status line. */
export type StreamState = 'connecting' | 'live' | 'reconnecting' | 'failed' | 'stopped';

/** What the owner does with the frames. */
export interface StreamHandlers {
  /** Re-list everything (first connect, or the missed changes cannot be replayed). */
  relist(): void;
  job(job: RawJob): void;
  deleted(name: string): void;
  hello?(frame: HelloFrame): void;
  gpu?(frame: GpuFrame): void;
  state?(state: StreamState, detail: string): void;
  /** The server could not serve a frame this panel sent (names the field). */
  error?(frame: EventError): void;
}

/** One job's live metrics: the listener, and where the last frame it got ended. */
interface MetricsSubscription {
  cursor: string;
  listener: (frame: EventMetrics) => void;
}

/** Options, with defaults that suit a browser. */
export interface StreamOptions {
  /** Delays (ms) before reconnect attempts 1, 2, ...; the last repeats. */
  backoff?: number[];
  setTimer?: (fn: () => void, ms: number) => unknown;
  clearTimer?: (handle: unknown) => void;
}

const DEFAULT_BACKOFF = [250, 500, 1000, 2000, 5000, 10000];

/** The one event-stream connection of a panel, with reconnect and resume. */
export class EventStream {
  /** The id of the newest change applied (null: none yet, the next connect re-lists). */
  lastId: number | null = null;
  /** How many times the socket has (re)connected. */
  connections = 0;
  state: StreamState = 'stopped';

  private socket: SocketLike | null = null;
  private readonly metrics = new Map<string, MetricsSubscription>();
  private timer: unknown = null;
  private attempt = 0;
  private stopped = true;
  private readonly backoff: number[];
  private readonly setTimer: (fn: () => void, ms: number) => unknown;
  private readonly clearTimer: (handle: unknown) => void;

  constructor(
    private readonly urlFor: (since: number | null) => string,
    private readonly open: (url: string) => SocketLike,
    private readonly handlers: StreamHandlers,
    options: StreamOptions = {}
  ) {
    this.backoff = options.backoff?.length ? options.backoff : DEFAULT_BACKOFF;
    this.setTimer = options.setTimer ?? ((fn, ms) => setTimeout(fn, ms));
    this.clearTimer = options.clearTimer ?? (h => clearTimeout(h as ReturnType<typeof setTimeout>));
  }

  /** Connect (once; later drops reconnect on their own). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.connect();
  }

  /** Close for good. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== null) this.clearTimer(this.timer);
    this.timer = null;
    const socket = this.socket;
    this.socket = null;
    if (socket) {
      socket.onclose = socket.onmessage = socket.onerror = socket.onopen = null;
      socket.close(1000, 'panel closed');
    }
    this.setState('stopped', '');
  }

  /** Drop the current socket and connect again now (the "reconnect" button). */
  reconnect(): void {
    this.stop();
    this.attempt = 0;
    this.start();
  }

  /**
   * Follow job `name`'s metrics from cursor `since` ("" = its first record): `listener`
   * gets each metrics frame. Sent now when live, else on the next hello; after a drop the
   * stream subscribes again from the cursor of the last frame delivered. Returns the
   * unsubscribe (which tells the server, when connected).
   */
  subscribeMetrics(name: string, since: string, listener: (frame: EventMetrics) => void): () => void {
    const sub: MetricsSubscription = { cursor: since, listener };
    this.metrics.set(name, sub);
    this.write({ type: 'subscribe', metrics: name, since });
    return () => {
      if (this.metrics.get(name) !== sub) return; // replaced by a newer subscription
      this.metrics.delete(name);
      this.write({ type: 'unsubscribe', metrics: name });
    };
  }

  /** The cursor of job `name`'s subscription (null: not subscribed). */
  metricsCursor(name: string): string | null {
    return this.metrics.get(name)?.cursor ?? null;
  }

  private write(frame: ClientSubscribe | ClientUnsubscribe): void {
    // Before the hello (or between connections) there is nothing to write to: the next
    // hello sends every subscription with its cursor.
    if (this.state !== 'live' || !this.socket?.send) return;
    try {
      this.socket.send(JSON.stringify(frame));
    } catch {
      // The socket is closing: onclose reconnects, and the hello re-subscribes.
    }
  }

  private connect(): void {
    this.timer = null;
    this.setState(this.connections === 0 ? 'connecting' : 'reconnecting', '');
    let socket: SocketLike;
    try {
      socket = this.open(this.urlFor(this.lastId));
    } catch (error) {
      this.scheduleReconnect(error instanceof Error ? error.message : String(error));
      return;
    }
    this.socket = socket;
    this.connections += 1;
    socket.onmessage = ev => this.onFrame(ev.data);
    socket.onclose = ev => {
      if (this.socket !== socket) return;
      this.socket = null;
      if (ev.code === UNSUPPORTED_PROTOCOL) {
        this.stopped = true;
        this.setState('failed', `the server refused protocol ${PROTOCOL}: ${ev.reason}`);
        return;
      }
      this.scheduleReconnect(ev.reason || `connection closed (code ${ev.code})`);
    };
    socket.onerror = () => undefined; // onclose follows and reconnects
  }

  private scheduleReconnect(why: string): void {
    if (this.stopped) return;
    const delay = this.backoff[Math.min(this.attempt, this.backoff.length - 1)];
    this.attempt += 1;
    this.setState('reconnecting', `${why}; reconnecting in ${Math.round(delay / 100) / 10}s`);
    this.timer = this.setTimer(() => this.connect(), delay);
  }

  private onFrame(data: unknown): void {
    if (typeof data !== 'string') return;
    let frame: { type?: unknown; id?: unknown; [key: string]: unknown };
    try {
      frame = JSON.parse(data);
    } catch {
      return; // not ours to crash on
    }
    const id = typeof frame.id === 'number' ? frame.id : null;
    switch (frame.type) {
      case 'hello': {
        const hello = frame as unknown as HelloFrame;
        this.attempt = 0;
        this.setState('live', '');
        this.handlers.hello?.(hello);
        for (const [name, sub] of this.metrics) {
          this.write({ type: 'subscribe', metrics: name, since: sub.cursor });
        }
        if (!(hello.resumed === true && this.lastId !== null)) {
          // Nothing to resume from, or the server could not: start from its last id and a
          // fresh list. Changes after last_id arrive on this socket after the hello.
          this.lastId = typeof hello.last_id === 'number' ? hello.last_id : null;
          this.handlers.relist();
        }
        return;
      }
      case 'reset':
        this.lastId = typeof frame['last_id'] === 'number' ? (frame['last_id'] as number) : null;
        this.handlers.relist();
        return;
      case 'job':
        if (id !== null && this.lastId !== null && id <= this.lastId) return; // seen it
        if (id !== null) this.lastId = id;
        if (frame['job'] && typeof frame['job'] === 'object') {
          this.handlers.job(frame['job'] as RawJob);
        }
        return;
      case 'job_deleted':
        if (id !== null && this.lastId !== null && id <= this.lastId) return;
        if (id !== null) this.lastId = id;
        if (typeof frame['name'] === 'string') this.handlers.deleted(frame['name']);
        return;
      case 'gpu':
        this.handlers.gpu?.(frame as unknown as GpuFrame);
        return;
      case 'metrics': {
        const metrics = frame as unknown as EventMetrics;
        const sub = this.metrics.get(metrics.name);
        if (!sub || typeof metrics.cursor !== 'string') return; // unsubscribed meanwhile
        sub.cursor = metrics.cursor;
        sub.listener(metrics);
        return;
      }
      case 'error':
        this.handlers.error?.(frame as unknown as EventError);
        return;
      default:
        return; // a newer server's frame: ignore what we do not know
    }
  }

  private setState(state: StreamState, detail: string): void {
    this.state = state;
    this.handlers.state?.(state, detail);
  }
}

/** The event-stream URL: ws(s) form of the base URL, protocol 1, since the last id seen. */
export function eventsUrl(wsBase: string, since: number | null, token?: string): string {
  const base = wsBase.endsWith('/') ? wsBase : `${wsBase}/`;
  const params = new URLSearchParams({ protocol: String(PROTOCOL) });
  if (since !== null) params.set('since', String(since));
  if (token) params.set('token', token);
  return `${base}workbench/api/events?${params.toString()}`;
}
