import type { RawJob } from '../src/models';

/** A job record in today's wire shape (job_dir, runtime, gpus at the top level). */
export function todayJob(name: string, over: Partial<RawJob> = {}): RawJob {
  return {
    name,
    status: 'Running',
    backend: 'local',
    runtime: 'process',
    image: 'pytorch',
    spec: {},
    created_at: 1000,
    started_at: 1010,
    finished_at: null,
    elapsed: 5,
    attempt: 1,
    max_retries: 0,
    message: '',
    price_per_hour: 3.6,
    cost: 0.01,
    workers: 2,
    gpus: 2,
    job_dir: `/jobs/${name}`,
    details: {},
    ranks: [
      { rank: 1, state: 'Running', pid: 11, exit_code: null, started_at: 1010, finished_at: null, gpus: '1', details: {} },
      { rank: 0, state: 'Running', pid: 10, exit_code: null, started_at: 1010, finished_at: null, gpus: '0', details: {} }
    ],
    events: [{ time: 1000, reason: 'Submitted', message: 'submitted', level: 'info' }],
    ...over
  };
}

/** The same job in design 11's target shape (details, gpus_*, node, reason, restarts). */
export function targetJob(name: string, over: Partial<RawJob> = {}): RawJob {
  const job: RawJob = {
    ...todayJob(name),
    reason: 'Started',
    restarts: 0,
    node: 'host-a',
    gpus_per_worker: 0.5,
    gpus_total: 1,
    details: { job_dir: `/jobs/${name}`, runtime: 'container', supervisor_pid: 9 },
    ranks: [
      { rank: 0, state: 'Running', exit_code: null, restarts: 1, node: 'host-a', started_at: 1010, finished_at: null, gpu_devices: '0', details: { pid: 10 } }
    ],
    ...over
  };
  delete job.gpus;
  delete job.job_dir;
  delete job.runtime;
  return job;
}
