import { describe, expect, it } from 'vitest';

import { layoutChart } from '../src/chartmodel';
import {
  GpuHistory,
  alertsFor,
  fieldValue,
  formatMoney,
  formatSeconds,
  gaugeFraction,
  idleSeconds,
  idleWaste,
  isCluster,
  noGpuMessage,
  pricePerGpuHour
} from '../src/gpumodel';
import type { Alert, GpuSample, InstanceSpec, NodeInfo } from '../src/wire';

const GiB = 2 ** 30;

function sample(index: number, time: number, over: Partial<GpuSample> = {}): GpuSample {
  return {
    index,
    uuid: `GPU-${index}`,
    name: 'NVIDIA H100 80GB HBM3',
    time,
    utilization: 50,
    memory_used: 20 * GiB,
    memory_total: 80 * GiB,
    temperature: 60,
    power: 350,
    power_limit: 700,
    sm_clock: 1980,
    processes: null,
    ecc_errors: 0,
    xid: null,
    error: null,
    ...over
  };
}

describe('GpuHistory (the sparklines)', () => {
  it('seeds from GET /gpus and grows from gpu frames without repeats', () => {
    const h = new GpuHistory();
    h.addSnapshot({
      gpus: [sample(0, 3), sample(1, 3)],
      history: {
        '0': [sample(0, 1), sample(0, 2), sample(0, 3)],
        '1': [sample(1, 2), sample(1, 3)]
      }
    });
    expect(h.indices()).toEqual([0, 1]);
    expect(h.samples(0).map(s => s.time)).toEqual([1, 2, 3]);
    h.add([sample(0, 3), sample(0, 4, { utilization: 90 }), sample(1, 4)]); // 3 again: overlap
    expect(h.samples(0).map(s => s.time)).toEqual([1, 2, 3, 4]);
    expect(h.latest(0)?.utilization).toBe(90);
    expect(h.series(0, 'utilization')).toEqual([
      { x: 1, y: 50 },
      { x: 2, y: 50 },
      { x: 3, y: 50 },
      { x: 4, y: 90 }
    ]);
  });

  it('puts late history in order and drops what is past its limits', () => {
    const h = new GpuHistory({ maxPoints: 4, maxSeconds: 100 });
    h.add([sample(0, 10), sample(0, 30)]);
    h.add([sample(0, 20)]); // arrives late
    expect(h.samples(0).map(s => s.time)).toEqual([10, 20, 30]);
    h.add([sample(0, 40), sample(0, 50)]);
    expect(h.samples(0).map(s => s.time)).toEqual([20, 30, 40, 50]); // maxPoints
    h.add([sample(0, 145)]);
    expect(h.samples(0).map(s => s.time)).toEqual([50, 145]); // older than 100 s before 145
  });

  it('ignores samples without an index or time', () => {
    const h = new GpuHistory();
    h.add([
      { ...sample(0, 1), time: undefined as unknown as number },
      null as unknown as GpuSample
    ]);
    expect(h.indices()).toEqual([]);
  });

  it('turns memory into a percent and a missing figure into a gap in the sparkline', () => {
    const h = new GpuHistory();
    h.add([
      sample(0, 1),
      sample(0, 2, { memory_used: null }),
      sample(0, 3, { memory_used: 40 * GiB })
    ]);
    const points = h.series(0, 'memory');
    expect(points.map(p => p.y)).toEqual([25, null, 50]);
    const layout = layoutChart(
      [{ name: 'mem', points }],
      { width: 100, height: 100 },
      { min: 0, max: 100 }
    );
    expect(layout.paths[0]).toMatchObject({ drawn: 2, skipped: 1 });
  });
});

