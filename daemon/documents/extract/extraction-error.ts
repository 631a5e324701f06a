/** An upload that is not what it claims to be; the message says what is wrong and what to do about it. */
export class ExtractionError extends Error {
  override name = 'ExtractionError';

  /** 413 for a file that is too large once read (it expands past the memory budget), 400 for anything else. */
  constructor(
    message: string,
    readonly status: 400 | 413 = 400,
  ) {
    super(message);
  }
}
