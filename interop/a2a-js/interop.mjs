// Interop test of kith's A2A gateway with the official JavaScript SDK,
// driven by cmd/kith/e2e_a2a_test.go against real daemons.
//
//   node interop.mjs phase1 <base URL> <token> <profile> [legacy]
//   node interop.mjs phase2 <base URL> <token> <profile> <slow profile> <task id> [legacy]
//   node interop.mjs multiturn <base URL> <token> <profile> [legacy]
//
// phase1: resolve the profile's card (signature fields present, verified
// with the SDK's own JWS verifier against the node's JWKS; bearer scheme
// declared), sendMessage (blocking) and sendMessageStream (working →
// artifact → completed). phase2 (after the Go test restarted the daemon):
// getTask finds phase1's task; a long task is cancelled with cancelTask.
// multiturn: the profile's task asks back: sendMessage gives a task in
// INPUT_REQUIRED whose status message is the question; a sendMessage whose
// message names that task (taskId, contextId) answers it, and the same task
// completes with the answer in its output.
// "legacy" runs the same through the v0.3 JSON-RPC transport. The last line
// on stdout is a JSON summary; any failure exits non-zero.
import { ClientFactory, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { verifyAgentCardSignature, Role, TaskState } from '@a2a-js/sdk';

const [phase, base, token, profile, ...rest] = process.argv.slice(2);
const legacy = rest.includes('legacy');

function check(cond, msg) {
  if (!cond) {
    throw new Error('check failed: ' + msg);
  }
}

// Every request carries the bearer token (the card says it is required).
const authFetch = (url, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set('Authorization', 'Bearer ' + token);
  return fetch(url, { ...init, headers });
};

async function client() {
  const resolverFactory = new ClientFactory();
  const probe = await resolverFactory.createFromUrl(base + '/a2a/' + profile + '/');
  const card = await probe.getAgentCard();
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch, legacyCompat: { enabled: true } })],
  });
  // Pick the transport this run tests: the v1.0 or the v0.3 JSON-RPC interface.
  const want = legacy ? '0.3' : '1.0';
  const iface = card.supportedInterfaces.filter(
    (i) => i.protocolBinding === 'JSONRPC' && i.protocolVersion === want,
  );
  check(iface.length === 1, `card has one JSONRPC ${want} interface: ${JSON.stringify(card.supportedInterfaces)}`);
  const c = await factory.createFromAgentCard({ ...card, supportedInterfaces: iface });
  return { c, card };
}

function text(msg) {
  return { messageId: 'm-' + Math.random().toString(16).slice(2), role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: msg } }] };
}

function artifactText(task) {
  return (task.artifacts || []).flatMap((a) => a.parts).map((p) => p.content?.value ?? '').join('');
}

async function phase1() {
  const { c, card } = await client();
  check(Array.isArray(card.signatures) && card.signatures.length > 0, 'card has signatures');
  for (const s of card.signatures) {
    check(typeof s.protected === 'string' && s.protected.length > 0, 'signature has protected');
    check(typeof s.signature === 'string' && s.signature.length > 0, 'signature has signature');
  }
  const hdr = JSON.parse(Buffer.from(card.signatures[0].protected, 'base64url').toString());
  check(hdr.alg === 'EdDSA' && hdr.kid.startsWith('12D3KooW'), 'protected header: EdDSA, kid = peer ID: ' + JSON.stringify(hdr));
  await verifyAgentCardSignature(async (kid, jku) => {
    const jwks = await (await fetch(jku)).json();
    const key = jwks.keys.find((k) => k.kid === kid);
    check(key, 'JWKS holds kid ' + kid);
    return key;
  })(card);
  check(Object.keys(card.securitySchemes || {}).length > 0, 'card declares the bearer scheme');

  const input = 'hello mesh from a2a-js';
  const res = await c.sendMessage({ message: text(input) });
  check(res.status?.state === TaskState.TASK_STATE_COMPLETED, 'sendMessage completed: ' + JSON.stringify(res));
  check(artifactText(res) === input, 'sendMessage output is the echo: ' + artifactText(res));

  const seen = [];
  let streamed = '';
  let taskId = '';
  for await (const ev of c.sendMessageStream({ message: text('one two three four') })) {
    const p = ev.payload ?? { $case: ev.kind ?? 'unknown', value: ev };
    switch (p.$case) {
      case 'task':
        taskId = p.value.id;
        seen.push('task:' + p.value.status.state);
        break;
      case 'statusUpdate':
        seen.push('status:' + p.value.status.state);
        break;
      case 'artifactUpdate':
        seen.push('artifact');
        if (p.value.lastChunk) {
          streamed = p.value.artifact.parts.map((x) => x.content?.value ?? '').join('');
        }
        break;
      default:
        seen.push(p.$case);
    }
  }
  const W = TaskState.TASK_STATE_WORKING, C = TaskState.TASK_STATE_COMPLETED;
  const firstArtifact = seen.indexOf('artifact');
  const working = seen.findIndex((s) => s === 'status:' + W || s === 'task:' + W);
  check(working >= 0 && firstArtifact > working, 'working before the first artifact: ' + seen.join(' '));
  check(seen[seen.length - 1] === 'status:' + C, 'stream ends completed: ' + seen.join(' '));
  check(streamed === 'one two three four', 'last chunk holds the whole output: ' + streamed);
  console.log(JSON.stringify({ taskId: res.id, streamTaskId: taskId, events: seen }));
}

