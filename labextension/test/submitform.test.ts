import { describe, expect, it, vi } from 'vitest';

import { ApiError, WorkbenchClient, errorFromResponse, type Transport } from '../src/request';
import { DEFAULT_SETTINGS, readSettings } from '../src/settings';
import {
  DebouncedCheck,
  SubmitApi,
  capabilitiesOf,
  describeSpec,
  emptyForm,
  fieldFor,
  formatPrice,
  routeError,
  shellQuote,
  toSpec,
  type CheckResult,
  type Clock
} from '../src/submitform';
import type { Plan, TrainSpec } from '../src/wire';

/** A clock the test advances by hand. */
function manualClock(): Clock & { advance: (ms: number) => void; pending: () => number } {
  let now = 0;
  let timers: Array<{ at: number; fn: () => void; id: number }> = [];
  let ids = 0;
  return {
    set: (fn, ms) => {
      ids += 1;
      timers.push({ at: now + ms, fn, id: ids });
      return ids;
    },
    clear: handle => {
      timers = timers.filter(t => t.id !== handle);
    },
    advance: ms => {
      now += ms;
      const due = timers.filter(t => t.at <= now);
      timers = timers.filter(t => t.at > now);
      for (const t of due) t.fn();
    },
    pending: () => timers.length
  };
}

const plan = (over: Partial<Plan> = {}): Plan => ({
  backend: 'local',
  name: 'train-1',
  runtime: 'process',
  image: 'docker.io/pytorch/pytorch:2.13',
  workers: 2,
  procs_per_worker: 1,
  gpus_per_worker: 0,
  placement: [],
  mounts: [],
  env_names: [],
  price_per_hour: 0.6,
  warnings: [],
  manifests: [],
  ...over
});

/** The 400 body workbench's error_reply sends for a SpecError. */
const specError = (field: string, error: string, fix: string): ApiError =>
  errorFromResponse(400, JSON.stringify({ error, field, fix, status: 400, message: error }), 'Checking the job');

describe('form -> TrainSpec', () => {
  it('maps every field to the spec the server takes', () => {
    const spec = toSpec(
      emptyForm({
        name: ' mnist ',
        script: 'models/train.py',
        image: 'tensorflow',
        instanceSpec: 'gpu.1x',
        workers: '2',
        procsPerWorker: '4',
        gpus: '0.5',
        mounts: [
          { src: 's3://bucket/imagenet', dst: '/data', mode: 'ro' },
          { src: './out', dst: '/out', mode: 'rw' },
          { src: ' ', dst: '', mode: 'ro' }
        ],
        env: [
          { name: 'LR', value: '0.1' },
          { name: '', value: '' }
        ],
        backend: 'kubernetes',
        runtime: 'pod',
        flavour: 'kubeflow'
      })
    );
    expect(spec).toEqual({
      command: ['python', 'models/train.py'],
      name: 'mnist',
      image: 'tensorflow',
      instance_spec: 'gpu.1x',
      workers: 2,
      gpus: 0.5,
      procs_per_worker: 4,
      data: ['s3://bucket/imagenet:/data', './out:/out:rw'],
      env: { LR: '0.1' },
      backend: 'kubernetes',
      runtime: 'pod',
      backend_options: { flavor: 'kubeflow' }
    } satisfies TrainSpec);
  });

  it('leaves empty optional fields to the server and keeps its defaults', () => {
    expect(toSpec(emptyForm({ script: 'train.py', workers: '', gpus: '' }))).toEqual({
      command: ['python', 'train.py'],
      image: 'pytorch'
    });
  });

  it('sends arguments as one shell line, the script quoted', () => {
    expect(toSpec(emptyForm({ script: 'my dir/train.py', args: '--epochs 3 --tag "a b"' })).command).toBe(
      `python 'my dir/train.py' --epochs 3 --tag "a b"`
    );
    expect(shellQuote("it's.py")).toBe(`'it'"'"'s.py'`);
    expect(shellQuote('a/b-c_1.py')).toBe('a/b-c_1.py');
  });

  it('sends a value that is not a number as typed, so the server names the field', () => {
    const spec = toSpec(emptyForm({ script: 't.py', workers: 'two', gpus: ' 1 ' }));
    expect(spec.workers).toBe('two');
    expect(spec.gpus).toBe(1);
  });
});

