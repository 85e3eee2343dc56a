/**
 * Fusion Workbench in JupyterLab.
 *
 * The workbench itself is the anywidget app a kernel runs (`wb.open(path)`), so the
 * same front end serves notebooks, Notebook 7 and VS Code. This extension only makes
 * JupyterLab know the model files and the app:
 *
 * - `.onnx` and `.pt2` are file types whose default viewer is "Fusion Workbench"
 *   (the workbench's graph `.json` is offered under "Open With", since JSON keeps
 *   JupyterLab's own viewer). Opening one writes `<name>.workbench.ipynb` beside it
 *   (once; later opens reuse it), opens that notebook and runs it: a kernel-backed view
 *   of the file, saved and re-runnable like any notebook.
 * - The viewer's model factory reads no file content (`fileFormat: null`): a model of
 *   hundreds of MB is never sent to the browser, only its path.
 * - Palette commands: open the file selected in the file browser, and Auto, Measure,
 *   Export on the workbench of the current notebook (they press the app's own buttons,
 *   so they do what a click does, answered in the app's status line).
 * - A launcher card that opens the file browser's selected model, or says how to.
 * - A notebook whose kernel is shut down marks its workbench apps dead, with how to
 *   reopen them (the app looked alive and did nothing).
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, showErrorMessage } from '@jupyterlab/apputils';
import {
  ABCWidgetFactory,
  DocumentRegistry,
  DocumentWidget,
  TextModelFactory
} from '@jupyterlab/docregistry';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

const FACTORY = 'Fusion Workbench';
const MODEL = 'fusion-workbench-path';
const CATEGORY = 'Fusion Workbench';
const SUFFIXES = ['.onnx', '.pt2', '.json'];

namespace CommandIDs {
  export const open = 'fusion-workbench:open';
  export const auto = 'fusion-workbench:auto';
  export const measure = 'fusion-workbench:measure';
  export const exportArtifact = 'fusion-workbench:export';
}

/** A text model factory that loads nothing: the viewer needs the path only. */
class PathModelFactory extends TextModelFactory {
  get name(): string {
    return MODEL;
  }
  get fileFormat(): null {
    return null;
  }
}

/** The notebook beside a model file: `m.onnx` -> `m.workbench.ipynb`. */
export function notebookPath(path: string): string {
  const slash = path.lastIndexOf('/');
  const file = path.slice(slash + 1);
  const dot = file.lastIndexOf('.');
  const stem = dot > 0 ? file.slice(0, dot) : file;
  return `${path.slice(0, slash + 1)}${stem}.workbench.ipynb`;
}

/** The cell that opens the app (run in the notebook's folder, the file's). */
export function openCode(path: string): string {
  const base = path.slice(path.lastIndexOf('/') + 1);
  const file = JSON.stringify(base);
  if (path.toLowerCase().endsWith('.pt2')) {
    // (a torch.export archive: from_torch takes the ExportedProgram, named after the
    // file -- its own name is "exported_program" for every model)
    const name = JSON.stringify(base.slice(0, base.length - 4));
    return (
      'import torch\nimport workbench as wb\n\n' +
      `app = wb.open(wb.from_torch(torch.export.load(${file}), name=${name}))`
    );
  }
  return `import workbench as wb\n\napp = wb.open(${file})`;
}

function notebookContent(path: string, kernel: string, display: string): any {
  const file = path.slice(path.lastIndexOf('/') + 1);
  return {
    cells: [
      {
        cell_type: 'markdown',
        metadata: {},
        source:
          `# ${file} in Fusion Workbench\n\n` +
          'Written by the JupyterLab extension when the file was opened; run it ' +
          'again (Run > Run All Cells) after a kernel restart.'
      },
      {
        cell_type: 'code',
        execution_count: null,
        metadata: {},
        outputs: [],
        source: openCode(path)
      }
    ],
    metadata: {
      kernelspec: { name: kernel, display_name: display, language: 'python' }
    },
    nbformat: 4,
    nbformat_minor: 5
  };
}

/** Open a model file in the workbench: its notebook, written if missing, then run. */
async function openInWorkbench(
  app: JupyterFrontEnd,
  path: string
): Promise<NotebookPanel> {
  const contents = app.serviceManager.contents;
  const nb = notebookPath(path);
  let exists = true;
  try {
    await contents.get(nb, { content: false });
  } catch {
    exists = false;
  }
  if (!exists) {
    const specs = app.serviceManager.kernelspecs.specs;
    const kernel = specs?.default || 'python3';
    const display = specs?.kernelspecs[kernel]?.display_name || 'Python 3';
    await contents.save(nb, {
      type: 'notebook',
      format: 'json',
      content: notebookContent(path, kernel, display)
    });
  }
  const panel = (await app.commands.execute('docmanager:open', {
    path: nb,
    factory: 'Notebook'
  })) as NotebookPanel;
  await panel.context.ready;
  await panel.sessionContext.ready;
  await NotebookActions.runAll(panel.content, panel.sessionContext);
  return panel;
}

/** The viewer opened for a model file: it opens the file's notebook, then closes. */
class OpeningWidget extends DocumentWidget<Widget> {
  constructor(
    app: JupyterFrontEnd,
    context: DocumentRegistry.IContext<DocumentRegistry.IModel>
  ) {
    const content = new Widget();
    content.addClass('wb-lab-opening');
    content.node.textContent = `Opening ${context.path} in Fusion Workbench…`;
    super({ content, context });
    this.title.label = context.localPath.split('/').pop() || context.path;
    void openInWorkbench(app, context.path)
      .catch(err =>
        showErrorMessage(`Cannot open ${context.path} in Fusion Workbench`, err)
      )
      .finally(() => this.close());
  }
}

