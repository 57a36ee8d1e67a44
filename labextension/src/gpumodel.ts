/**
 * The GPUs tab's model: each GPU's history kept in the browser (seeded by GET /gpus, grown
 * by the event stream's "gpu" frames, never by polling), gauge fractions, idle-GPU waste in
 * money and the price of a GPU-hour from the catalogue. No DOM, no React.
 */
import type { RawPoint } from './chartmodel';
import type { Alert, GpuSample, GpuState, InstanceSpec, NodeInfo } from './wire';

/** The figures a card draws a sparkline of. */
export type GpuField = 'utilization' | 'memory' | 'temperature' | 'power';

/** Below this busy percent a GPU counts as idle (the monitor's own idle rule default). */
export const IDLE_PCT = 5;

/** How much history the browser keeps per GPU. */
export interface HistoryLimits {
  /** Samples kept per GPU (older ones are dropped). */
  maxPoints: number;
  /** Seconds kept, counted back from the newest sample. */
  maxSeconds: number;
}

const DEFAULT_LIMITS: HistoryLimits = { maxPoints: 600, maxSeconds: 600 };

/** The history of every GPU on this host, oldest sample first, one per timestamp. */
export class GpuHistory {
  private readonly byIndex = new Map<number, GpuSample[]>();
  private readonly limits: HistoryLimits;

  constructor(limits: Partial<HistoryLimits> = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...limits };
  }

  /** Seed from GET /gpus: its history and its newest samples. */
  addSnapshot(state: Pick<GpuState, 'gpus' | 'history'>): void {
    for (const samples of Object.values(state.history ?? {})) this.add(samples);
    this.add(state.gpus ?? []);
  }

  /** Add samples (a "gpu" frame's `gpus`, or a page of history). Repeats and samples older
   * than what is kept are ignored, so a frame that overlaps the snapshot adds nothing. */
  add(samples: GpuSample[]): void {
    for (const s of samples) {
      if (typeof s?.index !== 'number' || typeof s.time !== 'number') continue;
      const list = this.byIndex.get(s.index) ?? [];
      const last = list[list.length - 1];
      if (last && s.time <= last.time) {
        if (s.time === last.time) continue;
        // Out of order (history arriving after a frame): put it where it belongs.
        const at = list.findIndex(x => x.time >= s.time);
        if (list[at]?.time !== s.time) list.splice(at, 0, s);
      } else {
        list.push(s);
      }
      this.byIndex.set(s.index, list);
      this.trim(list);
    }
  }

  private trim(list: GpuSample[]): void {
    const newest = list[list.length - 1].time;
    let drop = Math.max(0, list.length - this.limits.maxPoints);
    while (drop < list.length && list[drop].time < newest - this.limits.maxSeconds) drop += 1;
    if (drop > 0) list.splice(0, drop);
  }

  /** GPU indices seen, ascending. */
  indices(): number[] {
    return [...this.byIndex.keys()].sort((a, b) => a - b);
  }

  /** Every kept sample of one GPU, oldest first. */
  samples(index: number): GpuSample[] {
    return this.byIndex.get(index) ?? [];
  }

  /** The newest sample of one GPU. */
  latest(index: number): GpuSample | null {
    const list = this.byIndex.get(index);
    return list && list.length ? list[list.length - 1] : null;
  }

  /** One figure of one GPU over time, as chart points (x: Unix time; null y: a gap). */
  series(index: number, field: GpuField): RawPoint[] {
    return this.samples(index).map(s => ({ x: s.time, y: fieldValue(s, field) }));
  }
}

/** A figure of a sample in the unit its gauge shows (memory as a percent of the total). */
export function fieldValue(s: GpuSample, field: GpuField): number | null {
  switch (field) {
    case 'utilization':
      return s.utilization;
    case 'temperature':
      return s.temperature;
    case 'power':
      return s.power;
    case 'memory':
      return s.memory_used !== null && s.memory_total
        ? (100 * s.memory_used) / s.memory_total
        : null;
  }
}