describe("the server's 400 body -> the field it names", () => {
  it.each([
    ['workers', 'workers'],
    ['gpus', 'gpus'],
    ['gpus_per_worker', 'gpus'],
    ['procs_per_worker', 'procsPerWorker'],
    ['spec', 'instanceSpec'],
    ['instance_spec', 'instanceSpec'],
    ['image', 'image'],
    ['command', 'script'],
    ['data', 'mounts'],
    ['env.1X', 'env'],
    ['backend', 'backend'],
    ['runtime', 'runtime'],
    ['backend_options.runtime', 'runtime'],
    ['backend_options.flavor', 'flavour'],
    ['backend_options.namespace', 'form'],
    ['name', 'name'],
    ['body', 'form']
  ])('%s -> %s', (server, form) => {
    expect(fieldFor(server)).toBe(form);
  });

  it('puts the message next to the field, without the request prefix', () => {
    const result = routeError(
      specError('workers', 'workers: must be at least 1, got 0', 'give 1 or more workers, e.g. --workers 2')
    );
    expect(result).toEqual({
      errors: { workers: 'workers: must be at least 1, got 0. give 1 or more workers, e.g. --workers 2' },
      plan: null
    });
  });

  it("routes a bad data URL (MountError's 400, field data) to the mounts", () => {
    const e = errorFromResponse(
      400,
      JSON.stringify({ error: "data: unknown scheme 'foo' in 'foo://x'", field: 'data', fix: null }),
      'Checking the job'
    );
    expect(routeError(e).errors).toEqual({ mounts: "data: unknown scheme 'foo' in 'foo://x'" });
  });

  it('keeps a failure without a field (409 about GPUs, no server) as the form message', () => {
    const conflict = errorFromResponse(409, JSON.stringify({ error: '[local] no GPU here', backend: 'local' }), 'Submitting the job');
    expect(routeError(conflict).errors).toEqual({ form: 'Submitting the job failed: [local] no GPU here' });
    expect(routeError(new Error('boom')).errors).toEqual({ form: 'boom' });
  });
});

describe('prices and pickers', () => {
  it('shows the price per hour of the whole job from the plan', () => {
    expect(formatPrice(plan())).toBe('$1.20/h (2 workers × $0.60)');
    expect(formatPrice(plan({ workers: 1, price_per_hour: 3.4 }))).toBe('$3.40/h');
  });

  it('describes an instance spec with its price', () => {
    expect(
      describeSpec({ name: 'gpu.1x', gpus_per_worker: 1, gpu_model: 'A10', gpu_memory: '24Gi', cpu: 8, memory: '30Gi', price_per_hour: 1.2, shared: false })
    ).toBe('gpu.1x: 1 GPU A10, 8 vCPU, 30Gi, $1.20/h per worker');
  });

  it("picks the chosen backend's capabilities, or the default's", () => {
    const caps = { runtimes: ['process'], gpu_modes: ['whole' as const], data_schemes: ['s3'], flavours: [] };
    const backends = [
      { name: 'local', default: true, capabilities: caps, error: null, hint: null },
      { name: 'kubernetes', default: false, capabilities: null, error: 'no kubeconfig', hint: 'set KUBECONFIG' }
    ];
    expect(capabilitiesOf(backends, '')?.name).toBe('local');
    expect(capabilitiesOf(backends, 'kubernetes')?.capabilities).toBeNull();
    expect(capabilitiesOf(backends, 'volcano')).toBeNull();
  });
});

