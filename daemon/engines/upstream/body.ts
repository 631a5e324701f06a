// Reading what an upstream sends, bounded: an upstream that sends more than a call can need (broken, or hostile)
// fails the call rather than fill the daemon's memory.
import type { Dispatcher } from 'undici';

/**
 * Hands each piece of a response body to `onPiece` as it arrives; resolves at the body's end. A throw from `onPiece`
 * stops reading (the body is destroyed) and rejects. Read through events rather than async iteration: a promise per
 * piece costs more than the work for the small answers and events most calls get.
 */
export function readEach(response: Dispatcher.ResponseData, onPiece: (piece: Buffer) => void): Promise<void> {
  const body = response.body;
  // A body already over has sent its events: waiting for them would wait forever.
  if (body.errored) return Promise.reject(body.errored);
  if (body.destroyed || body.readableEnded) return Promise.reject(new Error('the upstream answer was cut off before its end'));
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    const onData = (piece: Buffer) => {
      try {
        onPiece(piece);
      } catch (err) {
        settled = true;
        body.off('data', onData);
        body.destroy();
        reject(err instanceof Error ? err : new Error(String(err)));
      }
    };
    body.on('data', onData);
    body.once('end', () => {
      settled = true;
      resolve();
    });
    body.once('error', reject);
    // Destroyed without an error (the call was abandoned): nothing more will come. ('close' follows every 'end'
    // too: no Error is made then, its stack trace costs more than reading the answer.)
    body.once('close', () => {
      if (!settled) reject(new Error('the upstream answer was cut off before its end'));
    });
  });
}

/** A response body, at most `maxBytes` of it. */
export async function readBody(response: Dispatcher.ResponseData, maxBytes: number): Promise<Buffer> {
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    response.body.destroy();
    throw new Error(`the upstream's answer is ${declared} bytes, more than the ${maxBytes} accepted`);
  }
  const chunks: Buffer[] = [];
  let length = 0;
  await readEach(response, (chunk) => {
    length += chunk.length;
    if (length > maxBytes) throw new Error(`the upstream's answer is more than the ${maxBytes} bytes accepted`);
    chunks.push(chunk);
  });
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length);
}

/** A JSON response body of at most `maxBytes`. */
export async function readJson<T>(response: Dispatcher.ResponseData, maxBytes: number): Promise<T> {
  return JSON.parse((await readBody(response, maxBytes)).toString('utf8')) as T;
}
