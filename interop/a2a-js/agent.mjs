// A small A2A agent built with the official JavaScript SDK's server, for
// the a2a executor's interop test (cmd/kith/e2e_a2a_test.go):
//
//   node agent.mjs <1.0|0.3>
//
// It upper-cases the message and streams it word by word; "hang" runs
// until cancelled; "ask" asks back (TASK_STATE_INPUT_REQUIRED, "which
// color?") and the answer, sent to the same task, completes it with
// "COLOR: <ANSWER>". It prints {"url": ...} once listening, and
// {"cancelled": <task id>} when a cancel arrives. With 0.3 its card
// declares only a v0.3 JSON-RPC interface (served by the SDK's compat layer).
import express from 'express';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { AgentCard, Role, TaskState } from '@a2a-js/sdk';

const version = process.argv[2] === '0.3' ? '0.3' : '1.0';
const hanging = new Map();

const executor = {
  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const msg = ctx.userMessage;
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED }, history: [msg], artifacts: [], metadata: undefined }));
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING }, metadata: undefined }));
    const text = msg.parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');
    if (ctx.task) {
      // A follow-up turn (the task was published first, above): the
      // answer to "ask".
      bus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, append: false, lastChunk: true, metadata: undefined,
        artifact: { artifactId: 'out', name: 'out', description: '', parts: [{ content: { $case: 'text', value: 'COLOR: ' + text.toUpperCase() } }], extensions: [], metadata: undefined },
      }));
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED }, metadata: undefined }));
      bus.finished();
      return;
    }
    if (text === 'ask') {
      const question = {
        messageId: 'q-' + taskId, role: Role.ROLE_AGENT, taskId, contextId, metadata: undefined, extensions: [], referenceTaskIds: [],
        parts: [{ content: { $case: 'text', value: 'which color?' } }],
      };
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_INPUT_REQUIRED, message: question }, metadata: undefined }));
      bus.finished();
      return;
    }
    if (text === 'hang') {
      await new Promise((resolve) => hanging.set(taskId, resolve));
      return;
    }
    const words = text.toUpperCase().split(/(?<= )/);
    words.forEach((w, i) => {
      bus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, append: i > 0, lastChunk: i === words.length - 1, metadata: undefined,
        artifact: { artifactId: 'out', name: 'out', description: '', parts: [{ content: { $case: 'text', value: w } }], extensions: [], metadata: undefined },
      }));
    });
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED }, metadata: undefined }));
    bus.finished();
  },
  async cancelTask(taskId, bus) {
    console.log(JSON.stringify({ cancelled: taskId }));
    hanging.get(taskId)?.();
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId: '', status: { state: TaskState.TASK_STATE_CANCELED }, metadata: undefined }));
    bus.finished();
  },
};

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const base = `http://127.0.0.1:${server.address().port}`;
  const card = AgentCard.fromJSON({
    name: 'js-upper', description: 'upper case, by the A2A JavaScript SDK', version: '1',
    supportedInterfaces: [{ url: base + '/rpc', protocolBinding: 'JSONRPC', protocolVersion: version }],
    capabilities: { streaming: true },
    defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'],
    skills: [{ id: 'upper', name: 'upper', description: 'upper case', tags: [] }],
  });
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  const legacyCompat = { enabled: true };
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler, legacyCompat }));
  app.use('/rpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat }));
  console.log(JSON.stringify({ url: base }));
});
