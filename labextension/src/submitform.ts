/**
 * The Submit form's model: what the user typed -> the TrainSpec the server takes, the
 * server's 400 body -> the form field it names, and the debounced dry run that validates as
 * the user types. No JupyterLab or React imports, so the unit tests run in plain Node.
 */
import type { RawJob } from './models';
import { ApiError, type WorkbenchClient } from './request';
import type {
  BackendInfo,
  BackendList,
  ImageInfo,
  ImageList,
  InstanceSpec,
  Plan,
  SpecList,
  TrainSpec
} from './wire';

/** A data mount row: SRC:DST[:ro|rw]. */
export interface MountRow {
  src: string;
  dst: string;
  mode: 'ro' | 'rw';
}

/** An env row: NAME=value. */
export interface EnvRow {
  name: string;
  value: string;
}

/** What the form holds, as typed (numbers stay text until they are sent). */
export interface SubmitForm {
  name: string;
  /** The script, relative to the Jupyter root (the file browser's path). */
  script: string;
  /** Arguments after the script, split as a shell would (by the server). */
  args: string;
  image: string;
  /** '' = the cheapest spec that fits the GPUs (the server's default). */
  instanceSpec: string;
  workers: string;
  /** '' = the server's default (one per whole GPU, else 1). */
  procsPerWorker: string;
  gpus: string;
  mounts: MountRow[];
  env: EnvRow[];
  /** '' = the server's default backend. */
  backend: string;
  /** '' = the backend's default runtime. */
  runtime: string;
  /** '' = the backend's default flavour. */
  flavour: string;
}

/** Form fields an error can sit next to; 'form' is the whole form. */
export type FieldKey =
  | 'name'
  | 'script'
  | 'image'
  | 'instanceSpec'
  | 'workers'
  | 'procsPerWorker'
  | 'gpus'
  | 'mounts'
  | 'env'
  | 'backend'
  | 'runtime'
  | 'flavour'
  | 'form';

/** An empty form: the defaults a user most often keeps. */
export function emptyForm(over: Partial<SubmitForm> = {}): SubmitForm {
  return {
    name: '',
    script: '',
    args: '',
    image: 'pytorch',
    instanceSpec: '',
    workers: '1',
    procsPerWorker: '',
    gpus: '0',
    mounts: [],
    env: [],
    backend: '',
    runtime: '',
    flavour: '',
    ...over
  };
}

/** A typed number when the text is one, else the text itself, so the server's own check
 * names the field ("workers: must be a whole number, got 'two'"). */
function numberOrText(raw: string): number | string {
  const text = raw.trim();
  const value = Number(text);
  return text !== '' && Number.isFinite(value) ? value : text;
}

/** A shell word for the script path (the server splits the command as a shell would). */
export function shellQuote(word: string): string {
  return /^[A-Za-z0-9_./@%+=:,-]+$/.test(word) ? word : `'${word.replace(/'/g, `'"'"'`)}'`;
}

/** The TrainSpec body the form stands for. Empty optional fields are left out, so the
 * server's defaults apply; rows with nothing typed in them are ignored. */
