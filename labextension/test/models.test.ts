import { describe, expect, it } from 'vitest';

import {
  JobTable,
  costAt,
  elapsedAt,
  formatAge,
  formatCost,
  formatGpus,
  matches,
  toJobView,
  visibleRange
} from '../src/models';
import { targetJob, todayJob } from './fixtures';

describe('toJobView', () => {
  it("reads today's wire shape", () => {
    const job = toJobView(todayJob('a'));
    expect(job.gpusTotal).toBe(2);
    expect(job.runtime).toBe('process');
    expect(job.ranks.map(r => r.rank)).toEqual([0, 1]);
    expect(job.ranks[0].gpuDevices).toBe('0');
    expect(job.restarts).toBe(0);
    expect(job.reason).toBeNull();
  });

  it("reads design 11's target shape", () => {
    const job = toJobView(targetJob('b', { attempt: 3 }));
    expect(job.gpusTotal).toBe(1);
    expect(job.runtime).toBe('container');
    expect(job.node).toBe('host-a');
    expect(job.reason).toBe('Started');
    expect(job.ranks[0]).toMatchObject({ gpuDevices: '0', restarts: 1, node: 'host-a' });
    expect(job.restarts).toBe(0); // the server's restarts wins over attempt - 1
  });

  it('derives what an older record lacks', () => {
    const raw = targetJob('c', { attempt: 3, gpus_total: null, gpus_per_worker: 2 });
    delete raw.restarts;
    delete raw.node;
    const job = toJobView(raw);
    expect(job.gpusTotal).toBe(4);
    expect(job.restarts).toBe(2);
    expect(job.node).toBe('host-a'); // rank 0's node
  });

  it('keeps unknown GPUs unknown, never NaN', () => {
    expect(toJobView(todayJob('d', { gpus: null })).gpusTotal).toBeNull();
    expect(formatGpus(null)).toBe('-');
    expect(formatGpus(0.5)).toBe('0.5');
    expect(formatGpus(2)).toBe('2');
  });
});

describe('elapsed and cost', () => {
  it('advance for a running job without server traffic', () => {
    const job = toJobView(todayJob('a'));
    expect(elapsedAt(job, 1010 + 3600)).toBe(3600);
    // 3.6 per worker-hour x 1 h x 2 workers
    expect(costAt(job, 1010 + 3600)).toBeCloseTo(7.2);
  });

  it("stop at the server's figures once the job ended", () => {
    const job = toJobView(todayJob('a', { status: 'Succeeded', finished_at: 1020, elapsed: 10, cost: 0.02 }));
    expect(elapsedAt(job, 99999)).toBe(10);
    expect(costAt(job, 99999)).toBe(0.02);
  });

  it('format for the list', () => {
    expect(formatAge(100, 142)).toBe('42s');
    expect(formatAge(0, 300)).toBe('5m');
    expect(formatAge(0, 3 * 3600 + 5)).toBe('3h');
    expect(formatAge(0, 2 * 86400)).toBe('2d');
    expect(formatAge(100, 50)).toBe('0s');
    expect(formatCost(12.345)).toBe('$12.35');
  });
});

describe('JobTable', () => {
  it('lists newest first and filters by status and search words', () => {
    const table = new JobTable();
    table.upsert([
      todayJob('old-train', { created_at: 1 }),
      todayJob('new-train', { created_at: 3, status: 'Succeeded' }),
      todayJob('eval', { created_at: 2, backend: 'kubernetes', status: 'Failed' })
    ]);
    const all = { statuses: new Set<string>(), search: '' };
    expect(table.view(all).map(j => j.name)).toEqual(['new-train', 'eval', 'old-train']);
    expect(table.view({ statuses: new Set(['Failed']), search: '' }).map(j => j.name)).toEqual(['eval']);
    expect(table.view({ statuses: new Set<string>(), search: 'TRAIN succeeded' }).map(j => j.name)).toEqual([
      'new-train'
    ]);
    expect(table.view({ statuses: new Set<string>(), search: 'kubernetes' }).map(j => j.name)).toEqual(['eval']);
    expect(table.counts()).toEqual({ Running: 1, Succeeded: 1, Failed: 1 });
  });

  it('tells listeners about upserts, removals and resets', () => {
    const table = new JobTable();
    let calls = 0;
    const stop = table.subscribe(() => (calls += 1));
    table.upsert([todayJob('a')]);
    table.upsert([todayJob('a', { status: 'Succeeded' })]);
    expect(table.get('a')?.status).toBe('Succeeded');
    table.remove('a');
    table.remove('a'); // nothing to remove: no call
    table.replaceAll([todayJob('b')]);
    expect(calls).toBe(4);
    stop();
    table.upsert([todayJob('c')]);
    expect(calls).toBe(4);
    expect(table.size).toBe(2);
  });

  it('matches a job against an empty filter', () => {
    expect(matches(toJobView(todayJob('x')), { statuses: new Set<string>(), search: '  ' })).toBe(true);
  });
});

describe('visibleRange', () => {
  it('renders only the rows in view plus overscan, for 1,000 jobs', () => {
    expect(visibleRange(0, 280, 28, 1000, 5)).toEqual({ start: 0, end: 16 });
    const middle = visibleRange(28 * 500, 280, 28, 1000, 5);
    expect(middle).toEqual({ start: 495, end: 516 });
    expect(middle.end - middle.start).toBeLessThan(30);
    expect(visibleRange(28 * 2000, 280, 28, 1000, 5)).toEqual({ start: 994, end: 1000 });
    expect(visibleRange(0, 280, 28, 0)).toEqual({ start: 0, end: 0 });
  });
});
