/**
 * "Open in notebook": put a job's code in a new cell of the notebook in use, or of a new
 * notebook when none is open.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { NotebookActions, type INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';

/** Insert `code` as a code cell below the active cell of the current notebook (or in a
 * new notebook); resolves to what was done, in words. */
export async function insertIntoNotebook(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  code: string
): Promise<string> {
  let panel: NotebookPanel | null = tracker.currentWidget;
  let created = false;
  if (!panel) {
    // Name the default kernel, or Lab asks which one in a dialog.
    const kernelName = app.serviceManager.kernelspecs.specs?.default;
    const made = (await app.commands.execute(
      'notebook:create-new',
      kernelName ? { kernelName } : {}
    )) as NotebookPanel | undefined;
    if (!made) throw new Error('JupyterLab did not create a notebook');
    panel = made;
    created = true;
  }
  await panel.context.ready;
  const notebook = panel.content;
  const cell = notebook.activeCell;
  // A new notebook's single empty cell takes the code; otherwise a new cell below.
  if (!(created && cell && cell.model.sharedModel.getSource() === '')) {
    NotebookActions.insertBelow(notebook);
  }
  const target = notebook.activeCell;
  if (!target) throw new Error('the notebook has no active cell');
  if (target.model.type !== 'code') NotebookActions.changeCellType(notebook, 'code');
  notebook.activeCell?.model.sharedModel.setSource(code);
  app.shell.activateById(panel.id);
  return `${created ? 'Opened a new notebook' : 'Inserted a cell into'} ${panel.context.path}`;
}
