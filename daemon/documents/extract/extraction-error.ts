/** An upload that is not what it claims to be; the message says what is wrong and what to do about it. */
export class ExtractionError extends Error {
  override name = 'ExtractionError';
}
