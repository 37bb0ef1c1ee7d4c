// export-check replay --target node: node node.mjs BASE NODE_MODULES, onnxruntime-node from NODE_MODULES.
import { createRequire } from 'node:module';
import { serve } from './serve.mjs';

const [base, modules] = process.argv.slice(2);
const ort = createRequire(`${modules}/`)('onnxruntime-node');
ort.env.logLevel = 'fatal';
serve(ort, base).catch((error) => { console.error(String((error && error.stack) || error)); process.exit(3); });
