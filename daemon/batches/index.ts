// The Batch API's records and runner: files (a batch's input, scrubbed as stored, and its output and error files),
// batches and their lines' state, and the runner that runs each line through the daemon's own pipeline.
export { bytesOf, FileStore, QuotaExceeded, type FileObject, type FilePurpose } from './files.js';
export { BATCH_URLS, isBatchUrl, parseBatchFile, type BatchLine, type BatchUrl, type ParseOptions } from './jsonl.js';
export { scrubLines } from './scrub.js';
export { batchObject, BatchStore, type BatchObject, type BatchRecord, type BatchStatus } from './store.js';
export { BatchRunner, type LineAnswer, type LineCall, type LineCaller } from './runner.js';
export { BatchLeases, LEASE_MS, RENEW_MS, type Lease } from './leases.js';
