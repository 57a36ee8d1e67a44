/**
 * The request layer: every call to the workbench REST API, with one translation of
 * failures into the plain sentence the panel shows. The transport is injected (JupyterLab's
 * ServerConnection.makeRequest in the app, a fake in the unit tests).
 */
import type { RawJob } from './models';

/** fetch's shape: JupyterLab's ServerConnection.makeRequest bound to its settings. */
export type Transport = (url: string, init: RequestInit) => Promise<Response>;

/** A failed call, with the sentence to show and what the server said about it. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly field: string | null = null,
    readonly fix: string | null = null,
    readonly hint: string | null = null
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

interface ErrorBody {
  error?: unknown;
  message?: unknown;
  field?: unknown;
  fix?: unknown;
  hint?: unknown;
  reason?: unknown;
}

function text(value: unknown): string | null {
  return typeof value === 'string' && value.trim() !== '' ? value.trim() : null;
}

const STATUS_WORDS: Record<number, string> = {
  401: 'not logged in to the Jupyter server (reload the page)',
  403: 'not allowed to use workbench on this server',
  404: 'not found',
  500: 'the server failed',
  502: 'the server is not reachable (bad gateway)',
  503: 'the workbench backend is not available',
  504: 'the server did not answer in time'
};

/**
 * The sentence for a failed response: the server's error body (error, field, fix, hint:
 * workbench's error_reply, or Jupyter's {message, reason}), else the status in words. Never
 * an HTML page or a stack trace.
 */
export function errorFromResponse(status: number, body: string, what: string): ApiError {
  let parsed: ErrorBody | null = null;
  try {
    const value = JSON.parse(body) as unknown;
    if (value && typeof value === 'object') parsed = value as ErrorBody;
  } catch {
    parsed = null;
  }
  const said = parsed ? text(parsed.error) ?? text(parsed.message) ?? text(parsed.reason) : null;
  const field = parsed ? text(parsed.field) : null;
  const fix = parsed ? text(parsed.fix) : null;
  const hint = parsed ? text(parsed.hint) : null;
  let message = `${what} failed: ${said ?? STATUS_WORDS[status] ?? `HTTP ${status}`}`;
  if (field && !(said ?? '').includes(field)) message += ` (field: ${field})`;
  if (fix && !(said ?? '').includes(fix)) message += `. ${fix}`;
  if (hint) message += `. ${hint}`;
  return new ApiError(message, status, field, fix, hint);
}

/** The sentence for a request that got no response at all. */
export function errorFromNetwork(error: unknown, what: string): ApiError {
  const detail = error instanceof Error && error.message ? `: ${error.message}` : '';
  return new ApiError(`${what} failed: cannot reach the Jupyter server${detail}`, 0);
}

/** One page of jobs (GET /workbench/api/jobs). */
export interface JobPageBody {
  jobs: RawJob[];
  total: number;
  offset: number;
  limit: number;
}

/** The workbench REST API under a Jupyter server's base URL. */
export class WorkbenchClient {
  /** The largest page the server gives (MAX_PAGE in workbench/server/handlers.py). */
  static readonly PAGE = 1000;

  constructor(
    private readonly baseUrl: string,
    private readonly transport: Transport
  ) {}