async function phase2() {
  const [slow, taskId] = rest;
  const { c } = await client();
  const t = await c.getTask({ id: taskId });
  check(t.status.state === TaskState.TASK_STATE_COMPLETED, 'getTask after restart: completed: ' + JSON.stringify(t));
  check(artifactText(t) === 'hello mesh from a2a-js', 'getTask after restart keeps the output');

  const { c: cs } = await (async () => {
    const f = new ClientFactory();
    const probe = await f.createFromUrl(base + '/a2a/' + slow + '/');
    const card = await probe.getAgentCard();
    const want = legacy ? '0.3' : '1.0';
    const factory = new ClientFactory({
      transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch, legacyCompat: { enabled: true } })],
    });
    return { c: await factory.createFromAgentCard({ ...card, supportedInterfaces: card.supportedInterfaces.filter((i) => i.protocolBinding === 'JSONRPC' && i.protocolVersion === want) }) };
  })();
  const started = await cs.sendMessage({ message: text('a long task'), configuration: { returnImmediately: true, blocking: false } });
  const id = started.id;
  check(id, 'returnImmediately gives a task: ' + JSON.stringify(started));
  // Wait until the provider runs it, so that the cancel has something to stop.
  let state = started.status.state;
  for (let i = 0; i < 600 && state !== TaskState.TASK_STATE_WORKING; i++) {
    await new Promise((r) => setTimeout(r, 50));
    state = (await cs.getTask({ id })).status.state;
  }
  check(state === TaskState.TASK_STATE_WORKING, 'long task is working before the cancel: ' + state);
  const cancelled = await cs.cancelTask({ id });
  check(cancelled.status.state === TaskState.TASK_STATE_CANCELED, 'cancelTask: canceled: ' + JSON.stringify(cancelled.status));
  let notFound = false;
  try {
    await cs.getTask({ id: '00000000000000000000000000000000' });
  } catch (e) {
    notFound = /not found/i.test(String(e.message)) || e.reason === 'TASK_NOT_FOUND';
  }
  check(notFound, 'unknown task id is TaskNotFound');
  console.log(JSON.stringify({ cancelledTaskId: id }));
}

async function multiturn() {
  const { c } = await client();
  const asked = await c.sendMessage({ message: text('ask') });
  check(asked.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED, 'sendMessage: input required: ' + JSON.stringify(asked.status));
  const question = (asked.status.message?.parts ?? []).map((p) => p.content?.value ?? '').join('');
  check(question === 'which color?', 'the question is the status message: ' + JSON.stringify(asked.status.message));
  const reply = { ...text('blue'), taskId: asked.id, contextId: asked.contextId };
  const done = await c.sendMessage({ message: reply });
  check(done.id === asked.id, 'the answer continues the same task: ' + done.id + ' vs ' + asked.id);
  check(done.status?.state === TaskState.TASK_STATE_COMPLETED, 'answered task completed: ' + JSON.stringify(done.status));
  check(artifactText(done) === 'COLOR: BLUE', 'output after the answer: ' + artifactText(done));
  let refused = false;
  try {
    await c.sendMessage({ message: { ...text('red'), taskId: asked.id } });
  } catch (e) {
    refused = true;
  }
  check(refused, 'an answer to a completed task is refused');
  console.log(JSON.stringify({ multiTurnTaskId: asked.id, question }));
}

try {
  if (phase === 'phase1') await phase1();
  else if (phase === 'multiturn') await multiturn();
  else if (phase === 'phase2') await phase2();
  else throw new Error('usage: phase1|phase2|multiturn ...');
} catch (e) {
  console.error(legacy ? '[v0.3] ' : '[v1.0] ', e?.stack ?? e, e?.data ? JSON.stringify(e.data) : '');
  process.exit(1);
}
