/**
 * The Submit tab: a form over the catalogue (images, instance specs with prices) and the
 * backends' capabilities, checked by the server as the user types (a debounced dry run whose
 * 400 names the field), showing the plan's price per hour; Submit opens the new job.
 */
import * as React from 'react';

import type { RawJob } from './models';
import { SettingsContext } from './settings';
import {
  DebouncedCheck,
  capabilitiesOf,
  describeImage,
  describeSpec,
  emptyForm,
  formatPrice,
  routeError,
  toSpec,
  type CheckResult,
  type FieldKey,
  type SubmitApi,
  type SubmitForm
} from './submitform';
import type { BackendInfo, ImageInfo, InstanceSpec } from './wire';

/** A request to fill the script (the file browser's "Train with workbench"); `n` makes a
 * second request for the same file count as new. */
export interface Prefill {
  script: string;
  n: number;
}

interface Catalogue {
  images: ImageInfo[];
  specs: InstanceSpec[];
  backends: BackendInfo[];
}

const FIELD_ID = 'jp-WorkbenchSubmit-';

function FieldError({ field, errors }: { field: FieldKey; errors: CheckResult['errors'] }): JSX.Element | null {
  const message = errors[field];
  if (!message) return null;
  return (
    <div className="jp-WorkbenchSubmit-fieldError" id={`${FIELD_ID}${field}-error`} data-field={field} role="alert">
      {message}
    </div>
  );
}

/** Props that tie an input to its label and its error (aria-invalid, aria-describedby). */
function aria(field: FieldKey, label: string, errors: CheckResult['errors']): Record<string, string | boolean> {
  const bad = Boolean(errors[field]);
  return {
    id: `${FIELD_ID}${field}`,
    'aria-label': label,
    'aria-invalid': bad,
    ...(bad ? { 'aria-describedby': `${FIELD_ID}${field}-error` } : {})
  };
}

