// The stages that look after connections rather than calls: a response sent before its request body was read, and
// connections left open while the daemon drains.
import { settleRefusedBody } from '../refused-body.js';
import type { ResponseStage, SendStage } from '../stage.js';

/**
 * Settle refused body: a response sent before its request body was read closes the connection once the rest of the
 * body, within bounds, has been read and thrown away (refused-body.ts).
 */
export function settleRefusedBodyStage(): SendStage {
  return {
    name: 'settle refused body',
    hook: 'onSend',
    run(request, reply, payload, done) {
      settleRefusedBody(request, reply);
      done(null, payload);
    },
  };
}

/**
 * Close drained connections: while draining, a connection is closed once its call has ended, not left open until its
 * keep-alive timeout (the openai SDK keeps its connections), so the drain ends with the last call. Node closes only
 * the connections idle when the server stops listening; one whose response was still going out becomes idle later.
 */
export function closeDrainedConnectionsStage(deps: {
  state: { draining: boolean };
  server: () => { closeIdleConnections(): void };
}): ResponseStage {
  return {
    name: 'close drained connections',
    hook: 'onResponse',
    run() {
      // Idle: the request read whole and its response finished. A pipelined request's response is not finished.
      if (deps.state.draining) deps.server().closeIdleConnections();
    },
  };
}
