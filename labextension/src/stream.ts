/**
 * The event stream (WebSocket protocol v1, design 11): one socket, reconnected after a
 * drop with ?since=<last id seen> so the server replays exactly what was missed. When the
 * server cannot resume (a "reset" frame, a hello that is not "resumed", or a server that
 * predates protocol v1 and sends no ids) the owner re-lists with GET /jobs.
 * The socket and the timer are injected, so the unit tests drive it with fakes.
 */
import type { RawJob } from './models';

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