class WorkbenchFactory extends ABCWidgetFactory<
  OpeningWidget,
  DocumentRegistry.IModel
> {
  constructor(
    private app: JupyterFrontEnd,
    options: DocumentRegistry.IWidgetFactoryOptions<OpeningWidget>
  ) {
    super(options);
  }
  protected createNewWidget(
    context: DocumentRegistry.IContext<DocumentRegistry.IModel>
  ): OpeningWidget {
    return new OpeningWidget(this.app, context);
  }
}

/** Press a button of the workbench app in the current notebook, as a click does. */
function pressButton(tracker: INotebookTracker, label: string): void {
  const panel = tracker.currentWidget;
  const apps = panel ? panel.node.querySelectorAll('.wb-app') : [];
  if (!apps.length) {
    void showErrorMessage(
      'No Fusion Workbench here',
      `"${label}" acts on the workbench app of the current notebook, and ` +
        'this one shows none: open a model (double-click an .onnx file) or run ' +
        '`wb.open(path)` in a cell first.'
    );
    return;
  }
  // the last app drawn is the one a user just opened
  const root = apps[apps.length - 1];
  const button = Array.from(root.querySelectorAll('button')).find(
    b => (b.textContent || '').trim() === label
  );
  if (!button) {
    void showErrorMessage(
      'Fusion Workbench',
      `The workbench shows no "${label}" button.`
    );
    return;
  }
  button.click();
}

function selectedModel(browser: IDefaultFileBrowser | null): string | null {
  if (!browser) {
    return null;
  }
  for (const item of browser.selectedItems()) {
    if (SUFFIXES.some(s => item.path.toLowerCase().endsWith(s))) {
      return item.path;
    }
  }
  return null;
}

const DEAD_TEXT =
  'The kernel behind this workbench is shut down: its controls do nothing now. ' +
  'Start a kernel and run the cell again (Run > Run All Cells) to reopen it.';

/**
 * Mark the workbench apps of a notebook dead when its kernel is shut down or dies
 * for good. (A restart the app's graph view notices itself, from the widget manager;
 * a shutdown the widget manager does not report, so the notebook's session says it.)
 */
function watchKernel(panel: NotebookPanel): void {
  const check = () => {
    const kernel = panel.sessionContext.session?.kernel;
    if (kernel && kernel.status !== 'dead') {
      return;
    }
    panel.node.querySelectorAll('.wb-app:not(.wb-dead)').forEach(app => {
      app.classList.add('wb-dead');
      const banner = document.createElement('div');
      banner.className = 'wb-lab-dead';
      banner.textContent = DEAD_TEXT;
      app.prepend(banner);
    });
  };
  panel.sessionContext.statusChanged.connect(check);
  panel.sessionContext.kernelChanged.connect(check);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'fusion-workbench:plugin',
  description: 'Model files opened in Fusion Workbench; its palette commands and launcher card.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, ILauncher, IDefaultFileBrowser],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    browser: IDefaultFileBrowser | null
  ) => {
    const registry = app.docRegistry;
    tracker.widgetAdded.connect((_, panel) => watchKernel(panel));
    registry.addFileType({
      name: 'onnx',
      displayName: 'ONNX model',
      extensions: ['.onnx'],
      mimeTypes: ['application/x-onnx'],
      contentType: 'file',
      fileFormat: 'base64',
      iconClass: 'jp-MaterialIcon jp-FileIcon'
    });
    registry.addFileType({
      name: 'pt2',
      displayName: 'torch.export program',
      extensions: ['.pt2'],
      mimeTypes: ['application/x-pt2'],
      contentType: 'file',
      fileFormat: 'base64',
      iconClass: 'jp-MaterialIcon jp-FileIcon'
    });
    registry.addModelFactory(new PathModelFactory());
    registry.addWidgetFactory(
      new WorkbenchFactory(app, {
        name: FACTORY,
        label: 'Fusion Workbench',
        modelName: MODEL,
        fileTypes: ['onnx', 'pt2', 'json'],
        defaultFor: ['onnx', 'pt2'],
        readOnly: true
      })
    );

    app.commands.addCommand(CommandIDs.open, {
      label: args =>
        args.path ? `Open ${args.path} in Fusion Workbench` : 'Open in Fusion Workbench',
      caption: 'Open the selected .onnx, .pt2 or graph .json file in Fusion Workbench',
      execute: async args => {
        const path = (args.path as string) || selectedModel(browser);
        if (!path) {
          await showErrorMessage(
            'Open in Fusion Workbench',
            'Select an .onnx, .pt2 or graph .json file in the file browser first ' +
              '(or double-click an .onnx file).'
          );
          return;
        }
        return openInWorkbench(app, path);
      }
    });
    const buttons: [string, string, string][] = [
      [CommandIDs.auto, 'Auto', 'Plan the graph with the chosen planner'],
      [CommandIDs.measure, 'Measure', 'Time the current plan’s kernels'],
      [CommandIDs.exportArtifact, 'Export', 'Export the current plan as an artifact']
    ];
    for (const [id, label, caption] of buttons) {
      app.commands.addCommand(id, {
        label: `Fusion Workbench: ${label}`,
        caption,
        execute: () => pressButton(tracker, label)
      });
    }
    if (palette) {
      palette.addItem({ command: CommandIDs.open, category: CATEGORY });
      for (const [id] of buttons) {
        palette.addItem({ command: id, category: CATEGORY });
      }
    }
    if (launcher) {
      launcher.add({ command: CommandIDs.open, category: 'Other', rank: 1 });
    }
  }
};

export default plugin;
