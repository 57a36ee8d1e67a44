import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, ReactWidget } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { JobFeed } from './feed';
import { gpuIcon } from './icon';
import { JobsTab, PanelErrorBoundary } from './panel';
import { WorkbenchClient } from './request';
import { eventsUrl, type SocketLike } from './stream';

/** Command ids. */
export namespace CommandIDs {
  export const openJobs = 'workbench:open-jobs';
}

const PANEL_ID = 'jp-workbench-panel';

/** The side panel: the Jobs tab over one feed (one socket per browser tab). */
class WorkbenchPanel extends ReactWidget {
  constructor(
    readonly feed: JobFeed,
    readonly client: WorkbenchClient
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

  render(): JSX.Element {
    return React.createElement(
      PanelErrorBoundary,
      null,
      React.createElement(JobsTab, { feed: this.feed, client: this.client })
    );
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpu-workbench:plugin',
  description: 'Workbench jobs in a JupyterLab side panel.',
  autoStart: true,
  requires: [ILabShell],
  optional: [ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    shell: ILabShell,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
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
    const panel = new WorkbenchPanel(feed, client);
    shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, PANEL_ID);

    app.commands.addCommand(CommandIDs.openJobs, {
      label: 'Workbench: Open jobs panel',
      caption: 'Show the workbench jobs in the left sidebar',
      icon: gpuIcon,
      execute: () => shell.activateById(PANEL_ID)
    });
    palette?.addItem({ command: CommandIDs.openJobs, category: 'Workbench' });
  }
};

export default plugin;
