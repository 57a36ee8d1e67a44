import { defineConfig } from 'vitest/config';

// The models, request layer and stream import no JupyterLab code: plain Node is enough.
export default defineConfig({
  test: { environment: 'node', include: ['test/**/*.test.ts'] }
});
