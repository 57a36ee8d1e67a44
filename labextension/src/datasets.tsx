/**
 * The Datasets tab: browse the configured stores (GET datasets/stores) folder by folder,
 * with sizes (`workbench data ls`, and `du` for the folder in view) and a preview of a
 * file's first lines (`workbench data head`). Any URL can be typed in as well.
 */
import * as React from 'react';

import {
  baseName,
  breadcrumbs,
  formatSize,
  normalizeUrl,
  parentUrl,
  sortEntries
} from './datasetmodel';
import { dataUsage, getStores, listData, previewData } from './hostapi';
import type { WorkbenchClient } from './request';
import type { DatasetEntry, DatasetPreview, DatasetStore, DatasetUsage } from './wire';

function Problem({ message }: { message: string }): JSX.Element {
  return (
    <div className="jp-WorkbenchPanel-error" role="alert">
      <span>{message}</span>
    </div>
  );
}

/** The whole Datasets tab. */
export function DatasetsTab({ client }: { client: WorkbenchClient }): JSX.Element {
  const [stores, setStores] = React.useState<DatasetStore[] | null>(null);
  const [root, setRoot] = React.useState<string>('');
  const [url, setUrl] = React.useState<string>('');
  const [typed, setTyped] = React.useState<string>('');
  const [error, setError] = React.useState<string | null>(null);

  React.useEffect(() => {
    getStores(client)
      .then(body => {
        setStores(body.stores);
        if (body.stores.length) {
          setRoot(body.stores[0].url);
          setUrl(body.stores[0].url);
        }
      })
      .catch((e: Error) => setError(e.message));
  }, [client]);

  const go = (target: string): void => {
    const clean = normalizeUrl(target);
    if (!clean) return;
    // A URL outside every store becomes its own root (the user typed it).
    const store = (stores ?? []).find(
      s => parentUrl(clean, s.url) !== null || normalizeUrl(s.url) === clean
    );
    setRoot(store ? store.url : clean);
    setUrl(clean);
  };

  return (
    <div className="jp-WorkbenchPanel-datasets" aria-label="Datasets">
      <div className="jp-WorkbenchPanel-toolbar">
        <select
          aria-label="Data store"
          className="jp-mod-styled"
          value={stores?.some(s => s.url === root) ? root : ''}
          onChange={e => go(e.target.value)}
        >
          {!stores?.some(s => s.url === root) && <option value="">(typed URL)</option>}
          {(stores ?? []).map(s => (
            <option key={s.url} value={s.url}>
              {s.url}
            </option>
          ))}
        </select>
        <form
          className="jp-WorkbenchPanel-urlForm"
          onSubmit={e => {
            e.preventDefault();
            go(typed);
          }}
        >
          <input
            type="text"
            className="jp-mod-styled"
            aria-label="Data URL"
            placeholder="s3://bucket/prefix, oss://..., /path"
            value={typed}
            onChange={e => setTyped(e.target.value)}
          />
          <button className="jp-mod-styled" type="submit">
            Open
          </button>
        </form>
      </div>
      {error && <Problem message={error} />}
      {!stores && !error && <div className="jp-WorkbenchPanel-empty">Reading the data stores…</div>}
      {stores && stores.length === 0 && (
        <div className="jp-WorkbenchPanel-empty">
          No data stores are configured (WorkbenchApp.dataset_stores); type a URL above.
        </div>
      )}
      {url && <Folder client={client} url={url} root={root} onOpen={go} />}
    </div>
  );
}

