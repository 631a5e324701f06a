// Reading what an upstream sends, bounded: an upstream that sends more than a call can need (broken, or hostile)
// fails the call rather than fill the daemon's memory.
import type { UpstreamResponse } from './response.js';

/** A response body, at most `maxBytes` of it. */
export async function readBody(response: UpstreamResponse, maxBytes: number): Promise<Buffer> {
  const declared = Number(response.header('content-length'));
  if (Number.isFinite(declared) && declared > maxBytes) {
    response.destroy();
    throw new Error(`the upstream's answer is ${declared} bytes, more than the ${maxBytes} accepted`);
  }
  const chunks: Buffer[] = [];
  let length = 0;
  await response.each((chunk) => {
    length += chunk.length;
    if (length > maxBytes) throw new Error(`the upstream's answer is more than the ${maxBytes} bytes accepted`);
    chunks.push(chunk);
  });
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length);
}

/** A JSON response body of at most `maxBytes`. */
export async function readJson<T>(response: UpstreamResponse, maxBytes: number): Promise<T> {
  return JSON.parse((await readBody(response, maxBytes)).toString('utf8')) as T;
}