describe('DebouncedCheck', () => {
  it('sends one dry run after the typing stops, with the last form', async () => {
    const clock = manualClock();
    const sent: TrainSpec[] = [];
    const reports: CheckResult[] = [];
    const check = new DebouncedCheck(
      async spec => {
        sent.push(spec);
        return plan();
      },
      r => reports.push(r),
      300,
      clock
    );
    for (const workers of ['1', '12', '2']) {
      check.schedule(emptyForm({ script: 'train.py', workers }));
      clock.advance(100);
    }
    expect(sent).toHaveLength(0);
    clock.advance(200);
    await vi.waitFor(() => expect(reports).toHaveLength(1));
    expect(sent.map(s => s.workers)).toEqual([2]);
    expect(reports[0]).toEqual({ errors: {}, plan: plan() });
    expect(clock.pending()).toBe(0);
  });

  it('reports only the newest answer when an older one comes back late, and aborts it', async () => {
    const clock = manualClock();
    const answers: Array<{ resolve: (p: Plan) => void; reject: (e: unknown) => void; signal: AbortSignal }> = [];
    const reports: CheckResult[] = [];
    const check = new DebouncedCheck(
      (_spec, signal) => new Promise<Plan>((resolve, reject) => answers.push({ resolve, reject, signal })),
      r => reports.push(r),
      10,
      clock
    );
    check.schedule(emptyForm({ script: 'a.py', workers: '0' }));
    clock.advance(10);
    check.schedule(emptyForm({ script: 'a.py', workers: '2' }));
    clock.advance(10);
    expect(answers).toHaveLength(2);
    expect(answers[0].signal.aborted).toBe(true);
    answers[1].resolve(plan({ name: 'newest' }));
    answers[0].reject(specError('workers', 'workers: must be at least 1, got 0', 'give 1 or more'));
    await vi.waitFor(() => expect(reports).toHaveLength(1));
    await new Promise(r => setTimeout(r, 0));
    expect(reports).toHaveLength(1);
    expect(reports[0].plan?.name).toBe('newest');
  });

  it('asks for a script before sending anything, and stops after dispose', async () => {
    const clock = manualClock();
    const dryRun = vi.fn(async () => plan());
    const reports: CheckResult[] = [];
    const check = new DebouncedCheck(dryRun, r => reports.push(r), 50, clock);
    check.schedule(emptyForm({ script: ' ' }));
    clock.advance(50);
    await vi.waitFor(() => expect(reports).toHaveLength(1));
    expect(reports[0].errors.script).toMatch(/give the script/);
    check.schedule(emptyForm({ script: 'train.py' }));
    check.dispose();
    clock.advance(100);
    expect(dryRun).not.toHaveBeenCalled();
    expect(reports).toHaveLength(1);
  });
});

describe('SubmitApi', () => {
  it('dry-runs with POST jobs?dry_run=true and submits with POST jobs', async () => {
    const calls: Array<{ url: string; init: RequestInit }> = [];
    const transport: Transport = async (url, init) => {
      calls.push({ url, init });
      return new Response(JSON.stringify(url.includes('dry_run') ? plan() : { name: 'train-1' }), {
        status: url.includes('dry_run') ? 200 : 201
      });
    };
    const api = new SubmitApi(new WorkbenchClient('http://lab/', transport));
    const spec = toSpec(emptyForm({ script: 'train.py', workers: '2' }));
    expect((await api.dryRun(spec)).price_per_hour).toBe(0.6);
    await api.submit(spec);
    expect(calls.map(c => [c.init.method, c.url])).toEqual([
      ['POST', 'http://lab/workbench/api/jobs?dry_run=true'],
      ['POST', 'http://lab/workbench/api/jobs']
    ]);
    expect(JSON.parse(calls[0].init.body as string)).toEqual({ command: ['python', 'train.py'], image: 'pytorch', workers: 2, gpus: 0 });
  });
});

describe('settings', () => {
  it('reads the Settings Editor values, falling back per value', () => {
    expect(readSettings({})).toEqual(DEFAULT_SETTINGS);
    expect(readSettings({ defaultBackend: ' kubernetes ', followLogs: false, pageSize: 50, validateDelayMs: 0 })).toEqual({
      defaultBackend: 'kubernetes',
      followLogs: false,
      pageSize: 50,
      validateDelayMs: 0
    });
    expect(readSettings({ followLogs: 'no', pageSize: 0, validateDelayMs: 1.5 })).toEqual(DEFAULT_SETTINGS);
  });
});
