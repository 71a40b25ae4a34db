// Boot Pyodide in a worker with the bitweb package and the GPU helpers.
// Shared by the app worker (worker.mjs) and the kernel check page (kernels.mjs).
import { loadPyodide } from '../node_modules/pyodide/pyodide.mjs';
import * as gpu from './gpu.mjs';

export async function bootPython(progress = () => {}) {
  const t0 = performance.now();
  progress({ stage: 'pyodide', done: 0, total: 1 });
  const base = new URL('../', import.meta.url);
  const pyodide = await loadPyodide({ indexURL: new URL('node_modules/pyodide/', base).href });
  globalThis.bitwebGPU = gpu;
  const zip = await fetch(new URL('build/web/bitweb.zip', base));
  if (!zip.ok) throw new Error(`could not fetch bitweb.zip (${zip.status}); run "npm start" to build it`);
  pyodide.unpackArchive(await zip.arrayBuffer(), 'zip', { extractDir: '/bitweb' });
  pyodide.runPython("import sys; sys.path.insert(0, '/bitweb'); import bitweb");
  progress({ stage: 'pyodide', done: 1, total: 1, ms: performance.now() - t0 });
  return pyodide;
}
