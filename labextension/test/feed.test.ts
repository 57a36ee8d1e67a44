import { describe, expect, it } from 'vitest';

import { JobFeed } from '../src/feed';
import { WorkbenchClient, type Transport } from '../src/request';
import { eventsUrl, type SocketLike } from '../src/stream';
import { todayJob } from './fixtures';

class FakeSocket implements SocketLike {
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  constructor(readonly url: string) {}
  send(frame: object): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }
  close(): void {}
}

/** A transport whose GET /jobs answers only when the test releases it. */
function gatedTransport() {
  const pending: Array<(r: Response) => void> = [];
  const transport: Transport = () => new Promise<Response>(resolve => pending.push(resolve));
  const release = (jobs: object[], status = 200) =>
    pending.shift()!(
      new Response(JSON.stringify(status === 200 ? { jobs, total: jobs.length, offset: 0, limit: 1000 } : { error: 'backend down', hint: 'start it' }), { status })
    );
  return { transport, pending, release };
}

const tick = () => new Promise(r => setTimeout(r, 0));

describe('JobFeed', () => {
  it('applies changes that arrive during a list on top of it (no roll-back)', async () => {
    const gate = gatedTransport();
    const sockets: FakeSocket[] = [];
    const feed = new JobFeed(
      new WorkbenchClient('/', gate.transport),
      since => eventsUrl('ws://h/', since),
      url => {
        const s = new FakeSocket(url);
        sockets.push(s);
        return s;
      }
    );
    feed.start();
    sockets[0].send({ type: 'hello', protocol: 1, last_id: 1, resumed: false });
    await tick();
    expect(gate.pending).toHaveLength(1);
    // While the list is in flight, job a finishes and job b is deleted.
    sockets[0].send({ type: 'job', id: 2, job: todayJob('a', { status: 'Succeeded' }) });
    sockets[0].send({ type: 'job_deleted', id: 3, name: 'b' });
    gate.release([todayJob('a', { status: 'Running' }), todayJob('b'), todayJob('c')]);
    await tick();
    await tick();
    expect(feed.table.get('a')?.status).toBe('Succeeded');
    expect(feed.table.get('b')).toBeUndefined();
    expect(feed.table.size).toBe(2);
    expect(feed.error).toBeNull();
    expect(feed.firstRowsMs).not.toBeNull();
    // Later changes go straight in.
    sockets[0].send({ type: 'job', id: 4, job: todayJob('d') });
    expect(feed.table.size).toBe(3);
  });

  it('says why a list failed and keeps what it had', async () => {
    const gate = gatedTransport();
    const sockets: FakeSocket[] = [];
    const feed = new JobFeed(new WorkbenchClient('/', gate.transport), s => eventsUrl('ws://h/', s), url => {
      const s = new FakeSocket(url);
      sockets.push(s);
      return s;
    });
    feed.start();
    sockets[0].send({ type: 'hello', last_id: 1, resumed: false });
    await tick();
    gate.release([todayJob('a')]);
    await tick();
    await tick();
    expect(feed.table.size).toBe(1);
    sockets[0].send({ type: 'reset', last_id: 90 });
    await tick();
    gate.release([], 503);
    await tick();
    await tick();
    expect(feed.error).toBe('Listing jobs failed: backend down. start it');
    expect(feed.table.size).toBe(1);
    const retry = feed.relist();
    gate.release([todayJob('a'), todayJob('z')]);
    await retry;
    expect(feed.error).toBeNull();
    expect(feed.table.size).toBe(2);
  });
});