function Folder({
  client,
  url,
  root,
  onOpen
}: {
  client: WorkbenchClient;
  url: string;
  root: string;
  onOpen: (url: string) => void;
}): JSX.Element {
  const [entries, setEntries] = React.useState<DatasetEntry[] | null>(null);
  const [usage, setUsage] = React.useState<DatasetUsage | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const [selected, setSelected] = React.useState<string | null>(null);

  React.useEffect(() => {
    let live = true;
    setEntries(null);
    setUsage(null);
    setError(null);
    setSelected(null);
    listData(client, url)
      .then(body => live && setEntries(sortEntries(body.entries)))
      .catch((e: Error) => live && setError(e.message));
    // The folder's total comes separately: a deep store takes longer to size up than to list.
    dataUsage(client, url)
      .then(body => live && setUsage(body))
      .catch(() => undefined);
    return () => {
      live = false;
    };
  }, [client, url]);

  const up = parentUrl(url, root);
  return (
    <section className="jp-WorkbenchPanel-folder" aria-label={`Folder ${url}`} data-url={url}>
      <nav className="jp-WorkbenchPanel-crumbs" aria-label="Path">
        {breadcrumbs(url, root).map((c, i, all) => (
          <React.Fragment key={c.url}>
            {i > 0 && <span aria-hidden="true"> / </span>}
            {i === all.length - 1 ? (
              <strong>{c.label}</strong>
            ) : (
              <button className="jp-WorkbenchPanel-link" onClick={() => onOpen(c.url)}>
                {c.label}
              </button>
            )}
          </React.Fragment>
        ))}
      </nav>
      <p className="jp-WorkbenchPanel-meta" data-usage={usage ? usage.bytes : ''}>
        {usage ? `${formatSize(usage.bytes)} in ${usage.files} object(s)` : 'Sizing up…'}
      </p>
      {error && <Problem message={error} />}
      {!entries && !error && <div className="jp-WorkbenchPanel-empty">Listing…</div>}
      {entries && (
        <table
          className="jp-WorkbenchPanel-entries"
          aria-label="Entries"
          data-count={entries.length}
        >
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Size</th>
            </tr>
          </thead>
          <tbody>
            {up && (
              <tr>
                <td colSpan={2}>
                  <button
                    className="jp-WorkbenchPanel-link"
                    onClick={() => onOpen(up)}
                    aria-label="Up one folder"
                  >
                    ..
                  </button>
                </td>
              </tr>
            )}
            {entries.map(e => (
              <tr
                key={e.name}
                data-entry={baseName(e.name)}
                data-type={e.type}
                className={selected === e.name ? 'jp-mod-selected' : ''}
              >
                <td>
                  <button
                    className="jp-WorkbenchPanel-link"
                    onClick={() => (e.type === 'directory' ? onOpen(e.name) : setSelected(e.name))}
                    aria-label={
                      e.type === 'directory'
                        ? `Open folder ${baseName(e.name)}`
                        : `Preview ${baseName(e.name)}`
                    }
                  >
                    {baseName(e.name)}
                    {e.type === 'directory' ? '/' : ''}
                  </button>
                </td>
                <td data-size={e.size}>{e.type === 'directory' ? '–' : formatSize(e.size)}</td>
              </tr>
            ))}
            {entries.length === 0 && (
              <tr>
                <td colSpan={2}>Empty.</td>
              </tr>
            )}
          </tbody>
        </table>
      )}
      {selected && <Preview client={client} url={selected} />}
    </section>
  );
}

function Preview({ client, url }: { client: WorkbenchClient; url: string }): JSX.Element {
  const [preview, setPreview] = React.useState<DatasetPreview | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  React.useEffect(() => {
    let live = true;
    setPreview(null);
    setError(null);
    previewData(client, url, 20)
      .then(body => live && setPreview(body))
      .catch((e: Error) => live && setError(e.message));
    return () => {
      live = false;
    };
  }, [client, url]);
  return (
    <section className="jp-WorkbenchPanel-preview" aria-label={`Preview of ${baseName(url)}`}>
      <h4>{baseName(url)}</h4>
      {error && <Problem message={error} />}
      {!preview && !error && <div className="jp-WorkbenchPanel-empty">Reading…</div>}
      {preview && (
        <pre className="jp-WorkbenchPanel-log" tabIndex={0} aria-label="Preview text">
          {preview.preview}
        </pre>
      )}
    </section>
  );
}
