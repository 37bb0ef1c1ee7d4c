// export-check replay --target browser: onnxruntime-web (WebAssembly, one thread) in headless Chromium.
import * as ort from './ort/ort.wasm.min.mjs';
import { serve } from './serve.mjs';

ort.env.wasm.numThreads = 1;
ort.env.wasm.proxy = false;
ort.env.wasm.wasmPaths = new URL('./ort/', location.href).href;
ort.env.logLevel = 'fatal';
const base = location.href.slice(0, location.href.lastIndexOf('/'));
serve(ort, base).catch((error) => fetch('fail', { method: 'POST', body: String((error && error.stack) || error) }));
