/**
 * The Datasets tab's path model: where the browser is inside a store (s3://bucket/prefix,
 * oss://..., a local folder), its breadcrumbs, its parent (never above the store's root),
 * an entry's short name and human sizes, as `workbench data ls/du` print them.
 */

/** A URL split into its scheme prefix ("s3://", "" for a local path) and path parts. */
export interface DataPath {
  prefix: string;
  parts: string[];
  /** True for a local absolute path ("/data/x"). */
  absolute: boolean;
}

/** Split a data URL or local path. Trailing and doubled slashes do not make empty parts. */
export function parseDataUrl(url: string): DataPath {
  const text = url.trim();
  const m = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text);
  const prefix = m ? m[0] : '';
  const rest = text.slice(prefix.length);
  return {
    prefix,
    parts: rest.split('/').filter(p => p !== ''),
    absolute: !prefix && rest.startsWith('/')
  };
}

/** The URL of a DataPath (inverse of parseDataUrl, normalised). */
export function formatDataUrl(path: DataPath): string {
  const body = path.parts.join('/');
  return path.prefix + (path.absolute ? `/${body}` : body);
}

/** Normalise a URL: no trailing or doubled slashes ("s3://b/x/" -> "s3://b/x"). */
export function normalizeUrl(url: string): string {
  return formatDataUrl(parseDataUrl(url));
}

/** Whether `url` is `root` or inside it (same scheme, root's parts a prefix of url's). */
export function isInside(url: string, root: string): boolean {
  const u = parseDataUrl(url);
  const r = parseDataUrl(root);
  return (
    u.prefix.toLowerCase() === r.prefix.toLowerCase() &&
    u.absolute === r.absolute &&
    r.parts.length <= u.parts.length &&
    r.parts.every((p, i) => u.parts[i] === p)
  );
}

/** The folder above `url`, or null at the store's root (the tab never leaves a store). */
export function parentUrl(url: string, root: string): string | null {
  const u = parseDataUrl(url);
  if (!isInside(url, root) || u.parts.length <= parseDataUrl(root).parts.length) return null;
  return formatDataUrl({ ...u, parts: u.parts.slice(0, -1) });
}

/** One step of the breadcrumb trail. */
export interface Crumb {
  label: string;
  url: string;
}

/** The trail from the store's root to `url`: the root as the whole root URL, then one
 * crumb per folder below it. A URL outside the root is a single crumb of itself. */
export function breadcrumbs(url: string, root: string): Crumb[] {
  const r = normalizeUrl(root);
  if (!isInside(url, root)) return [{ label: normalizeUrl(url), url: normalizeUrl(url) }];
  const u = parseDataUrl(url);
  const depth = parseDataUrl(root).parts.length;
  const out: Crumb[] = [{ label: r, url: r }];
  for (let i = depth; i < u.parts.length; i++) {
    out.push({ label: u.parts[i], url: formatDataUrl({ ...u, parts: u.parts.slice(0, i + 1) }) });
  }
  return out;
}

/** An entry's short name (the server lists full names: scheme://bucket/a/b.csv -> b.csv). */
export function baseName(name: string): string {
  const parts = parseDataUrl(name).parts;
  return parts.length ? parts[parts.length - 1] : name;
}

/** Bytes as the CLI prints them (decimal units: 999 B, 1.5 KB, 2.0 MB, ...). */
export function formatSize(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '–';
  let value = n;
  for (const unit of ['B', 'KB', 'MB', 'GB', 'TB']) {
    if (value < 1000 || unit === 'TB') {
      return unit === 'B' ? `${Math.round(value)} B` : `${value.toFixed(1)} ${unit}`;
    }
    value /= 1000;
  }
  return `${n} B`;
}

/** Folders first, then files, each by name (the server sorts by full name only). */
export function sortEntries<T extends { name: string; type: string }>(entries: T[]): T[] {
  return [...entries].sort(
    (a, b) =>
      Number(a.type !== 'directory') - Number(b.type !== 'directory') ||
      baseName(a.name).localeCompare(baseName(b.name))
  );
}
