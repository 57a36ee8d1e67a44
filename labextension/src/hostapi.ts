/**
 * The calls the GPUs tab, the Datasets tab and the job view's charts make (GET gpus, nodes,
 * specs, jobs/NAME/metrics, datasets...), over the panel's one request layer so failures
 * read the same everywhere.
 */
import type { WorkbenchClient } from './request';
import type {
  DatasetListing,
  DatasetPreview,
  DatasetStores,
  DatasetUsage,
  GpuState,
  Metrics,
  NodeList,
  SpecList
} from './wire';

/** The host's GPUs (state, reason, newest samples, history, alerts). */
export function getGpus(client: WorkbenchClient): Promise<GpuState> {
  return client.json<GpuState>('Reading the GPUs', client.url('gpus'));
}

/** The default backend's nodes (one per host; several on a cluster). */
export function getNodes(client: WorkbenchClient): Promise<NodeList> {
  return client.json<NodeList>('Reading the nodes', client.url('nodes'));
}

/** The instance specs and their prices. */
export function getSpecs(client: WorkbenchClient): Promise<SpecList> {
  return client.json<SpecList>('Reading the price list', client.url('specs'));
}

/** A job's scalars and GPU samples; `since` (an earlier answer's cursor) asks only newer. */
export function getMetrics(
  client: WorkbenchClient,
  name: string,
  since?: string
): Promise<Metrics> {
  return client.json<Metrics>(
    `Reading the metrics of ${name}`,
    client.url(`jobs/${encodeURIComponent(name)}/metrics`, { since: since || undefined })
  );
}

/** The stores the Datasets tab starts from. */
export function getStores(client: WorkbenchClient): Promise<DatasetStores> {
  return client.json<DatasetStores>('Reading the data stores', client.url('datasets/stores'));
}

/** The entries directly under a URL (`workbench data ls`). */
export function listData(client: WorkbenchClient, url: string): Promise<DatasetListing> {
  return client.json<DatasetListing>(`Listing ${url}`, client.url('datasets', { url }));
}

/** Total bytes and objects under a URL (`workbench data du`). */
export function dataUsage(client: WorkbenchClient, url: string): Promise<DatasetUsage> {
  return client.json<DatasetUsage>(`Sizing up ${url}`, client.url('datasets/usage', { url }));
}

/** The first lines of a file (`workbench data head`). */
export function previewData(
  client: WorkbenchClient,
  url: string,
  lines = 10
): Promise<DatasetPreview> {
  return client.json<DatasetPreview>(
    `Previewing ${url}`,
    client.url('datasets/preview', { url, lines })
  );
}