  /** The absolute URL of an API path (joined under base_url). */
  url(path: string, query: Record<string, string | number | boolean | undefined> = {}): string {
    const base = this.baseUrl.endsWith('/') ? this.baseUrl : `${this.baseUrl}/`;
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined) params.append(key, String(value));
    }
    const qs = params.toString();
    return `${base}workbench/api/${path}${qs ? `?${qs}` : ''}`;
  }

  /** Send a request; a failure becomes an ApiError with its sentence. */
  async send(what: string, url: string, init: RequestInit = {}): Promise<Response> {
    let response: Response;
    try {
      response = await this.transport(url, init);
    } catch (error) {
      if (error instanceof ApiError) throw error;
      // The caller aborted (a log view closed): not a failure to report. JupyterLab's
      // makeRequest wraps the abort in a NetworkError, so ask the signal, not the error.
      if (init.signal?.aborted || (error instanceof Error && error.name === 'AbortError')) {
        throw abortError();
      }
      throw errorFromNetwork(error, what);
    }
    if (!response.ok) {
      let body = '';
      try {
        body = await response.text();
      } catch {
        body = '';
      }
      throw errorFromResponse(response.status, body, what);
    }
    return response;
  }

  /** Send, and read a JSON body (a body that is not JSON is an error, not a crash). */
  async json<T>(what: string, url: string, init: RequestInit = {}): Promise<T> {
    const response = await this.send(what, url, init);
    const body = await response.text();
    try {
      return JSON.parse(body) as T;
    } catch {
      throw new ApiError(`${what} failed: the server's answer is not JSON`, response.status);
    }
  }

  /** One page of jobs, newest first. */
  listPage(offset = 0, limit = WorkbenchClient.PAGE, status?: string): Promise<JobPageBody> {
    return this.json<JobPageBody>(
      'Listing jobs',
      this.url('jobs', { offset, limit, status: status || undefined })
    );
  }

  /** Every job, a page at a time; `onPage` sees each page as it lands (first rows early). */
  async listAll(onPage?: (jobs: RawJob[]) => void, firstPage = 100): Promise<RawJob[]> {
    const all: RawJob[] = [];
    for (let offset = 0; ; ) {
      // A small first page fills the view sooner; then the largest pages the server gives.
      const page = await this.listPage(offset, offset === 0 ? firstPage : WorkbenchClient.PAGE);
      all.push(...page.jobs);
      onPage?.(page.jobs);
      offset += page.jobs.length;
      if (page.jobs.length === 0 || offset >= page.total) return all;
    }
  }

  /** One job's record. */
  getJob(name: string): Promise<RawJob> {
    return this.json<RawJob>(`Reading job ${name}`, this.url(`jobs/${encodeURIComponent(name)}`));
  }

  /** Cancel: 200 (stopped) and 202 (stopping) are both success; the record comes back. */
  cancel(name: string): Promise<RawJob> {
    return this.json<RawJob>(`Cancelling ${name}`, this.url(`jobs/${encodeURIComponent(name)}`), {
      method: 'DELETE'
    });
  }

  /** Submit the job's spec and script again as a new job. */
  rerun(name: string): Promise<RawJob> {
    return this.json<RawJob>(
      `Re-running ${name}`,
      this.url(`jobs/${encodeURIComponent(name)}/rerun`),
      { method: 'POST', body: '{}' }
    );
  }

  /**
   * Read a job's log (rank N or 'all'), following it until the job ends or `signal`
   * aborts; each chunk of complete lines goes to `onLines`.
   */
  async logs(
    name: string,
    rank: number | 'all',
    follow: boolean,
    onLines: (lines: string[]) => void,
    signal?: AbortSignal,
    tail?: number
  ): Promise<void> {
    const url = this.url(`jobs/${encodeURIComponent(name)}/logs`, { rank, follow, tail });
    const response = await this.send(`Reading the log of ${name}`, url, { signal });
    if (!response.body) {
      onLines(splitLines(await response.text()).lines);
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let rest = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const split = splitLines(rest + decoder.decode(value, { stream: true }));
      rest = split.rest;
      if (split.lines.length) onLines(split.lines);
    }
    rest += decoder.decode();
    if (rest) onLines([rest]);
  }
}

/** The error an aborted call rejects with (name "AbortError", as fetch's). */
export function abortError(): Error {
  const error = new Error('aborted');
  error.name = 'AbortError';
  return error;
}

/** Complete lines of `chunk` and the unfinished tail. */
export function splitLines(chunk: string): { lines: string[]; rest: string } {
  const parts = chunk.split('\n');
  const rest = parts.pop() ?? '';
  return { lines: parts, rest };
}