/** The whole Submit tab. */
export function SubmitTab({
  api,
  prefill,
  onSubmitted
}: {
  api: SubmitApi;
  prefill: Prefill | null;
  onSubmitted: (job: RawJob) => void;
}): JSX.Element {
  const settings = React.useContext(SettingsContext);
  const [form, setForm] = React.useState<SubmitForm>(() =>
    emptyForm({ script: prefill?.script ?? '', backend: settings.defaultBackend })
  );
  const [catalogue, setCatalogue] = React.useState<Catalogue | null>(null);
  const [loadError, setLoadError] = React.useState<string | null>(null);
  const [result, setResult] = React.useState<CheckResult>({ errors: {}, plan: null });
  const [checking, setChecking] = React.useState(false);
  const [submitting, setSubmitting] = React.useState(false);
  const touched = React.useRef(false);

  const check = React.useMemo(
    () =>
      new DebouncedCheck(
        (spec, signal) => api.dryRun(spec, signal),
        next => {
          setChecking(false);
          setResult(next);
        },
        settings.validateDelayMs
      ),
    [api]
  );
  React.useEffect(() => () => check.dispose(), [check]);
  check.delay = settings.validateDelayMs;

  const load = React.useCallback(() => {
    setLoadError(null);
    Promise.all([api.images(), api.specs(), api.backends()])
      .then(([images, specs, backends]) => setCatalogue({ images, specs, backends }))
      .catch((e: Error) => setLoadError(e.message));
  }, [api]);
  React.useEffect(load, [load]);

  // Every change (typed, picked, or filled from the file browser) is checked after a pause.
  const latest = React.useRef(form);
  const update = (patch: Partial<SubmitForm>): void => {
    touched.current = true;
    const next = { ...latest.current, ...patch };
    latest.current = next;
    setForm(next);
    setChecking(true);
    check.schedule(next);
  };
  React.useEffect(() => {
    if (prefill) update({ script: prefill.script });
  }, [prefill?.n]);
  // The settings may load after the form: their default backend applies until the user picks.
  const pickedBackend = React.useRef(false);
  React.useEffect(() => {
    if (!pickedBackend.current) {
      latest.current = { ...latest.current, backend: settings.defaultBackend };
      setForm(latest.current);
    }
  }, [settings.defaultBackend]);

  const submit = async (event: React.FormEvent): Promise<void> => {
    event.preventDefault();
    check.dispose(); // a late dry-run answer must not overwrite the submit's outcome
    setSubmitting(true);
    try {
      const job = await api.submit(toSpec(latest.current));
      setResult({ errors: {}, plan: null });
      onSubmitted(job);
    } catch (error) {
      setResult(routeError(error));
    } finally {
      setSubmitting(false);
      setChecking(false);
    }
  };

  const errors = result.errors;
  const backend = catalogue ? capabilitiesOf(catalogue.backends, form.backend) : null;
  const caps = backend?.capabilities ?? null;
  const mountRows = form.mounts;
  const envRows = form.env;
  const setMount = (i: number, patch: Partial<SubmitForm['mounts'][number]>): void =>
    update({ mounts: mountRows.map((m, j) => (i === j ? { ...m, ...patch } : m)) });
  const setEnv = (i: number, patch: Partial<SubmitForm['env'][number]>): void =>
    update({ env: envRows.map((e, j) => (i === j ? { ...e, ...patch } : e)) });

  return (
    <form className="jp-WorkbenchSubmit" aria-label="Submit a training job" onSubmit={e => void submit(e)} noValidate>
      {loadError && (
        <div className="jp-WorkbenchPanel-error" role="alert">
          <span>{loadError}</span>
          <button type="button" className="jp-mod-styled" onClick={load}>
            Retry
          </button>
        </div>
      )}
      <fieldset>
        <legend>Program</legend>
        <label htmlFor={`${FIELD_ID}script`}>Script</label>
        <input
          className="jp-mod-styled"
          placeholder="train.py (right-click a .py file: Train with workbench)"
          value={form.script}
          onChange={e => update({ script: e.target.value })}
          {...aria('script', 'Script', errors)}
        />
        <FieldError field="script" errors={errors} />
        <label htmlFor={`${FIELD_ID}args`}>Arguments</label>
        <input
          id={`${FIELD_ID}args`}
          aria-label="Arguments"
          className="jp-mod-styled"
          placeholder="--epochs 3"
          value={form.args}
          onChange={e => update({ args: e.target.value })}
        />
        <label htmlFor={`${FIELD_ID}name`}>Job name</label>
        <input
          className="jp-mod-styled"
          placeholder="generated when empty"
          value={form.name}
          onChange={e => update({ name: e.target.value })}
          {...aria('name', 'Job name', errors)}
        />
        <FieldError field="name" errors={errors} />
      </fieldset>

      <fieldset>
        <legend>Resources</legend>
        <label htmlFor={`${FIELD_ID}image`}>Image</label>
        {catalogue && catalogue.images.length ? (
          <select
            className="jp-mod-styled"
            value={form.image}
            onChange={e => update({ image: e.target.value })}
            {...aria('image', 'Image', errors)}
          >
            {catalogue.images.every(i => i.name !== form.image) && <option value={form.image}>{form.image}</option>}
            {catalogue.images.map(i => (
              <option key={i.name} value={i.name} title={i.description}>
                {describeImage(i)}
              </option>
            ))}
          </select>
        ) : (
          <input
            className="jp-mod-styled"
            value={form.image}
            onChange={e => update({ image: e.target.value })}
            {...aria('image', 'Image', errors)}
          />
        )}
        <FieldError field="image" errors={errors} />
        <label htmlFor={`${FIELD_ID}instanceSpec`}>Instance spec</label>
        <select
          className="jp-mod-styled"
          value={form.instanceSpec}
          onChange={e => update({ instanceSpec: e.target.value })}
          {...aria('instanceSpec', 'Instance spec', errors)}
        >
          <option value="">Cheapest that fits the GPUs</option>
          {(catalogue?.specs ?? []).map(s => (
            <option key={s.name} value={s.name}>
              {describeSpec(s)}
            </option>
          ))}
        </select>
        <FieldError field="instanceSpec" errors={errors} />
        <div className="jp-WorkbenchSubmit-numbers">
          <span>
            <label htmlFor={`${FIELD_ID}workers`}>Workers</label>
            <input
              type="text"
              inputMode="numeric"
              className="jp-mod-styled"
              value={form.workers}
              onChange={e => update({ workers: e.target.value })}
              {...aria('workers', 'Workers', errors)}
            />
          </span>
          <span>
            <label htmlFor={`${FIELD_ID}procsPerWorker`}>Processes per worker</label>
            <input
              type="text"
              inputMode="numeric"
              className="jp-mod-styled"
              placeholder="auto"
              value={form.procsPerWorker}
              onChange={e => update({ procsPerWorker: e.target.value })}
              {...aria('procsPerWorker', 'Processes per worker', errors)}
            />
          </span>
          <span>
            <label htmlFor={`${FIELD_ID}gpus`}>GPUs per worker</label>
            <input
              type="text"
              inputMode="decimal"
              className="jp-mod-styled"
              value={form.gpus}
              onChange={e => update({ gpus: e.target.value })}
              {...aria('gpus', 'GPUs per worker', errors)}
            />
          </span>
        </div>
        <FieldError field="workers" errors={errors} />
        <FieldError field="procsPerWorker" errors={errors} />
        <FieldError field="gpus" errors={errors} />
      </fieldset>

      <fieldset>
        <legend>Data mounts</legend>
        {mountRows.map((m, i) => (
          <div className="jp-WorkbenchSubmit-row" key={i} data-row={i}>
            <input
              className="jp-mod-styled"
              aria-label={`Mount ${i + 1} source`}
              placeholder={`s3://bucket/data${caps ? ` (${caps.data_schemes.join(', ')})` : ''}`}
              value={m.src}
              onChange={e => setMount(i, { src: e.target.value })}
              aria-invalid={Boolean(errors.mounts)}
            />
            <input
              className="jp-mod-styled"
              aria-label={`Mount ${i + 1} target`}
              placeholder="/data"
              value={m.dst}
              onChange={e => setMount(i, { dst: e.target.value })}
            />
            <select
              className="jp-mod-styled"
              aria-label={`Mount ${i + 1} mode`}
              value={m.mode}
              onChange={e => setMount(i, { mode: e.target.value === 'rw' ? 'rw' : 'ro' })}
            >
              <option value="ro">read-only</option>
              <option value="rw">read-write</option>
            </select>
            <button
              type="button"
              className="jp-mod-styled"
              aria-label={`Remove mount ${i + 1}`}
              onClick={() => update({ mounts: mountRows.filter((_, j) => j !== i) })}
            >
              ×
            </button>
          </div>
        ))}
        <button
          type="button"
          className="jp-mod-styled"
          onClick={() => update({ mounts: [...mountRows, { src: '', dst: '', mode: 'ro' }] })}
        >
          Add mount
        </button>
        <FieldError field="mounts" errors={errors} />
      </fieldset>

      <fieldset>
        <legend>Environment</legend>
        {envRows.map((v, i) => (
          <div className="jp-WorkbenchSubmit-row" key={i} data-row={i}>
            <input
              className="jp-mod-styled"
              aria-label={`Variable ${i + 1} name`}
              placeholder="NAME"
              value={v.name}
              onChange={e => setEnv(i, { name: e.target.value })}
              aria-invalid={Boolean(errors.env)}
            />
            <input
              className="jp-mod-styled"
              aria-label={`Variable ${i + 1} value`}
              placeholder="value"
              value={v.value}
              onChange={e => setEnv(i, { value: e.target.value })}
            />
            <button
              type="button"
              className="jp-mod-styled"
              aria-label={`Remove variable ${i + 1}`}
              onClick={() => update({ env: envRows.filter((_, j) => j !== i) })}
            >
              ×
            </button>
          </div>
        ))}
        <button type="button" className="jp-mod-styled" onClick={() => update({ env: [...envRows, { name: '', value: '' }] })}>
          Add variable
        </button>
        <FieldError field="env" errors={errors} />
      </fieldset>

      <fieldset>
        <legend>Where it runs</legend>
        <label htmlFor={`${FIELD_ID}backend`}>Backend</label>
        <select
          className="jp-mod-styled"
          value={form.backend}
          onChange={e => {
            pickedBackend.current = true;
            update({ backend: e.target.value, runtime: '', flavour: '' });
          }}
          {...aria('backend', 'Backend', errors)}
        >
          <option value="">Server default{catalogue ? ` (${catalogue.backends.find(b => b.default)?.name ?? 'none'})` : ''}</option>
          {(catalogue?.backends ?? []).map(b => (
            <option key={b.name} value={b.name} disabled={b.capabilities === null} title={b.error ?? ''}>
              {b.name}
              {b.capabilities === null ? ` (unavailable: ${b.hint ?? b.error ?? 'cannot load'})` : ''}
            </option>
          ))}
        </select>
        <FieldError field="backend" errors={errors} />
        <label htmlFor={`${FIELD_ID}runtime`}>Runtime</label>
        <select
          className="jp-mod-styled"
          value={form.runtime}
          onChange={e => update({ runtime: e.target.value })}
          {...aria('runtime', 'Runtime', errors)}
        >
          <option value="">Backend default</option>
          {(caps?.runtimes ?? []).map(r => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
        <FieldError field="runtime" errors={errors} />
        <label htmlFor={`${FIELD_ID}flavour`}>Flavour</label>
        <select
          className="jp-mod-styled"
          value={form.flavour}
          disabled={!caps || caps.flavours.length === 0}
          title={caps && caps.flavours.length === 0 ? `the ${backend?.name} backend has one kind of workload` : ''}
          onChange={e => update({ flavour: e.target.value })}
          {...aria('flavour', 'Flavour', errors)}
        >
          <option value="">Backend default</option>
          {(caps?.flavours ?? []).map(f => (
            <option key={f} value={f}>
              {f}
            </option>
          ))}
        </select>
        <FieldError field="flavour" errors={errors} />
      </fieldset>

      <div className="jp-WorkbenchSubmit-plan" role="status" aria-live="polite" data-checking={checking}>
        {result.plan ? (
          <>
            <span className="jp-WorkbenchSubmit-price" data-price={result.plan.price_per_hour * result.plan.workers}>
              Price: {formatPrice(result.plan)}
            </span>{' '}
            · {result.plan.backend} ({result.plan.runtime}) · {result.plan.workers} × {result.plan.procs_per_worker}{' '}
            process(es)
            {result.plan.warnings.map((w, i) => (
              <div key={i} className="jp-WorkbenchSubmit-warning">
                {w}
              </div>
            ))}
          </>
        ) : checking ? (
          'Checking…'
        ) : touched.current || prefill ? (
          ''
        ) : (
          'Pick a script; the form is checked by the server as you type.'
        )}
      </div>
      <FieldError field="form" errors={errors} />
      <div className="jp-WorkbenchPanel-toolbar">
        <button type="submit" className="jp-mod-styled jp-mod-accept" disabled={submitting} aria-label="Submit the job">
          {submitting ? 'Submitting…' : 'Submit'}
        </button>
      </div>
    </form>
  );
}