/** A gauge's fill, 0..1, or null when the GPU does not report the figure. */
export function gaugeFraction(s: GpuSample, field: GpuField): number | null {
  const clamp = (v: number): number => Math.max(0, Math.min(1, v));
  const v = fieldValue(s, field);
  if (v === null || !Number.isFinite(v)) return null;
  if (field === 'power') return s.power_limit ? clamp(v / s.power_limit) : null;
  // Percentages as they are; temperature against 100 C (cards throttle in the 80s-90s).
  return clamp(v / 100);
}

/** Seconds a GPU sat idle (below `idlePct` busy) over its history: each gap between two
 * samples counts when the earlier one was idle; unknown utilisation never counts. */
export function idleSeconds(samples: GpuSample[], idlePct = IDLE_PCT): number {
  let total = 0;
  for (let i = 1; i < samples.length; i++) {
    const u = samples[i - 1].utilization;
    const dt = samples[i].time - samples[i - 1].time;
    if (typeof u === 'number' && Number.isFinite(u) && u < idlePct && dt > 0) total += dt;
  }
  return total;
}

/** Money an idle GPU cost over its history, at `pricePerGpuHour` (null: no known price). */
export function idleWaste(
  samples: GpuSample[],
  pricePerGpuHour: number | null,
  idlePct = IDLE_PCT
): { seconds: number; cost: number | null } {
  const seconds = idleSeconds(samples, idlePct);
  return { seconds, cost: pricePerGpuHour === null ? null : (seconds / 3600) * pricePerGpuHour };
}

function words(text: string): string[] {
  return text
    .toLowerCase()
    .split(/[^a-z0-9.]+/)
    .filter(w => w && w !== 'nvidia');
}

/**
 * The catalogue's price of one GPU-hour of the model `gpuName` (NVML's name, e.g.
 * "NVIDIA H100 80GB HBM3"): the cheapest whole-GPU spec whose gpu_model's words all
 * appear in the name, divided by its GPUs per worker; null when no spec matches.
 */
export function pricePerGpuHour(gpuName: string, specs: InstanceSpec[]): number | null {
  const have = new Set(words(gpuName));
  let best: number | null = null;
  for (const spec of specs) {
    if (!spec.gpu_model || spec.shared || !(spec.gpus_per_worker >= 1)) continue;
    const want = words(spec.gpu_model.replace(/\(.*?\)/g, ''));
    if (want.length === 0 || !want.every(w => have.has(w))) continue;
    const price = spec.price_per_hour / spec.gpus_per_worker;
    if (best === null || price < best) best = price;
  }
  return best;
}

/** Alerts about one GPU. */
export function alertsFor(alerts: Alert[], index: number): Alert[] {
  return alerts.filter(a => a.gpu === index && a.cleared === null);
}

/** The CLI's line for a host without usable GPUs (`workbench top`: "GPUs: none - why"). */
export function noGpuMessage(reason: string | null | undefined): string {
  return `GPUs: none - ${reason || 'the GPU monitor gave no reason'}`;
}

/** Whether the GPUs tab shows one group per cluster node (GET /nodes) rather than this
 * host's sampler: any backend but local, or more than one node. */
export function isCluster(nodes: NodeInfo[]): boolean {
  return nodes.length > 1 || nodes.some(n => n.backend !== 'local');
}

/** Bytes as GiB with one decimal ("61.0 GiB"). */
export function formatGiB(bytes: number | null): string {
  return bytes === null ? '–' : `${(bytes / 2 ** 30).toFixed(1)} GiB`;
}

/** Idle seconds as "3 min 20 s" / "45 s" / "1 h 05 min". */
export function formatSeconds(seconds: number): string {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}

/** Money with cents, or four decimals under a cent (a few idle minutes cost that much). */
export function formatMoney(amount: number): string {
  if (!Number.isFinite(amount)) return '-';
  return amount !== 0 && Math.abs(amount) < 0.01
    ? `$${amount.toFixed(4)}`
    : `$${amount.toFixed(2)}`;
}
