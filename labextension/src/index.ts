import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, ReactWidget } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { DatasetsTab } from './datasets';
import { JobFeed } from './feed';
import { GpusTab } from './gpus';
import { gpuIcon } from './icon';
import type { OpenInNotebook } from './jobview';
import { insertIntoNotebook } from './notebook';
import { JobsTab, PanelErrorBoundary } from './panel';
import { PanelTabs, type PanelTab } from './tabs';
import { WorkbenchClient } from './request';
import { eventsUrl, type SocketLike } from './stream';

/** Command ids. */
export namespace CommandIDs {
  export const openJobs = 'workbench:open-jobs';
  export const openGpus = 'workbench:open-gpus';
}

const PANEL_ID = 'jp-workbench-panel';

/** The side panel: its tabs over one feed (one socket per browser tab). */
class WorkbenchPanel extends ReactWidget {
  /** The tab in view (the palette commands switch it). */
  activeTab = 'jobs';

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

  /** Show one tab ('jobs', 'gpus', 'datasets', ...). */
  showTab(id: string): void {
    this.activeTab = id;
    this.update();
  }

  render(): JSX.Element {
    const { feed, client } = this;
    const tabs: PanelTab[] = [
      {
        id: 'jobs',
        label: 'Jobs',
        render: () => React.createElement(JobsTab, { feed, client, openInNotebook: this.openInNotebook })
      },
      { id: 'gpus', label: 'GPUs', render: () => React.createElement(GpusTab, { feed, client }) },
      { id: 'datasets', label: 'Datasets', render: () => React.createElement(DatasetsTab, { client }) }
    ];
    return React.createElement(
      PanelErrorBoundary,
      null,
      React.createElement(PanelTabs, { tabs, active: this.activeTab, onSelect: id => this.showTab(id) })
    );
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpu-workbench:plugin',
  description: 'Workbench jobs in a JupyterLab side panel.',
  autoStart: true,
  requires: [ILabShell],
  optional: [ICommandPalette, ILayoutRestorer, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    shell: ILabShell,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
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
  }
};

export default plugin;
