// Reading what an upstream sends, bounded: an upstream that sends more than a call can need (broken, or hostile)
// fails the call rather than fill the daemon's memory.
import type { Dispatcher } from 'undici';

/**
 * A response body, at most `maxBytes` of it. Read through events rather than async iteration: a promise per chunk
 * costs more than the copy for the small answers most calls get.
 */
export function readBody(response: Dispatcher.ResponseData, maxBytes: number): Promise<Buffer> {
  const body = response.body;
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    body.destroy();
    return Promise.reject(new Error(`the upstream's answer is ${declared} bytes, more than the ${maxBytes} accepted`));
  }
  // A body already over has sent its events: waiting for them would wait forever.
  if (body.errored) return Promise.reject(body.errored);
  if (body.destroyed || body.readableEnded) return Promise.reject(new Error('the upstream answer was cut off before its end'));
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const onData = (chunk: Buffer) => {
      length += chunk.length;
      if (length > maxBytes) {
        body.off('data', onData);
        body.destroy();
        reject(new Error(`the upstream's answer is more than the ${maxBytes} bytes accepted`));
        return;
      }
      chunks.push(chunk);
    };
    let ended = false;
    body.on('data', onData);
    body.once('end', () => {
      ended = true;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length));
    });
    body.once('error', reject);
    // Destroyed without an error (the call was abandoned): nothing more will come. ('close' follows every 'end'
    // too: no Error is made then, its stack trace costs more than reading the answer.)
    body.once('close', () => {
      if (!ended) reject(new Error('the upstream answer was cut off before its end'));
    });
  });
}

/** A JSON response body of at most `maxBytes`. */
export async function readJson<T>(response: Dispatcher.ResponseData, maxBytes: number): Promise<T> {
  return JSON.parse((await readBody(response, maxBytes)).toString('utf8')) as T;
}
