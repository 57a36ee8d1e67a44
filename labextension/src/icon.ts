import { LabIcon } from '@jupyterlab/ui-components';

// A GPU card: board, fan and contacts; `jp-icon3` follows the theme's icon colour.
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M2 6h17a2 2 0 0 1 2 2v7a2 2 0 0 1-2 2H6v2H4V8H2zm4 2v7h13V8zm6.5 1.2a2.3 2.3 0 1 1 0 4.6 2.3 2.3 0 0 1 0-4.6zM7 9h2v5H7zm3 9h2v2h-2zm3 0h2v2h-2zm3 0h2v2h-2z"/>
  </g>
</svg>`;

/** The workbench sidebar icon. */
export const gpuIcon = new LabIcon({ name: 'jupyter-gpu-workbench:gpu', svgstr: svg });
