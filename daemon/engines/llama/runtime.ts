// One llama.cpp runtime per process. It never builds or downloads anything: only the prebuilt binaries that
// shipped inside the npm package are used, and models load from local paths only.
import { getLlama, LlamaLogLevel, type Llama } from 'node-llama-cpp';

let runtime: Promise<Llama> | undefined;

export interface RuntimeOptions {
  gpu: 'auto' | 'off';
  threads: number;
  log?: (level: 'warn' | 'error', message: string) => void;
}

export function llamaRuntime(options: RuntimeOptions): Promise<Llama> {
  runtime ??= getLlama({
    build: 'never',
    usePrebuiltBinaries: true,
    gpu: options.gpu === 'off' ? false : 'auto',
    maxThreads: options.threads,
    progressLogs: false,
    logLevel: LlamaLogLevel.warn,
    logger(level, message) {
      const text = message.trim();
      if (!text) return;
      options.log?.(level === LlamaLogLevel.error || level === LlamaLogLevel.fatal ? 'error' : 'warn', text);
    },
  });
  return runtime;
}
