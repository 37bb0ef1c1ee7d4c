// export-check replay --target node|browser: the loop both targets run (exporter/jstargets/bridge.py is the
// other end). Each turn POSTs the answer to the last job to BASE/job and reads the next job from the reply,
// until the job is "exit". A message is one frame: 4 bytes (the JSON header's length, little-endian), the
// header, then every tensor's bytes in the order the header lists them ({name, type, dims, bytes}).

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int64: BigInt64Array, uint64: BigUint64Array, int32: Int32Array,
  uint32: Uint32Array, int16: Int16Array, uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array,
  float16: Uint16Array,
};

function unframe(buffer) {
  const length = new DataView(buffer).getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, length)));
  const tensors = [];
  let at = 4 + length;
  for (const t of header.tensors || []) {
    tensors.push({ ...t, data: buffer.slice(at, at + t.bytes) });  // a copy: aligned for its typed array
    at += t.bytes;
  }
  return { header, tensors };
}

function frame(header, tensors) {
  const bytes = tensors.map((t) => new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  const head = new TextEncoder().encode(JSON.stringify({
    ...header, tensors: tensors.map((t, i) => ({ name: t.name, type: t.type, dims: t.dims, bytes: bytes[i].byteLength })),
  }));
  const out = new Uint8Array(4 + head.byteLength + bytes.reduce((n, b) => n + b.byteLength, 0));
  new DataView(out.buffer).setUint32(0, head.byteLength, true);
  out.set(head, 4);
  let at = 4 + head.byteLength;
  for (const b of bytes) { out.set(b, at); at += b.byteLength; }
  return out;
}

function message(error) {
  return String((error && (error.message || error.stack)) || error);
}

async function handle(ort, job, sessions) {
  const { header, tensors } = job;
  if (header.op === 'open') {
    const session = await ort.InferenceSession.create(header.model, header.options);
    sessions.set(header.session, session);
    return [{ inputs: session.inputNames, outputs: session.outputNames, versions: ort.env.versions }, []];
  }
  const session = sessions.get(header.session);
  if (header.op === 'close') {
    sessions.delete(header.session);
    if (session) await session.release();
    return [{}, []];
  }
  if (header.op === 'run') {
    const feeds = {};
    for (const t of tensors) feeds[t.name] = new ort.Tensor(t.type, new ARRAYS[t.type](t.data), t.dims);
    const results = await session.run(feeds);
    const out = session.outputNames.map((name) => {
      const r = results[name];
      return { name, type: r.type, dims: Array.from(r.dims), data: r.data };
    });
    return [{}, out];
  }
  throw new Error(`unknown job ${header.op}`);
}

export async function serve(ort, base) {
  const sessions = new Map();
  let answer = [{ ready: true, versions: ort.env.versions }, []];
  for (;;) {
    const reply = await fetch(`${base}/job`, { method: 'POST', body: frame(...answer) });
    if (!reply.ok) throw new Error(`the bridge answered ${reply.status}`);
    const job = unframe(await reply.arrayBuffer());
    if (job.header.op === 'exit') return;
    try {
      answer = await handle(ort, job, sessions);
    } catch (error) {
      answer = [{ error: message(error) }, []];
    }
  }
}
