// A cap on the memory behind the buffers of a worker thread. V8's resourceLimits bound a worker's JavaScript heap but
// not the memory of its ArrayBuffers, and that is where pdf.js decodes streams: a PDF whose content stream inflates to
// gigabytes would take them whatever the worker's heap limit. pdf.js decodes a stream either in JavaScript,
// into typed arrays, or (Flate) with the platform's DecompressionStream, gathering the whole output in chunks. So the
// worker replaces, before pdf.js is loaded, the typed-array and ArrayBuffer constructors and DecompressionStream with
// counting ones, and after every MiB allocated or decompressed, and before any single allocation of a MiB or more,
// compares what the thread's buffers hold with the cap; past it, `onOver` runs instead of the allocation. What the
// thread holds is read from its own allocator (process.memoryUsage().arrayBuffers is per thread), garbage not yet
// collected included, so the check errs towards stopping.
import { DecompressionStream, TransformStream, type ReadableStream, type WritableStream } from 'node:stream/web';

/** A worker thread ends with this exit code when its buffers would go over the cap. */
export const OVER_MEMORY_EXIT = 71;

const CHECK_EVERY = 1024 * 1024;

const TYPED_ARRAYS = [
  'Int8Array',
  'Uint8Array',
  'Uint8ClampedArray',
  'Int16Array',
  'Uint16Array',
  'Int32Array',
  'Uint32Array',
  'Float32Array',
  'Float64Array',
  'BigInt64Array',
  'BigUint64Array',
] as const;

type Constructor = abstract new (...args: never[]) => object;

/** Elements a typed array made from these arguments allocates (none when it is a view of an existing buffer). */
function elementsOf(first: unknown): number {
  if (typeof first === 'number') return first;
  if (first instanceof ArrayBuffer || first instanceof SharedArrayBuffer) return 0;
  const length = (first as { length?: unknown } | null | undefined)?.length;
  return typeof length === 'number' ? length : 0;
}

/** Checks the buffers made in this thread from now on against `limitBytes`. */
export function capBuffers(limitBytes: number, onOver: (requestedBytes: number) => never): void {
  let sinceCheck = 0;
  /** Counts `bytes` about to be allocated (or just decompressed); checks the total each MiB. */
  const charge = (bytes: number) => {
    sinceCheck += bytes;
    if (sinceCheck < CHECK_EVERY) return;
    sinceCheck = 0;
    if (process.memoryUsage().arrayBuffers + bytes > limitBytes) onOver(bytes);
  };
  const global = globalThis as unknown as Record<string, unknown>;
  for (const name of TYPED_ARRAYS) {
    const original = global[name] as Constructor & { BYTES_PER_ELEMENT: number };
    global[name] = new Proxy(original, {
      construct(target, args: unknown[], newTarget: Constructor) {
        charge(elementsOf(args[0]) * original.BYTES_PER_ELEMENT);
        return Reflect.construct(target, args, newTarget) as object;
      },
    });
  }
  global.ArrayBuffer = new Proxy(ArrayBuffer, {
    construct(target, args: unknown[], newTarget: Constructor) {
      if (typeof args[0] === 'number') charge(args[0]);
      return Reflect.construct(target, args, newTarget) as object;
    },
  });
  global.DecompressionStream = class CappedDecompressionStream {
    readonly writable: WritableStream<Uint8Array>;
    readonly readable: ReadableStream<Uint8Array>;

    constructor(format: ConstructorParameters<typeof DecompressionStream>[0]) {
      const inflate = new DecompressionStream(format);
      this.writable = inflate.writable as WritableStream<Uint8Array>;
      this.readable = (inflate.readable as ReadableStream<Uint8Array>).pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            charge(chunk.byteLength);
            controller.enqueue(chunk);
          },
        }),
      );
    }
  };
}