export function toSpec(form: SubmitForm): TrainSpec {
  const script = form.script.trim();
  const args = form.args.trim();
  // A list when there are no arguments (no quoting at all); else one string the server
  // splits with shlex, so quotes in the arguments work as in a terminal.
  const command: TrainSpec['command'] = args
    ? `python ${shellQuote(script)} ${args}`
    : ['python', script];
  const spec: TrainSpec = { command };
  const name = form.name.trim();
  if (name) spec.name = name;
  if (form.image.trim()) spec.image = form.image.trim();
  if (form.instanceSpec) spec.instance_spec = form.instanceSpec;
  // The server's messages name the field for a bad value; a string that is not a number
  // goes as it is, so its message says so (typed as the wire's number on purpose).
  if (form.workers.trim() !== '') spec.workers = numberOrText(form.workers) as number;
  if (form.gpus.trim() !== '') spec.gpus = numberOrText(form.gpus) as number;
  if (form.procsPerWorker.trim() !== '') {
    spec.procs_per_worker = numberOrText(form.procsPerWorker) as number;
  }
  const mounts = form.mounts.filter(m => m.src.trim() || m.dst.trim());
  if (mounts.length) {
    spec.data = mounts.map(m => `${m.src.trim()}:${m.dst.trim()}${m.mode === 'rw' ? ':rw' : ''}`);
  }
  const env = form.env.filter(e => e.name.trim() || e.value !== '');
  if (env.length) {
    spec.env = Object.fromEntries(env.map(e => [e.name.trim(), e.value]));
  }
  if (form.backend) spec.backend = form.backend;
  if (form.runtime) spec.runtime = form.runtime as TrainSpec['runtime'];
  if (form.flavour) spec.backend_options = { flavor: form.flavour };
  return spec;
}

