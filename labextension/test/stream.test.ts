import { describe, expect, it } from 'vitest';

import { EventStream, UNSUPPORTED_PROTOCOL, eventsUrl, type SocketLike, type StreamState } from '../src/stream';
import { todayJob } from './fixtures';

/** A socket the test drives: it sends the frames the server would and closes like one. */
class FakeSocket implements SocketLike {
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  closed: number | null = null;
  constructor(readonly url: string) {}
  send(frame: object): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }
  drop(code = 1006, reason = ''): void {
    this.onerror?.({});
    this.onclose?.({ code, reason });
  }
  close(code = 1000): void {
    this.closed = code;
  }
}

/** A stream over fake sockets and a manual clock. */
function harness() {
  const sockets: FakeSocket[] = [];
  const timers: Array<{ fn: () => void; ms: number }> = [];
  const log: string[] = [];
  const states: StreamState[] = [];
  const stream = new EventStream(
    since => eventsUrl('ws://h/base/', since),
    url => {
      const s = new FakeSocket(url);
      sockets.push(s);
      return s;
    },
    {
      relist: () => log.push('relist'),
      job: job => log.push(`job ${job.name} ${job.status}`),
      deleted: name => log.push(`deleted ${name}`),
      state: s => states.push(s)
    },
    { backoff: [100, 200, 400], setTimer: (fn, ms) => timers.push({ fn, ms }), clearTimer: () => undefined }
  );
  const fire = (): number => {
    const t = timers.shift();
    if (!t) throw new Error('no timer');
    t.fn();
    return t.ms;
  };
  return { stream, sockets, timers, log, states, fire, last: () => sockets[sockets.length - 1] };
}

describe('EventStream', () => {
  it('connects with protocol 1 and lists on the first hello', () => {
    const h = harness();
    h.stream.start();
    expect(h.last().url).toBe('ws://h/base/workbench/api/events?protocol=1');
    h.last().send({ type: 'hello', protocol: 1, last_id: 7, resumed: false, jobs: {} });
    expect(h.log).toEqual(['relist']);
    expect(h.stream.lastId).toBe(7);
    expect(h.stream.state).toBe('live');
  });

  it('resumes from the last id after a drop, with backoff, and drops replayed duplicates', () => {
    const h = harness();
    h.stream.start();
    h.last().send({ type: 'hello', protocol: 1, last_id: 7, resumed: false });
    h.last().send({ type: 'job', id: 8, job: todayJob('a') });
    h.last().send({ type: 'job', id: 9, job: todayJob('b') });
    h.last().drop();
    expect(h.stream.state).toBe('reconnecting');
    expect(h.fire()).toBe(100);
    expect(h.last().url).toBe('ws://h/base/workbench/api/events?protocol=1&since=9');
    // The server cannot be reached for a while: the delays grow, then repeat the last.
    h.last().drop();
    expect(h.fire()).toBe(200);
    h.last().drop();
    expect(h.fire()).toBe(400);
    h.last().drop();
    expect(h.fire()).toBe(400);
    expect(h.last().url).toContain('since=9');
    h.last().send({ type: 'hello', protocol: 1, last_id: 12, resumed: true });
    h.last().send({ type: 'job', id: 9, job: todayJob('b', { status: 'Failed' }) }); // already seen
    h.last().send({ type: 'job', id: 10, job: todayJob('a', { status: 'Succeeded' }) });
    h.last().send({ type: 'job_deleted', id: 11, name: 'b' });
    expect(h.log).toEqual(['relist', 'job a Running', 'job b Running', 'job a Succeeded', 'deleted b']);
    expect(h.stream.lastId).toBe(11);
    // A successful hello resets the backoff.
    h.last().drop();
    expect(h.fire()).toBe(100);
  });

  it('re-lists on reset and starts again from its last id', () => {
    const h = harness();
    h.stream.start();
    h.last().send({ type: 'hello', last_id: 3, resumed: false });
    h.last().drop();
    h.fire();
    h.last().send({ type: 'hello', last_id: 50000, resumed: false });
    expect(h.log).toEqual(['relist', 'relist']);
    h.last().send({ type: 'reset', last_id: 60000 });
    expect(h.log).toEqual(['relist', 'relist', 'relist']);
    expect(h.stream.lastId).toBe(60000);
    h.last().drop();
    h.fire();
    expect(h.last().url).toContain('since=60000');
  });

  it('re-lists after every reconnect to a server without ids (before protocol v1)', () => {
    const h = harness();
    h.stream.start();
    h.last().send({ type: 'hello', jobs: { Running: 1 } });
    h.last().send({ type: 'job', job: todayJob('a') });
    h.last().drop();
    h.fire();
    expect(h.last().url).toBe('ws://h/base/workbench/api/events?protocol=1');
    h.last().send({ type: 'hello', jobs: {} });
    expect(h.log).toEqual(['relist', 'job a Running', 'relist']);
  });

  it('stops for good on an unsupported protocol, until asked to reconnect', () => {
    const h = harness();
    h.stream.start();
    h.last().drop(UNSUPPORTED_PROTOCOL, 'protocol 2 is not supported; this server speaks 1');
    expect(h.stream.state).toBe('failed');
    expect(h.timers).toHaveLength(0);
    h.stream.reconnect();
    expect(h.sockets).toHaveLength(2);
  });

  it('ignores junk and unknown frames, and stop() closes without reconnecting', () => {
    const h = harness();
    h.stream.start();
    h.last().onmessage?.({ data: 'not json' });
    h.last().send({ type: 'something-new', id: 99 });
    h.last().send({ type: 'gpu', state: 'unavailable', reason: 'no GPU', gpus: [], alerts: [] });
    expect(h.log).toEqual([]);
    const socket = h.last();
    h.stream.stop();
    expect(socket.closed).toBe(1000);
    socket.drop();
    expect(h.timers).toHaveLength(0);
    expect(h.stream.state).toBe('stopped');
  });
});
