// Reading what an upstream sends, bounded: an upstream that sends more than a call can need (broken, or hostile)
// fails the call rather than fill the daemon's memory.
import type { Dispatcher } from 'undici';

/** A response body, at most `maxBytes` of it. */
export async function readBody(response: Dispatcher.ResponseData, maxBytes: number): Promise<Buffer> {
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    response.body.destroy();
    throw new Error(`the upstream's answer is ${declared} bytes, more than the ${maxBytes} accepted`);
  }
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of response.body as AsyncIterable<Buffer>) {
    length += chunk.length;
    if (length > maxBytes) {
      response.body.destroy();
      throw new Error(`the upstream's answer is more than the ${maxBytes} bytes accepted`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** A JSON response body of at most `maxBytes`. */
export async function readJson<T>(response: Dispatcher.ResponseData, maxBytes: number): Promise<T> {
  return JSON.parse((await readBody(response, maxBytes)).toString('utf8')) as T;
}
