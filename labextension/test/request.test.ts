import { describe, expect, it } from 'vitest';

import { ApiError, WorkbenchClient, errorFromResponse, splitLines, type Transport } from '../src/request';
import { todayJob } from './fixtures';

type Call = { url: string; init: RequestInit };

/** A transport that answers from a list of canned responses and records each call. */
function fake(...answers: Array<Response | Error>): { transport: Transport; calls: Call[] } {
  const calls: Call[] = [];
  const transport: Transport = async (url, init) => {
    calls.push({ url, init });
    const next = answers.shift();
    if (next === undefined) throw new Error('unexpected call');
    if (next instanceof Error) throw next;
    return next;
  };
  return { transport, calls };
}

const json = (body: unknown, status = 200): Response =>
  new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

describe('errors become one plain sentence', () => {
  it("uses workbench's error body with field and fix", () => {
    const e = errorFromResponse(
      400,
      JSON.stringify({ error: 'workers: must be >= 1', message: 'x', status: 400, field: 'workers', fix: 'give 1 or more' }),
      'Submitting'
    );
    expect(e).toBeInstanceOf(ApiError);
    expect(e.message).toBe('Submitting failed: workers: must be >= 1. give 1 or more');
    expect(e.field).toBe('workers');
    expect(e.status).toBe(400);
  });

  it("adds a 503's install hint", () => {
    const e = errorFromResponse(503, JSON.stringify({ error: 'kubernetes is not available', hint: 'pip install kubernetes' }), 'Listing jobs');
    expect(e.message).toBe('Listing jobs failed: kubernetes is not available. pip install kubernetes');
  });

  it("reads Jupyter's own {message, reason} body", () => {
    expect(errorFromResponse(403, JSON.stringify({ message: 'Forbidden', reason: null }), 'Cancelling a').message).toBe(
      'Cancelling a failed: Forbidden'
    );
  });

  it('never shows an HTML page or a stack trace', () => {
    const e = errorFromResponse(502, '<html><body>Traceback (most recent call last)</body></html>', 'Listing jobs');
    expect(e.message).toBe('Listing jobs failed: the server is not reachable (bad gateway)');
    expect(errorFromResponse(418, '', 'X').message).toBe('X failed: HTTP 418');
  });
});

describe('WorkbenchClient', () => {
  it('pages through every job and shows the first page early', async () => {
    const { transport, calls } = fake(
      json({ jobs: [todayJob('a'), todayJob('b')], total: 3, offset: 0, limit: 2 }),
      json({ jobs: [todayJob('c')], total: 3, offset: 2, limit: 2 })
    );
    const client = new WorkbenchClient('/base/', transport);
    const pages: string[][] = [];
    const all = await client.listAll(page => pages.push(page.map(j => j.name)));
    expect(all.map(j => j.name)).toEqual(['a', 'b', 'c']);
    expect(pages).toEqual([['a', 'b'], ['c']]);
    expect(calls.map(c => c.url)).toEqual([
      '/base/workbench/api/jobs?offset=0&limit=100',
      '/base/workbench/api/jobs?offset=2&limit=1000'
    ]);
  });

  it('treats cancel 200 and 202 both as success', async () => {
    const { transport, calls } = fake(
      json(todayJob('a/b', { status: 'Cancelled' }), 200),
      json(todayJob('a/b', { status: 'Running' }), 202)
    );
    const client = new WorkbenchClient('/', transport);
    expect((await client.cancel('a/b')).status).toBe('Cancelled');
    expect((await client.cancel('a/b')).status).toBe('Running');
    expect(calls[0].url).toBe('/workbench/api/jobs/a%2Fb');
    expect(calls[0].init.method).toBe('DELETE');
  });

  it('turns 404 and network failures into sentences', async () => {
    const { transport } = fake(
      json({ error: "no job named 'x'", status: 404, name: 'x' }, 404),
      new TypeError('Failed to fetch')
    );
    const client = new WorkbenchClient('/', transport);
    await expect(client.getJob('x')).rejects.toThrow("Reading job x failed: no job named 'x'");
    await expect(client.rerun('x')).rejects.toThrow('Re-running x failed: cannot reach the Jupyter server: Failed to fetch');
  });

  it("does not report an aborted log stream as a failure (makeRequest's NetworkError)", async () => {
    const abort = new AbortController();
    abort.abort();
    const { transport } = fake(new TypeError('signal is aborted without reason'));
    const failed = new WorkbenchClient('/', transport).logs('j', 0, true, () => undefined, abort.signal);
    await expect(failed).rejects.toMatchObject({ name: 'AbortError' });
    await expect(failed).rejects.not.toBeInstanceOf(ApiError);
  });

  it('says so when a 200 body is not JSON', async () => {
    const { transport } = fake(new Response('<html>login</html>', { status: 200 }));
    await expect(new WorkbenchClient('/', transport).getJob('x')).rejects.toThrow("the server's answer is not JSON");
  });

  it('streams a followed log as whole lines, across chunk borders', async () => {
    const enc = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(enc.encode('[rank 0] one\n[rank 1] tw'));
        controller.enqueue(enc.encode('o\n[rank 0] thr'));
        controller.enqueue(enc.encode('ee'));
        controller.close();
      }
    });
    const { transport, calls } = fake(new Response(body, { status: 200 }));
    const got: string[][] = [];
    await new WorkbenchClient('/', transport).logs('j', 'all', true, lines => got.push(lines));
    expect(got).toEqual([['[rank 0] one'], ['[rank 1] two'], ['[rank 0] three']]);
    expect(calls[0].url).toBe('/workbench/api/jobs/j/logs?rank=all&follow=true');
  });

  it('splits lines keeping the unfinished tail', () => {
    expect(splitLines('a\nb\nc')).toEqual({ lines: ['a', 'b'], rest: 'c' });
    expect(splitLines('a\n')).toEqual({ lines: ['a'], rest: '' });
  });
});
