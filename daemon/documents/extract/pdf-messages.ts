// What a PDF worker thread (pdf-thread.ts) and the pool that runs it (pdf-workers.ts) say to each other.

export type PdfReply =
  | { kind: 'ready' }
  | { kind: 'text'; text: string; /** Heap and buffers the thread holds afterwards. */ memoryBytes: number }
  | { kind: 'refused'; message: string; memoryBytes: number }
  | { kind: 'failed'; message: string };

export interface PdfThreadData {
  bufferBytes: number;
}