describe('gauges', () => {
  it('fills utilisation, memory and temperature out of 100 and power out of its limit', () => {
    const s = sample(0, 1, { utilization: 96, temperature: 88, power: 655 });
    expect(gaugeFraction(s, 'utilization')).toBeCloseTo(0.96);
    expect(gaugeFraction(s, 'memory')).toBeCloseTo(0.25);
    expect(gaugeFraction(s, 'temperature')).toBeCloseTo(0.88);
    expect(gaugeFraction(s, 'power')).toBeCloseTo(655 / 700);
    expect(gaugeFraction(sample(0, 1, { power_limit: null }), 'power')).toBeNull();
    expect(gaugeFraction(sample(0, 1, { temperature: 130 }), 'temperature')).toBe(1);
    expect(fieldValue(sample(0, 1, { memory_total: 0 }), 'memory')).toBeNull();
  });
});

describe('idle-GPU waste', () => {
  const samples = [
    sample(0, 0, { utilization: 2 }),
    sample(0, 60, { utilization: 0 }),
    sample(0, 120, { utilization: 80 }),
    sample(0, 180, { utilization: null }),
    sample(0, 240, { utilization: 1 }),
    sample(0, 300, { utilization: 1 })
  ];

  it('counts the time after each idle sample, never unknown utilisation', () => {
    expect(idleSeconds(samples)).toBe(60 + 60 + 60);
    expect(idleSeconds(samples, 1)).toBe(60); // only the 0 %: 1 % is not below 1 %
  });

  it('prices it per GPU-hour, or says there is no price', () => {
    const waste = idleWaste(samples, 3.6);
    expect(waste.seconds).toBe(180);
    expect(waste.cost).toBeCloseTo(0.18, 10);
    expect(idleWaste(samples, null)).toEqual({ seconds: 180, cost: null });
    expect(formatMoney(0.18)).toBe('$0.18');
    expect(formatMoney(0.0042)).toBe('$0.0042');
    expect(formatSeconds(180)).toBe('3 min 00 s');
    expect(formatSeconds(3725)).toBe('1 h 02 min');
  });

  it('takes the cheapest whole-GPU spec of the model from the catalogue', () => {
    const spec = (
      name: string,
      model: string | null,
      gpus: number,
      price: number,
      shared = false
    ): InstanceSpec => ({
      name,
      gpus_per_worker: gpus,
      gpu_model: model,
      gpu_memory: null,
      cpu: 8,
      memory: '32Gi',
      price_per_hour: price,
      shared
    });
    const specs = [
      spec('gpu.8x.h100', 'NVIDIA H100 80GB', 8, 98.4),
      spec('gpu.1x.h100', 'NVIDIA H100 80GB', 1, 13.0),
      spec('gpu.1x', 'NVIDIA A10', 1, 1.25),
      spec('gpu.0.5x', 'NVIDIA A10 (shared)', 0.5, 0.6, true),
      spec('cpu', null, 0, 0.17)
    ];
    expect(pricePerGpuHour('NVIDIA H100 80GB HBM3', specs)).toBeCloseTo(12.3);
    expect(pricePerGpuHour('NVIDIA A10', specs)).toBe(1.25);
    expect(pricePerGpuHour('NVIDIA A100-SXM4-40GB', specs)).toBeNull();
  });
});

describe('the rest of the tab', () => {
  it('says what the CLI says without GPUs', () => {
    expect(noGpuMessage('NVML library not found')).toBe('GPUs: none - NVML library not found');
  });

  it('groups by node on a cluster only', () => {
    const node = (name: string, backend: string): NodeInfo => ({
      name,
      backend,
      cpu_count: 2,
      memory_total: null,
      gpus: [],
      gpu_reason: null,
      active_jobs: [],
      labels: {}
    });
    expect(isCluster([node('here', 'local')])).toBe(false);
    expect(isCluster([node('a', 'kubernetes')])).toBe(true);
    expect(isCluster([node('a', 'local'), node('b', 'local')])).toBe(true);
  });

  it("keeps a GPU's active alerts only", () => {
    const alert = (gpu: number, cleared: number | null): Alert => ({
      kind: 'temperature',
      gpu,
      uuid: null,
      level: 'warning',
      message: 'hot',
      value: 88,
      threshold: 85,
      since: 1,
      cleared
    });
    expect(alertsFor([alert(0, null), alert(0, 5), alert(1, null)], 0)).toHaveLength(1);
  });
});
