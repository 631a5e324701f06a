// Watch reader, on every connection once it carries a call: one whose answer waits timeouts.readerIdleMs on a client
// that reads none of it (reader-idle.ts) is closed, which ends its call.
import type { FastifyBaseLogger } from 'fastify';
import { ReaderIdleWatch } from '../reader-idle.js';
import { isInProcess } from '../in-process.js';
import type { RequestStage } from '../stage.js';

export interface WatchReaderDeps {
  config: { timeouts: { readerIdleMs: number } };
  log: FastifyBaseLogger;
}

export function watchReaderStage(deps: WatchReaderDeps): RequestStage {
  const idleMs = deps.config.timeouts.readerIdleMs;
  const watch = new ReaderIdleWatch(idleMs, (socket) => {
    deps.log.info({ idleMs, waitingBytes: socket.writableLength }, 'a client stopped reading its answer; the connection is closed');
    // A reset, where the connection allows one: the kernel drops what it still held for the client at once, and the
    // client learns that its answer was cut rather than waiting for the rest.
    try {
      socket.resetAndDestroy();
    } catch {
      socket.destroy();
    }
  });
  return {
    name: 'watch reader',
    hook: 'onRequest',
    // A call the daemon makes to itself (a batch's line) has no connection to watch.
    run: (request) => (isInProcess(request) ? undefined : watch.watch(request.raw.socket)),
    close: () => watch.close(),
  };
}
