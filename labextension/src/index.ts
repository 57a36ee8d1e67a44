import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, ReactWidget } from '@jupyterlab/apputils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { DatasetsTab } from './datasets';
import { JobFeed } from './feed';
import { GpusTab } from './gpus';
import { gpuIcon } from './icon';
import type { OpenInNotebook } from './jobview';
import { insertIntoNotebook } from './notebook';
import { JobsTab, PanelErrorBoundary } from './panel';
import type { RawJob } from './models';
import { WorkbenchClient } from './request';
import { DEFAULT_SETTINGS, SettingsContext, readSettings, type PanelSettings } from './settings';
import { SubmitTab, type Prefill } from './submit';
import { SubmitApi } from './submitform';
import { PanelTabs, type PanelTab } from './tabs';
import { eventsUrl, type SocketLike } from './stream';

/** Command ids. */
export namespace CommandIDs {
  export const openJobs = 'workbench:open-jobs';
  /** The Submit tab; args {path}: the script to fill (the file browser's .py item). */
  export const openSubmit = 'workbench:open-submit';
  export const openGpus = 'workbench:open-gpus';
}

const PANEL_ID = 'jp-workbench-panel';

/** The side panel: its tabs over one feed (one socket per browser tab). */
class WorkbenchPanel extends ReactWidget {
  settings: PanelSettings = DEFAULT_SETTINGS;
  /** The tab in view (the palette commands switch it). */
  activeTab = 'jobs';
  private prefill: Prefill | null = null;
  /** The job the Jobs tab opens (a job just submitted); n remounts the tab for each. */
  private opened: { name: string; n: number } | null = null;
  private readonly submitApi: SubmitApi;

  constructor(
    readonly feed: JobFeed,
    readonly client: WorkbenchClient,
    readonly openInNotebook?: OpenInNotebook
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-WorkbenchPanel');
    this.title.icon = gpuIcon;
    this.title.caption = 'Workbench jobs';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'Workbench jobs');
    this.submitApi = new SubmitApi(client);
  }

  /** Show one tab ('jobs', 'submit', ...). */
  showTab(id: string): void {
    this.activeTab = id;
    this.update();
  }

  /** Show the Submit tab, with `script` in its form when given. */
  openSubmit(script: string | null): void {
    this.activeTab = 'submit';
    if (script) this.prefill = { script, n: (this.prefill?.n ?? 0) + 1 };
    this.update();
  }

  /** Apply new settings (from the Settings Editor). */
  applySettings(settings: PanelSettings): void {
    this.settings = settings;
    this.feed.firstPage = settings.pageSize;
    this.update();
  }

  private openJob(job: RawJob): void {
    // Into the table at once: the view shows the record before the stream's event lands.
    this.feed.table.upsert([job]);
    this.opened = { name: job.name, n: (this.opened?.n ?? 0) + 1 };
    this.activeTab = 'jobs';
    this.update();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // Connect when first shown, not at page load: a panel never opened costs no socket.
    this.feed.start();
  }

  dispose(): void {
    this.feed.stop();
    super.dispose();
  }

  render(): JSX.Element {
    const tabs: PanelTab[] = [
      {
        id: 'jobs',
        label: 'Jobs',
        render: () =>
          React.createElement(JobsTab, {
            key: `jobs-${this.opened?.n ?? 0}`,
            feed: this.feed,
            client: this.client,
            initial: this.opened?.name ?? null,
            openInNotebook: this.openInNotebook
          })
      },
      { id: 'gpus', label: 'GPUs', render: () => React.createElement(GpusTab, { feed: this.feed, client: this.client }) },
      {
        id: 'submit',
        label: 'Submit',
        render: () =>
          React.createElement(SubmitTab, {
            api: this.submitApi,
            prefill: this.prefill,
            onSubmitted: (job: RawJob) => this.openJob(job)
          })
      },
      { id: 'datasets', label: 'Datasets', render: () => React.createElement(DatasetsTab, { client: this.client }) }
    ];
    return React.createElement(
      SettingsContext.Provider,
      { value: this.settings },
      React.createElement(
        PanelErrorBoundary,
        null,
        React.createElement(PanelTabs, {
          tabs,
          active: this.activeTab,
          onSelect: (id: string) => this.showTab(id)
        })
      )
    );
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpu-workbench:plugin',
  description: 'Workbench jobs in a JupyterLab side panel.',
  autoStart: true,
  requires: [ILabShell],
  optional: [ICommandPalette, ILayoutRestorer, ISettingRegistry, IDefaultFileBrowser, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    shell: ILabShell,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    registry: ISettingRegistry | null,
    browser: IDefaultFileBrowser | null,
    notebooks: INotebookTracker | null
  ) => {
    const settings = ServerConnection.makeSettings();
    const client = new WorkbenchClient(settings.baseUrl, (url, init) =>
      ServerConnection.makeRequest(url, init, settings)
    );
    const token = settings.appendToken ? settings.token : '';
    const feed = new JobFeed(
      client,
      since => eventsUrl(settings.wsUrl, since, token),
      // The browser's WebSocket has the members SocketLike names (its handlers take richer events).
      url => new settings.WebSocket(url) as unknown as SocketLike
    );
    const panel = new WorkbenchPanel(
      feed,
      client,
      notebooks ? code => insertIntoNotebook(app, notebooks, code) : undefined
    );
    shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, PANEL_ID);

    // The Settings Editor's values (schema/plugin.json), live: a change applies at once.
    registry
      ?.load(plugin.id)
      .then(loaded => {
        const apply = (): void => panel.applySettings(readSettings(loaded.composite));
        apply();
        loaded.changed.connect(apply);
      })
      .catch(error => console.warn('workbench: settings not loaded, defaults used', error));

    app.commands.addCommand(CommandIDs.openJobs, {
      label: 'Workbench: Open jobs panel',
      caption: 'Show the workbench jobs in the left sidebar',
      icon: gpuIcon,
      execute: () => {
        panel.showTab('jobs');
        shell.activateById(PANEL_ID);
      }
    });
    palette?.addItem({ command: CommandIDs.openJobs, category: 'Workbench' });
    app.commands.addCommand(CommandIDs.openGpus, {
      label: 'Workbench: Open GPUs',
      caption: "Show this host's (or the cluster's) GPUs in the workbench panel",
      icon: gpuIcon,
      execute: () => {
        panel.showTab('gpus');
        shell.activateById(PANEL_ID);
      }
    });
    palette?.addItem({ command: CommandIDs.openGpus, category: 'Workbench' });

    app.commands.addCommand(CommandIDs.openSubmit, {
      label: args => (args['fromBrowser'] ? 'Train with workbench' : 'Workbench: Open submit form'),
      caption: 'Submit a training job with workbench (from the file browser: this script)',
      icon: gpuIcon,
      execute: args => {
        let script = typeof args['path'] === 'string' ? args['path'] : null;
        if (script === null && args['fromBrowser'] && browser) {
          // The item right-clicked is the browser's selection.
          const item = browser.selectedItems().next();
          script = item && !item.done ? item.value.path : null;
        }
        panel.openSubmit(script);
        shell.activateById(PANEL_ID);
      }
    });
    palette?.addItem({ command: CommandIDs.openSubmit, category: 'Workbench' });
    app.contextMenu.addItem({
      command: CommandIDs.openSubmit,
      args: { fromBrowser: true },
      selector: '.jp-DirListing-item[data-file-type="python"]',
      rank: 3
    });
  }
};

export default plugin;
