import { describe, expect, it } from 'vitest';

import { EventStream, eventsUrl, type SocketLike } from '../src/stream';
import type { EventMetrics } from '../src/wire';

/** A socket the test drives: `push` plays a server frame, `send` records a client frame. */
class FakeSocket implements SocketLike {
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  sent: unknown[] = [];
  constructor(readonly url: string) {}
  send(data: string): void {
    this.sent.push(JSON.parse(data));
  }
  push(frame: object): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }
  drop(): void {
    this.onclose?.({ code: 1006, reason: '' });
  }
  close(): void {
    this.onclose = null;
  }
}

function harness() {
  const sockets: FakeSocket[] = [];
  const timers: Array<() => void> = [];
  const errors: string[] = [];
  const stream = new EventStream(
    since => eventsUrl('ws://h/', since),
    url => {
      const s = new FakeSocket(url);
      sockets.push(s);
      return s;
    },
    { relist: () => undefined, job: () => undefined, deleted: () => undefined, error: f => errors.push(f.field) },
    { backoff: [100], setTimer: fn => timers.push(fn), clearTimer: () => undefined }
  );
  const last = (): FakeSocket => sockets[sockets.length - 1];
  const hello = (): void => last().push({ type: 'hello', protocol: 1, last_id: 1, resumed: true });
  return { stream, sockets, timers, errors, last, hello };
}

function frame(name: string, cursor: string, steps: number[]): EventMetrics {
  const scalars = steps.map(step => ({ time: step, rank: 0, step, total: null, loss: 1 / (step + 1) }));
  return { type: 'metrics', name, cursor, scalars, gpu: [] };
}

describe('EventStream metrics subscriptions', () => {
  it('subscribes on the hello, delivers frames and re-subscribes from its cursor after a drop', () => {
    const h = harness();
    const got: number[] = [];
    h.stream.start();
    const unsubscribe = h.stream.subscribeMetrics('train', '', f => got.push(...f.scalars.map(r => Number(r.step))));
    expect(h.last().sent).toEqual([]); // not open yet: nothing written
    h.hello();
    expect(h.last().sent).toEqual([{ type: 'subscribe', metrics: 'train', since: '' }]);
    h.last().push(frame('train', 'scalars-rank0.jsonl=10', [0, 1]));
    h.last().push(frame('other', 'scalars-rank0.jsonl=99', [7])); // not subscribed: ignored
    h.last().push(frame('train', 'scalars-rank0.jsonl=20', [2]));
    expect(got).toEqual([0, 1, 2]);
    expect(h.stream.metricsCursor('train')).toBe('scalars-rank0.jsonl=20');
    h.last().drop();
    h.timers.shift()!();
    expect(h.sockets.length).toBe(2);
    h.hello();
    expect(h.last().sent).toEqual([{ type: 'subscribe', metrics: 'train', since: 'scalars-rank0.jsonl=20' }]);
    h.last().push(frame('train', 'scalars-rank0.jsonl=30', [3]));
    expect(got).toEqual([0, 1, 2, 3]);
    unsubscribe();
    expect(h.last().sent.at(-1)).toEqual({ type: 'unsubscribe', metrics: 'train' });
    h.last().push(frame('train', 'scalars-rank0.jsonl=40', [4])); // in flight: dropped
    expect(got).toEqual([0, 1, 2, 3]);
    expect(h.stream.metricsCursor('train')).toBeNull();
  });

  it('writes at once when live, forgets an unsubscribe made while disconnected, reports errors', () => {
    const h = harness();
    h.stream.start();
    h.hello();
    const off = h.stream.subscribeMetrics('a', 'scalars-rank0.jsonl=5', () => undefined);
    h.stream.subscribeMetrics('b', '', () => undefined);
    expect(h.last().sent).toEqual([
      { type: 'subscribe', metrics: 'a', since: 'scalars-rank0.jsonl=5' },
      { type: 'subscribe', metrics: 'b', since: '' }
    ]);
    h.last().push({ type: 'error', field: 'metrics', error: "no job named 'b'", fix: null });
    expect(h.errors).toEqual(['metrics']);
    h.last().drop();
    off(); // while disconnected: nothing to write, and not re-subscribed
    h.timers.shift()!();
    h.hello();
    expect(h.last().sent).toEqual([{ type: 'subscribe', metrics: 'b', since: '' }]);
    // A replaced subscription's old unsubscribe leaves the new one alone.
    const first = h.stream.subscribeMetrics('c', '', () => undefined);
    h.stream.subscribeMetrics('c', 'scalars-rank0.jsonl=9', () => undefined);
    first();
    expect(h.stream.metricsCursor('c')).toBe('scalars-rank0.jsonl=9');
    expect(h.last().sent.filter(f => (f as { type: string }).type === 'unsubscribe')).toEqual([]);
  });
});
