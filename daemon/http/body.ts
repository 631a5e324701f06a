// JSON bodies: strict UTF-8 (JSON.parse would quietly turn bad bytes into U+FFFD, and a scrubber must see the
// bytes the client meant), then fastify's own parser with prototype-poisoning protection.
import { isUtf8 } from 'node:buffer';
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../errors/index.js';
import { sha256Hex } from './stages/audit.js';

export function registerJsonBody(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body: Buffer, done) => {
    // The audit entry holds the digest of the bytes as received.
    request.call.requestSha256 = sha256Hex(body);
    request.call.bodyBytes = body.length;
    if (!isUtf8(body)) {
      done(new ApiError('invalid_request_error', 'The request body is not valid UTF-8. Encode the JSON as UTF-8.'), undefined);
      return;
    }
    void parseJson(request, body.toString('utf8'), done);
  });
}