/** Which form field a server field name belongs to (SpecError.field, or a 400's field). */
export function fieldFor(serverField: string | null): FieldKey {
  if (!serverField) return 'form';
  const head = serverField.split(/[.[]/, 1)[0];
  switch (head) {
    case 'name':
    case 'image':
    case 'workers':
    case 'backend':
    case 'runtime':
      return head;
    case 'command':
    case 'working_dir':
    case 'workdir':
      return 'script';
    case 'gpus':
    case 'gpus_per_worker':
      return 'gpus';
    case 'procs_per_worker':
    case 'nproc_per_node':
    case 'nprocPerNode':
      return 'procsPerWorker';
    case 'spec':
    case 'instance_spec':
      return 'instanceSpec';
    case 'data':
      return 'mounts';
    case 'env':
      return 'env';
    case 'backend_options': {
      const option = serverField.slice('backend_options.'.length);
      if (option === 'flavor' || option === 'flavour') return 'flavour';
      if (option === 'runtime') return 'runtime';
      return 'form';
    }
    default:
      return 'form';
  }
}

/** What the last check said: errors by field, or the plan (price, placement, warnings). */
export interface CheckResult {
  errors: Partial<Record<FieldKey, string>>;
  plan: Plan | null;
}

/** A failed dry run or submit -> the message next to the field the server named. A
 * failure without a field (no server, a 409 about GPUs) is the form's own message. */
export function routeError(error: unknown): CheckResult {
  if (error instanceof ApiError) {
    const key = fieldFor(error.field);
    // The sentence without the "Checking the job failed: " prefix: it sits next to its field.
    const text = key === 'form' ? error.message : error.message.replace(/^.*? failed: /, '');
    return { errors: { [key]: text }, plan: null };
  }
  return { errors: { form: error instanceof Error ? error.message : String(error) }, plan: null };
}

/** The price of the planned job per hour: the plan's worker-hour price x workers. */
export function pricePerHour(plan: Plan): number {
  return plan.price_per_hour * plan.workers;
}

/** "$1.20/h (2 workers x $0.60)". */
export function formatPrice(plan: Plan): string {
  const total = `$${pricePerHour(plan).toFixed(2)}/h`;
  return plan.workers > 1 ? `${total} (${plan.workers} workers × $${plan.price_per_hour.toFixed(2)})` : total;
}

/** An instance spec as the picker shows it: name, GPUs, CPU, memory and price. */
export function describeSpec(spec: InstanceSpec): string {
  const gpus = spec.gpus_per_worker
    ? `${spec.gpus_per_worker} GPU${spec.gpu_model ? ` ${spec.gpu_model}` : ''}`
    : 'CPU only';
  return `${spec.name}: ${gpus}, ${spec.cpu} vCPU, ${spec.memory}, $${spec.price_per_hour.toFixed(2)}/h per worker`;
}

/** An image as the picker shows it. */
export function describeImage(image: ImageInfo): string {
  return `${image.name} (${image.framework}, ${image.default_tag})`;
}

/** The backend's capabilities (null when it cannot load, or when none is known yet). */
export function capabilitiesOf(backends: BackendInfo[], chosen: string): BackendInfo | null {
  return backends.find(b => (chosen ? b.name === chosen : b.default)) ?? null;
}

/** Timers, injected so the tests drive time. */
export interface Clock {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const realClock: Clock = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: handle => clearTimeout(handle as ReturnType<typeof setTimeout>)
};

/**
 * Validates as the user types: each change restarts a `delay` ms timer; when it fires, one
 * dry run goes out (the previous one, if still in flight, is aborted), and only the newest
 * answer is reported. A form without a script is not sent (nothing to check yet).
 */
export class DebouncedCheck {
  private timer: unknown = null;
  private inflight: AbortController | null = null;
  private sequence = 0;

  constructor(
    private readonly dryRun: (spec: TrainSpec, signal: AbortSignal) => Promise<Plan>,
    private readonly report: (result: CheckResult, spec: TrainSpec) => void,
    public delay = 400,
    private readonly clock: Clock = realClock
  ) {}

  /** The form changed: check it `delay` ms from now, unless it changes again first. */
  schedule(form: SubmitForm): void {
    if (this.timer !== null) this.clock.clear(this.timer);
    this.timer = this.clock.set(() => {
      this.timer = null;
      void this.run(form);
    }, this.delay);
  }

  /** Check now (the submit button's last look); resolves with what was reported. */
  async run(form: SubmitForm): Promise<CheckResult> {
    if (this.timer !== null) {
      this.clock.clear(this.timer);
      this.timer = null;
    }
    this.inflight?.abort();
    const abort = new AbortController();
    this.inflight = abort;
    const sequence = ++this.sequence;
    const spec = toSpec(form);
    let result: CheckResult;
    if (!form.script.trim()) {
      result = { errors: { script: 'give the script to run, e.g. train.py' }, plan: null };
    } else {
      try {
        result = { errors: {}, plan: await this.dryRun(spec, abort.signal) };
      } catch (error) {
        if (abort.signal.aborted) return { errors: {}, plan: null };
        result = routeError(error);
      }
    }
    if (sequence === this.sequence) {
      this.inflight = null;
      this.report(result, spec);
    }
    return result;
  }

  /** Stop: no timer fires and no answer is reported after this. */
  dispose(): void {
    if (this.timer !== null) this.clock.clear(this.timer);
    this.timer = null;
    this.inflight?.abort();
    this.sequence += 1;
  }
}

/** The routes the Submit tab calls (catalogue, capabilities, dry run, submit). */
export class SubmitApi {
  constructor(private readonly client: WorkbenchClient) {}

  /** The image catalogue. */
  async images(): Promise<ImageInfo[]> {
    return (await this.client.json<ImageList>('Reading the images', this.client.url('images'))).images;
  }

  /** The instance specs with their prices. */
  async specs(): Promise<InstanceSpec[]> {
    return (await this.client.json<SpecList>('Reading the instance specs', this.client.url('specs'))).specs;
  }

  /** Every backend and what it can run. */
  async backends(): Promise<BackendInfo[]> {
    return (await this.client.json<BackendList>('Reading the backends', this.client.url('backends')))
      .backends;
  }

  /** Every check and the placement, nothing created (POST jobs?dry_run=true). */
  dryRun(spec: TrainSpec, signal?: AbortSignal): Promise<Plan> {
    return this.client.json<Plan>('Checking the job', this.client.url('jobs', { dry_run: true }), {
      method: 'POST',
      body: JSON.stringify(spec),
      signal
    });
  }

  /** Submit for real: the new job's record. */
  submit(spec: TrainSpec): Promise<RawJob> {
    return this.client.json<RawJob>('Submitting the job', this.client.url('jobs'), {
      method: 'POST',
      body: JSON.stringify(spec)
    });
  }
}
