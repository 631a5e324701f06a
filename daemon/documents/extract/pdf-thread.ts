// The program of a PDF worker thread (pdf-workers.ts starts it): reads one PDF at a time, sent as a message, with
// the same extraction as everywhere else (extractText), and answers with its text or why it could not be read.
import { parentPort, workerData } from 'node:worker_threads';
import { capBuffers, OVER_MEMORY_EXIT } from './memory-budget.js';
import type { PdfReply, PdfThreadData } from './pdf-messages.js';

const port = parentPort;
if (!port) throw new Error('pdf-thread.js runs as a worker thread (see pdf-workers.ts), not on its own');
const { bufferBytes } = workerData as PdfThreadData;

// Over the cap the thread ends at once, rather than throwing: pdf.js catches most exceptions and goes on reading.
capBuffers(bufferBytes, () => process.exit(OVER_MEMORY_EXIT));
// Loaded after the cap, so that pdf.js, loaded on first use, allocates through the checked constructors.
const { extractText, ExtractionError } = await import('./index.js');

port.on('message', (bytes: Uint8Array) => {
  const reply = (message: PdfReply) => port.postMessage(message);
  const memoryBytes = () => {
    const { heapUsed, arrayBuffers } = process.memoryUsage();
    return heapUsed + arrayBuffers;
  };
  extractText(bytes, 'pdf').then(
    (text) => reply({ kind: 'text', text, memoryBytes: memoryBytes() }),
    (err: unknown) => {
      if (err instanceof ExtractionError) reply({ kind: 'refused', message: err.message, memoryBytes: memoryBytes() });
      else reply({ kind: 'failed', message: err instanceof Error ? err.message : String(err) });
    },
  );
});
port.postMessage({ kind: 'ready' } satisfies PdfReply);
